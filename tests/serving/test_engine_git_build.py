"""Engine builds from a pull-request ref, from a LOCAL git repository (no network).

The inference_engine role builds a git ref the way this test does, with the same code
and commands: ``git ls-remote`` resolves the ref to a commit, the build plan
(``module_utils/engine/build.py``, the role's ``engine_build_plan`` filter) gives the
requirement (``sglang @ git+REPO@COMMIT#subdirectory=python``; ``vllm @ git+REPO@COMMIT``
with ``VLLM_USE_PRECOMPILED=1``), the key and the venv path; the pinned uv builds a
relocatable venv and installs it; the ``engine_flags`` code reads the installed
launcher's own argparse parser. SGLang and vLLM cannot run here (CUDA, multi-GB
wheels), so the repository holds a tiny stand-in package under each engine's name and
layout, whose launcher parses the engine's speculative flags; its "pull request" is a
Python-only commit at ``refs/pull/N/head`` that adds DDTREE and
``--speculative-ddtree-budget`` (SGLang PR #29907's surface) or the ``dflash`` method.
What is proven: the ref and commit reach the build, the venv carries the key's digest
(another commit, another venv), and what the PR adds is read from the build's flags, so
the seeds' DDTree profile renders against the PR build and is refused by the base one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine import build as engine_build
from ansible_collections.specops.infra.plugins.module_utils.engine import flags as engine_flags
from ansible_collections.specops.infra.plugins.module_utils.engine import source as engine_source

from specops.errors import ValidationError
from specops.speculative import Engine, SpeculativeProfile, to_argv, to_env

UV = Path(sys.executable).parent / "uv"
PYTHON = shutil.which("python3.11") or sys.executable

_BACKEND = '''
"""A PEP 517 backend in the tree: builds a pure-Python wheel with the stdlib only."""
import base64, hashlib, os, zipfile

NAME, VERSION = {name!r}, {version!r}


def get_requires_for_build_wheel(config_settings=None):
    return []


def _record(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={{digest}},{{len(data)}}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = f"{{NAME.replace('-', '_')}}-{{VERSION}}"
    files = {{}}
    for root, _, names in os.walk(NAME):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as fh:
                    files[path] = fh.read()
    files[f"{{dist}}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n".encode()
    )
    files[f"{{dist}}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\\nGenerator: specops-test\\nRoot-Is-Purelib: true\\n"
        b"Tag: py3-none-any\\n"
    )
    record = "".join(f"{{p}},{{_record(d)}}\\n" for p, d in files.items())
    record += f"{{dist}}.dist-info/RECORD,,\\n"
    wheel = f"{{dist}}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{{dist}}.dist-info/RECORD", record)
    return wheel
'''

_PYPROJECT = """[build-system]
requires = []
build-backend = "_backend"
backend-path = ["."]

[project]
name = "{name}"
version = "{version}"
"""

# The launchers parse the engine's own speculative flags with argparse, as the real
# ones do; ``{extra}`` is where the "pull request" adds its flags.
_SGLANG_LAUNCHER = """import argparse

ALGORITHMS = {algorithms!r}


def parser():
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--speculative-algorithm", choices=ALGORITHMS)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-dflash-draft-window-size", type=int)
{extra}    return p


if __name__ == "__main__":
    print(parser().parse_args())
"""

_VLLM_LAUNCHER = """import argparse


def parser():
    p = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server")
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--speculative-config")
    p.add_argument("--max-model-len", type=int)
    return p


if __name__ == "__main__":
    print(parser().parse_args())
"""

_VLLM_SPECULATIVE = """import dataclasses
from typing import Literal

SpeculativeMethod = Literal[{methods}]
MTPModelTypes = Literal["mtp"]


@dataclasses.dataclass
class SpeculativeConfig:
    method: str = ""
    model: str = ""
    num_speculative_tokens: int = 0
