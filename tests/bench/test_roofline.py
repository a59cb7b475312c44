"""Roofline inputs: the GPU catalogue's bandwidth x cards per replica, bytes per token
from the model's safetensors (active experts for MoE), and the reports that show it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue
from ansible_collections.specops.infra.plugins.module_utils.model_weights import (
    ModelWeightsError,
    read_weights,
)

from specops.bench.plan import plan_from_mapping
from specops.bench.roofline import Hardware, parallel_sizes, resolve

BF16 = 2


def _shard(path: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    """A real safetensors file: 8-byte header length, JSON header, zeroed data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = BF16
        for d in shape:
            size *= d
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def _dense(model: Path, tied: bool = False) -> int:
    tensors = {
        "model.embed_tokens.weight": (1000, 64),
        "model.layers.0.self_attn.q_proj.weight": (64, 64),
        "model.layers.0.mlp.up_proj.weight": (256, 64),
        "model.norm.weight": (64,),
    }
    if not tied:
        tensors["lm_head.weight"] = (1000, 64)
    _shard(model / "model.safetensors", tensors)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    # untied: lm_head is read, embed_tokens only indexed; tied: embed_tokens is the head
    return BF16 * (64 * 64 + 256 * 64 + 64 + 1000 * 64)


def test_dense_model_bytes_leave_out_the_input_embedding(tmp_path: Path) -> None:
    expected = _dense(tmp_path)
    w = read_weights(str(tmp_path))
    assert w["bytes_per_token"] == expected  # lm_head read, embed_tokens only indexed
    assert w["input_embedding_bytes"] == BF16 * 1000 * 64
    assert w["total_bytes"] == expected + BF16 * 1000 * 64
    assert w["num_experts"] is None


def test_tied_embedding_is_the_output_head(tmp_path: Path) -> None:
    expected = _dense(tmp_path, tied=True)
    assert read_weights(str(tmp_path))["bytes_per_token"] == expected


def test_moe_counts_the_active_experts_of_sharded_weights(tmp_path: Path) -> None:
    """A Qwen3-MoE-like checkpoint in two shards with an index: 8 experts, 2 per token,
    a shared expert, a vision tower and an MTP layer (both left out)."""
    expert = {f"model.layers.0.mlp.experts.{e}.up_proj.weight": (32, 64) for e in range(8)}
    _shard(tmp_path / "model-00001-of-00002.safetensors", {
        "model.embed_tokens.weight": (100, 64), "lm_head.weight": (100, 64),
        "model.layers.0.mlp.shared_expert.up_proj.weight": (32, 64),
        "model.layers.0.mlp.gate.weight": (8, 64),
    })  # fmt: skip
    _shard(tmp_path / "model-00002-of-00002.safetensors", {
        **expert, "model.visual.blocks.0.attn.qkv.weight": (64, 64),
        "mtp.layers.0.mlp.up_proj.weight": (32, 64),
    })  # fmt: skip
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    names = [*expert, "lm_head.weight"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        n: second if ".experts." in n else first for n in names
    }}))  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3_vl_moe", "text_config": {"num_experts": 8, "num_experts_per_tok": 2},
    }))  # fmt: skip
    w = read_weights(str(tmp_path))
    assert w["shards"] == 2
    assert (w["num_experts"], w["experts_per_token"]) == (8, 2)
    one_expert = BF16 * 32 * 64
    assert w["expert_bytes"] == 8 * one_expert
    assert w["active_expert_bytes"] == 2 * one_expert
    dense = BF16 * (100 * 64 + 32 * 64 + 8 * 64)  # lm_head, shared expert, router
    assert w["bytes_per_token"] == dense + 2 * one_expert
    assert w["left_out_bytes"] == BF16 * (100 * 64 + 64 * 64 + 32 * 64)


def test_unreadable_weights_say_why(tmp_path: Path) -> None:
    with pytest.raises(ModelWeightsError, match="is not a directory"):
        read_weights(str(tmp_path / "missing"))
    with pytest.raises(ModelWeightsError, match=r"holds no \*\.safetensors"):
        read_weights(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 10) + b"not json!!")
    with pytest.raises(ModelWeightsError, match="header is not JSON"):
        read_weights(str(tmp_path))


def test_parallel_sizes_from_vllm_and_sglang_arguments() -> None:
    assert parallel_sizes(["--tensor-parallel-size", "4", "-pp", "2"]) == (4, 2)
    assert parallel_sizes(["--tp-size=2", "--mem-fraction-static", "0.88"]) == (2, None)
    assert parallel_sizes(["--max-model-len", "512"]) == (None, None)


