"""Oracle models: the spec, the permutation, and builds checked against their construction.

The spec and the permutation are plain Python (fast). The builds run the builder in the
lab's vLLM venv (torch): a tiny Llama target with its draft_model, DFlash and EAGLE3
partners must pass the self-check and the project's drafter preflight; a target whose
lm_head no longer follows the permutation must fail the self-check; the CI oracle's
construction (chain, MTP next-next, the noisy MTP's calibrated acceptance) is checked
again from its files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import drafter_check

from specops.errors import ValidationError
from specops_lab.oracle.lab import CI_SPEC, build_oracle, oracle_record, pythonpath
from specops_lab.oracle.spec import (
    FAMILIES,
    SPECIAL_TOKENS,
    OracleSpec,
    chain,
    cycle_of,
    folders,
    next_map,
)
from specops_lab.vllm import LabPaths, lab_paths

TINY_LLAMA = OracleSpec(
    families=("draft_model", "dflash", "eagle3"), shape="tiny", cycle=16, noise_alpha=None,
    calibration_dtype="float32",
)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"families": ["mtp", "dflash"], "shape": "tiny"},
         "oracle.families: must share one target architecture (mtp -> mimo, dflash -> llama)"),
        ({"families": ["medusa"], "shape": "tiny"}, "oracle.family: must be one of draft_model"),
        ({"families": [], "shape": "tiny"}, "oracle.families: must be a non-empty list"),
        ({"families": ["mtp"], "shape": "huge"}, "oracle.shape: must be one of tiny, cpu"),
        ({"families": ["mtp"], "shape": "tiny", "cycle": 1}, "oracle.cycle: must be in [2, 4092]"),
        ({"families": ["mtp"], "shape": "tiny", "cycle": "8"}, "oracle.cycle: must be an integer"),
        ({"families": ["mtp"], "shape": "tiny", "noise_alpha": 1.0},
         "oracle.noise_alpha: must be in [0.05, 0.95], or null"),
        ({"families": ["mtp"], "shape": "tiny", "live_layers": 8},
         "oracle.live_layers: must be < the target's 8 layers"),
        ({"families": ["dflash"], "shape": "tiny", "dflash_window": 4},
         "oracle.dflash_window: must be >= dflash_block_size (16)"),
        ({"families": ["mtp"], "shape": "tiny", "calibration_dtype": "fp8"},
         "oracle.calibration_dtype: must be one of bfloat16, float32"),
        ({"families": ["mtp"], "shape": "tiny", "colour": 1}, "oracle.colour: unknown key"),
    ],
)  # fmt: skip
def test_spec_refuses_naming_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        OracleSpec.from_mapping(data)
    assert message in str(err.value)


def test_families_share_a_target() -> None:
    spec = OracleSpec.from_mapping({"families": "eagle3,draft_model", "shape": "mistral7b"})
    assert spec.families == ("draft_model", "eagle3")
    assert spec.target == "llama"
    assert folders(spec) == ("target", "target-noisy", "drafter", "eagle3")
    assert OracleSpec(("mtp",), "mimo7b").target == "mimo"
    assert set(FAMILIES) == {"draft_model", "mtp", "dflash", "eagle3"}


@pytest.mark.parametrize("cycle", [2, 8, 64, 1000])
def test_next_map_is_cycles_of_the_length_asked(cycle: int) -> None:
    vocab = 4096
    nxt = next_map(vocab, cycle, seed=7)
    assert sorted(nxt) == list(range(vocab))  # a permutation
    specials = len(SPECIAL_TOKENS)
    assert all(nxt[i] == i for i in range(specials))  # fixed points
    lengths = Counter(cycle_of(nxt, x) for x in range(specials, vocab))
    rest = vocab - specials
    # every cycle has `cycle` ids but the last, which takes the remainder (>= 2 ids)
    assert lengths[cycle] >= cycle * (rest // cycle - 1)
    assert sum(lengths.values()) == rest
    assert all(length >= 2 for length in lengths)
    assert nxt == next_map(vocab, cycle, seed=7)
    assert nxt != next_map(vocab, cycle, seed=8)


def test_chain_walks_the_permutation() -> None:
    nxt = next_map(64, 4, seed=1)
    start = 10
    walk = chain(nxt, start, 9)
    assert walk[0] == nxt[start]
    assert walk[4] == walk[0]  # period 4
    assert start in walk


def test_ci_spec_is_the_mimo_family_on_the_cpu_shape() -> None:
    assert CI_SPEC.families == ("mtp",)
    assert CI_SPEC.shape == "cpu"
    assert CI_SPEC.calibration_dtype == "float32"  # the lab's CPU vLLM serves in float32
    assert folders(CI_SPEC) == ("target", "target-noisy", "drafter")


def test_build_refuses_a_folder_that_is_not_a_build(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("someone's file")
    with pytest.raises(ValidationError, match="exists and is not an oracle build"):
        build_oracle(lab_paths(tmp_path / "cache"), CI_SPEC, out=tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "someone's file"


@pytest.fixture(scope="module")
def tiny_llama(vllm_lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("oracle") / "tiny-llama"
    # small shards: the layers' tensors span several files, as a 7B build's do
    return build_oracle(vllm_lab, TINY_LLAMA, out=out, shard_mb=0.5).path


def test_tiny_llama_family_passes_its_checks_and_the_preflight(tiny_llama: Path) -> None:
    record = oracle_record(tiny_llama)
    checks = record["checks"]
    assert checks["failures"] == []
    assert checks["target"]["chain_match"] == 1.0
    assert checks["drafter"]["chain_match"] == 1.0  # acceptance 1 by construction
    assert checks["target"]["min_margin"] >= TINY_LLAMA.margin / 4
    assert set(record["folders"]) == {"target", "drafter", "dflash", "eagle3"}
    # the project's drafter preflight, as the role runs it, on the files as written
    for method in ("dflash", "eagle3"):
        block = 16 if method == "dflash" else None
        report = drafter_check.check(
            method, str(tiny_llama / "target"), str(tiny_llama / method), num_draft_tokens=block
        )
        assert report.findings == [], method
    dflash = json.loads((tiny_llama / "dflash" / "config.json").read_text())
    assert dflash["architectures"] == ["DFlashDraftModel"]  # vLLM 0.20.1: DFlashQwen3ForCausalLM
    assert dflash["dflash_config"]["block_size"] == 16
    assert dflash["dflash_config"]["mask_token_id"] == SPECIAL_TOKENS.index("<|MASK|>")
    assert dflash["dflash_config"]["target_layer_ids"] == [1, 5]  # the 8-layer target's default
    assert dflash["layer_types"] == ["sliding_attention", "full_attention"]
    assert dflash["use_sliding_window"] is True
    assert dflash["sliding_window"] == 2048
    eagle = json.loads((tiny_llama / "eagle3" / "config.json").read_text())
    assert eagle["architectures"] == ["LlamaForCausalLMEagle3"]
    assert eagle["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert eagle["draft_vocab_size"] == 1024
    index = json.loads((tiny_llama / "eagle3" / "model.safetensors.index.json").read_text())
    assert {"d2t", "t2d", "fc.weight", "lm_head.weight", "midlayer.hidden_norm.weight"} <= set(
        index["weight_map"]
    )
    layer_shards = sorted(f.name for f in (tiny_llama / "target").glob("layers-*.safetensors"))
    assert len(layer_shards) > 1, layer_shards
    # the drafter shares the target's embeddings and lm_head: the same shard, hard-linked
    emb = [f for f in (tiny_llama / "drafter").iterdir() if f.name.startswith("embed")]
    assert emb
    assert emb[0].stat().st_ino == (tiny_llama / "target" / emb[0].name).stat().st_ino


def test_self_check_fails_a_target_that_leaves_the_chain(
    tiny_llama: Path, vllm_lab: LabPaths, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_llama, broken)
    script = (
        "import sys; from safetensors.torch import load_file, save_file\n"
        "p = sys.argv[1]; t = load_file(p); h = t['lm_head.weight']\n"
        "t['lm_head.weight'] = h.roll(1, 0).contiguous(); save_file(t, p)\n"
    )
    head = next((broken / "target").glob("head*.safetensors"))  # copytree: its own file
    subprocess.run([str(vllm_lab.python), "-c", script, str(head)], check=True)
    proc = subprocess.run(
        [str(vllm_lab.python), "-m", "specops_lab.oracle", "check", str(broken)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "target: greedy output follows the chain at" in proc.stderr


def test_ci_oracle_construction_holds_from_its_files(vllm_oracle: Path, vllm_lab: LabPaths) -> None:
    """The chain, MTP's next-next at every depth, the noisy MTP's calibrated acceptance:
    measured again from the files the CPU servers load."""
    proc = subprocess.run(
        [str(vllm_lab.python), "-m", "specops_lab.oracle", "check", str(vllm_oracle)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    record = oracle_record(vllm_oracle)
    checks = record["checks"]
    assert checks["mtp"]["per_position"] == [1.0] * 5
    assert checks["mtp"]["next_next_in_forward"] == 1.0
    noisy = checks["target-noisy"]["per_position"]
    assert abs(noisy[0] - CI_SPEC.noise_alpha) <= 0.15  # type: ignore[operator]
    assert noisy == sorted(noisy, reverse=True)  # an interior best depth needs a falling curve
    assert record["calibration"]["target_alpha"] == CI_SPEC.noise_alpha