"""


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _sglang_files(algorithms: list[str], extra: str) -> dict[str, str]:
    pkg = {"name": "sglang", "version": "0.5.11"}
    return {
        "python/pyproject.toml": _PYPROJECT.format(**pkg),
        "python/_backend.py": _BACKEND.format(**pkg),
        "python/sglang/__init__.py": "",
        "python/sglang/launch_server.py": _SGLANG_LAUNCHER.format(
            algorithms=algorithms, extra=extra
        ),
    }


def _vllm_files(methods: list[str]) -> dict[str, str]:
    pkg = {"name": "vllm", "version": "0.20.1"}
    return {
        "pyproject.toml": _PYPROJECT.format(**pkg),
        "_backend.py": _BACKEND.format(**pkg),
        "vllm/__init__.py": "",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/api_server.py": _VLLM_LAUNCHER,
        "vllm/config/__init__.py": "",
        "vllm/config/speculative.py": _VLLM_SPECULATIVE.format(
            methods=", ".join(repr(m) for m in methods)
        ),
    }


BASE_ALGOS = ["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
CASES = {
    # SGLang PR #29907: DDTREE and --speculative-ddtree-budget (a Python-only change)
    "sglang": (
        "refs/pull/29907/head",
        _sglang_files(BASE_ALGOS, ""),
        _sglang_files(
            [*BASE_ALGOS, "DDTREE"],
            '    p.add_argument("--speculative-ddtree-budget", type=int)\n',
        ),
    ),
    # a vLLM 0.20.1 branch build that adds the dflash method
    "vllm": (
        "refs/pull/40898/head",
        _vllm_files(["ngram", "eagle", "draft_model", "mtp"]),
        _vllm_files(["ngram", "eagle", "draft_model", "mtp", "dflash"]),
    ),
}


def _repo(tmp: Path, engine: str) -> tuple[Path, str, str, str]:
    """A repository with a base commit on main and a 'pull request' at its ref."""
    ref, base_files, pr_files = CASES[engine]
    repo = tmp / f"{engine}-repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _write(repo, base_files)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    _write(repo, pr_files)
    _git(repo, "commit", "-q", "-am", "the pull request")
    pr = _git(repo, "rev-parse", "HEAD")
    _git(repo, "update-ref", ref, pr)
    _git(repo, "reset", "-q", "--hard", base)
    return repo, ref, base, pr


def _build(tmp: Path, plan: engine_build.BuildPlan) -> Path:
    """The role's build.yml commands: uv venv --relocatable, uv pip install (no index)."""
    env = {**os.environ, "UV_CACHE_DIR": str(tmp / "uv-cache"), "UV_PYTHON_DOWNLOADS": "never",
           "UV_NO_PROGRESS": "1", **plan.build_env}  # fmt: skip
    partial = Path(plan.venv + ".partial")
    subprocess.run(
        [str(UV), "venv", "--relocatable", "--clear", "--no-config", "--python", PYTHON,
         str(partial)], env=env, check=True, capture_output=True,
    )  # fmt: skip
    proc = subprocess.run(
        [str(UV), "pip", "install", "--no-config", "--python", str(partial / "bin" / "python"),
         "--no-index", *plan.requirements], env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    partial.rename(plan.venv)
    return Path(plan.venv)


def _plan(tmp: Path, engine: str, repo: Path, ref: str, commit: str) -> engine_build.BuildPlan:
    version = "0.5.11" if engine == "sglang" else "0.20.1"
    return engine_build.plan(
        engine=engine, version=version, git_ref=ref, git_commit=commit,
        git_repo=f"file://{repo}", python=f"{PYTHON} {sys.version.split()[0]}",
        app_dir=str(tmp / "opt"),
    )  # fmt: skip


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_pr_ref_build_from_a_local_repository(tmp_path: Path, engine: str) -> None:
    repo, ref, base, pr = _repo(tmp_path, engine)
    # The role's resolution: git ls-remote --exit-code REPO REF
    resolved = _git(tmp_path, "ls-remote", "--exit-code", f"file://{repo}", ref).split()[0]
    assert resolved == pr
    plan = _plan(tmp_path, engine, repo, ref, resolved)
    assert plan.key["git_commit"] == pr
    assert plan.key["git_ref"] == ref
    expected = (
        f"sglang @ git+file://{repo}@{pr}#subdirectory=python"
        if engine == "sglang"
        else f"vllm @ git+file://{repo}@{pr}"
    )
    assert plan.requirements == (expected,)
    assert plan.build_env == ({"VLLM_USE_PRECOMPILED": "1"} if engine == "vllm" else {})
    assert Path(plan.venv).name == f"{engine}-git-{pr[:12]}-{plan.digest}"

    venv = _build(tmp_path, plan)
    flag_set = engine_flags.read_flag_set(str(venv / "bin" / "python"), engine)
    version = "0.5.11" if engine == "sglang" else "0.20.1"
    assert flag_set["version"] == version
    installed = Engine.parse(engine, version, flag_set=flag_set)

    # The base commit is another build: another venv, and without the PR's surface.
    base_plan = _plan(tmp_path, engine, repo, "refs/heads/main", base)
    assert base_plan.venv != plan.venv
    base_flags = engine_flags.read_flag_set(
        str(_build(tmp_path, base_plan) / "bin" / "python"), engine
    )
    base_engine = Engine.parse(engine, version, flag_set=base_flags)

    if engine == "sglang":
        assert engine_flags.capabilities(flag_set) == ["ddtree", "draft_window"]
        assert engine_flags.capabilities(base_flags) == ["draft_window"]
        seeds = SpeculativeProfile.from_mapping(
            {"method": "ddtree", "draft_model": "/srv/d", "tree_budget": 8, "topk": 4,
             "draft_window": 2048}
        )  # fmt: skip
        assert to_argv(seeds, installed) == [
            "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/srv/d",
            "--speculative-dflash-draft-window-size", "2048", "--speculative-ddtree-budget", "8",
        ]  # fmt: skip
        assert to_env(seeds, installed) == {"SGLANG_DDTREE_MAX_TOPK": "4"}
        with pytest.raises(ValidationError, match="cannot do 'ddtree'"):
            to_argv(seeds, base_engine)
        # a flag neither build's parser has is refused, naming the installed build
        odd = SpeculativeProfile.from_mapping(
            {"method": "dflash", "draft_model": "/srv/d",
             "extra_args": ["--speculative-ddtree-depth", "4"]}
        )  # fmt: skip
        with pytest.raises(ValidationError, match=r"is not the installed sglang 0\.5\.11 flag"):
            to_argv(odd, installed)
    else:
        dflash = SpeculativeProfile.from_mapping(
            {"method": "dflash", "draft_model": "/srv/d", "num_draft_tokens": 16}
        )
        config = '{"method":"dflash","model":"/srv/d","num_speculative_tokens":15}'
        assert to_argv(dflash, installed) == ["--speculative-config", config]
        with pytest.raises(ValidationError, match="cannot do 'dflash'"):
            to_argv(dflash, base_engine)
        # The recorded list of the 0.20.1 release (read on an H200) offers dflash; a
        # build's own flags decide for that build (its base above does not).
        assert to_argv(dflash, Engine.parse("vllm", "0.20.1")) == ["--speculative-config", config]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_base_with_its_pull_request_applied_builds_from_the_tree(
    tmp_path: Path, engine: str
) -> None:
    """The build as operators make it (issue 49): the base commit with the pull request
    applied by ``engine_source`` (the ``inference_engine_git_patches`` route), installed
    from that tree by the same uv commands; the build's own parser shows what the pull
    request added, and the venv is another one than the pull request's ref alone."""
    repo, ref, base, pr = _repo(tmp_path, engine)
    patches = [{"ref": ref, "commit": pr}]
    version = "0.5.11" if engine == "sglang" else "0.20.1"
    plan = engine_build.plan(
        engine=engine, version=version, git_ref="refs/heads/main", git_commit=base,
        git_repo=f"file://{repo}", python=f"{PYTHON} {sys.version.split()[0]}",
        app_dir=str(tmp_path / "opt"), git_patches=patches,
    )  # fmt: skip
    made = engine_source.prepare(
        f"file://{repo}", engine_source.Patch("refs/heads/main", base),
        [engine_source.Patch(ref, pr)], plan.source_dir,
    )  # fmt: skip
    assert made["changed"] is True
    assert Path(plan.venv).name.startswith(f"{engine}-git-{base[:12]}+1-")
    flag_set = engine_flags.read_flag_set(str(_build(tmp_path, plan) / "bin" / "python"), engine)
    if engine == "sglang":
        assert engine_flags.capabilities(flag_set) == ["ddtree", "draft_window"]
    else:
        assert "dflash" in flag_set["speculative"]["methods"]
    alone = _plan(tmp_path, engine, repo, ref, pr)
    assert alone.venv != plan.venv