def test_resolve_reads_the_catalogue_and_the_cards_of_one_replica() -> None:
    pro = gpu_catalogue.by_id("rtx-pro-6000")
    assert pro is not None
    hw = resolve({"gpu": pro.name, "gpu_count": 4, "engine_args": ["--tp-size", "2"],
                  "weights": {"bytes_per_token": 5.4e10, "model_dir": "/m", "shards": 12,
                              "total_bytes": 5.5e10}})  # fmt: skip
    assert isinstance(hw, Hardware)
    assert hw.bandwidth_gb_s == 2 * pro.bandwidth_gb_s
    assert (hw.cards, hw.gpu_count, hw.per_card_gb_s) == (2, 4, pro.bandwidth_gb_s)
    assert pro.bandwidth_source in hw.bandwidth_source
    assert hw.bytes_per_token == 5.4e10
    assert hw.bytes_source.startswith("model weights in /m (12 safetensors file(s)")
    given = resolve({"gpu": "10de:2230", "bytes_per_token": 1e9, "bytes_source": "inventory"})
    assert isinstance(given, Hardware)
    assert given.bandwidth_gb_s == 768.0
    assert given.bytes_source == "inventory"


@pytest.mark.parametrize(
    ("section", "reason"),
    [
        (None, "no roofline inputs in the plan"),
        ({"unknown": "the container describes no GPU"}, "the container describes no GPU"),
        ({"gpu": "NVIDIA B300", "bytes_per_token": 1.0}, "'NVIDIA B300' is not in the GPU cat"),
        ({"gpu": "h200", "gpu_count": 1, "tp_size": 2, "bytes_per_token": 1.0},
         "tensor x pipeline parallel size 2 x 1 needs 2 cards, the container has 1"),
        ({"gpu": "h200"}, "the model's bytes per token are not known"),
    ],
)  # fmt: skip
def test_resolve_says_why_there_is_no_roofline(section: dict | None, reason: str) -> None:
    got = resolve(section)
    assert isinstance(got, str)
    assert got.startswith(reason) or reason in got


def test_plan_roofline_section_round_trips_and_drops_empty_values() -> None:
    plan = plan_from_mapping({"base_url": "http://h:1", "roofline": {
        "gpu": "rtx-a6000", "gpu_count": 2, "engine_args": ["--tp-size", 2],
        "bytes_per_token": None, "unknown": "", "weights": {"bytes_per_token": 3}}})  # fmt: skip
    assert plan.roofline is not None
    assert plan.roofline.engine_args == ("--tp-size", "2")
    assert plan.roofline.unknown is None
    again = plan_from_mapping(plan.to_dict())
    assert again.roofline == plan.roofline
    assert plan_from_mapping({"base_url": "http://h:1", "roofline": {"gpu": ""}}).roofline is None


def _roofline_play(tmp_path: Path, host_vars: dict) -> dict:
    """roles/benchmark/tasks/roofline.yml for real (Ansible on localhost), its fact back."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "roofline.json"
    play = [{"hosts": "localhost", "gather_facts": False, "vars": host_vars, "tasks": [
        {"ansible.builtin.include_role": {"name": "benchmark", "tasks_from": "roofline.yml"}},
        {"ansible.builtin.copy": {"content": "{{ benchmark_roofline | to_json }}",
                                  "dest": str(out), "mode": "0600"}},
    ]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False, cwd=repo,
        env={**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(out.read_text())


def test_the_benchmark_role_reads_the_roofline_inputs_from_the_inventory(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    expected = _dense(model)
    got = _roofline_play(tmp_path, {
        "lxc_gpu_passthrough_gpu_model": "NVIDIA RTX A6000", "lxc_gpu_passthrough_gpu_count": 2,
        "inference_service_engine_args": ["--tensor-parallel-size", "2"],
        "inference_engine_model": str(model),
    })  # fmt: skip
    assert got["weights"]["bytes_per_token"] == expected
    assert got["unknown"] is None
    hw = resolve(plan_from_mapping({"base_url": "http://h:1", "roofline": got}).roofline)
    assert isinstance(hw, Hardware)
    assert (hw.cards, hw.bandwidth_gb_s, hw.bytes_per_token) == (2, 2 * 768.0, expected)
    cpu_only = _roofline_play(tmp_path, {"inference_engine_model": str(model)})
    assert cpu_only["unknown"].startswith("the container describes no GPU")
    assert resolve(cpu_only).startswith("the container describes no GPU")  # type: ignore[union-attr]
