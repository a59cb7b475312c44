"""The GPU engine installs are known to resolve (metadata only, from PyPI).

No test installs the CUDA builds (the lab serves vLLM CPU, and a CUDA SGLang or vLLM
venv is many GB). This resolves each one's FULL pinned requirement set, exactly the
requirement lines the inference_engine role installs (``engine_build.plan``), for the
serving container's Python (Debian bookworm: CPython 3.11) and platform (x86_64, glibc
2.36: ``x86_64-manylinux_2_36``) with the uv release the role pins: ``uv pip compile``
reads wheel metadata only (PEP 658), no multi-GB downloads. A conflict, a pin that does
not exist, or a yanked release fails the test. vLLM 0.20.1 is the release the seeds'
pull-request builds sat on (with ``VLLM_USE_PRECOMPILED=1`` a PR build takes that
release's kernels and dependency set); a PR ref itself cannot be resolved without
GitHub, which tests do not reach.

Needs PyPI (marker ``pypi``); about 5-8 s per engine here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine.build import plan

pytestmark = [pytest.mark.pypi, pytest.mark.slow]

UV = Path(sys.executable).parent / "uv"
PLATFORM = ("--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_36")


def _compile(tmp: Path, requirements: list[str]) -> subprocess.CompletedProcess[str]:
    req = tmp / "requirements.in"
    req.write_text("\n".join(requirements) + "\n")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp / "uv-cache"), "UV_NO_PROGRESS": "1"}
    return subprocess.run(
        [str(UV), "pip", "compile", "--no-config", *PLATFORM,
         "--index-url", "https://pypi.org/simple", str(req), "-o", str(tmp / "lock.txt")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _pins(lock: Path) -> dict[str, str]:
    out = {}
    for line in lock.read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, version = line.split("==", 1)
            out[name.strip().lower()] = version.split()[0]
    return out


@pytest.mark.parametrize(
    ("engine", "version", "expect"),
    [
        # SGLang 0.5.11 pins torch 2.11.0 (domain facts; its wheel's metadata)
        ("sglang", "0.5.11", {"sglang": "0.5.11", "torch": "2.11.0"}),
        ("vllm", "0.32.0", {"vllm": "0.32.0"}),
        ("vllm", "0.20.1", {"vllm": "0.20.1"}),
    ],
)
def test_gpu_engine_requirements_resolve(
    tmp_path: Path, engine: str, version: str, expect: dict[str, str]
) -> None:
    built = plan(engine=engine, version=version, python="/usr/bin/python3 3.11.2",
                 app_dir="/opt/specops")  # fmt: skip
    proc = _compile(tmp_path, list(built.requirements))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "yanked" not in proc.stderr.lower(), proc.stderr[-3000:]
    pins = _pins(tmp_path / "lock.txt")
    for name, want in expect.items():
        assert pins.get(name) == want, (name, pins.get(name))
    assert "torch" in pins, "the full set resolves, down to torch"


@pytest.mark.parametrize(
    ("requirements", "why"),
    [
        (["sglang==0.5.11", "torch==2.10.0"], "unsatisfiable"),  # a conflict
        (["sglang==0.5.999"], "no version"),  # a pin that does not exist
    ],
)
def test_a_conflict_or_missing_pin_fails(tmp_path: Path, requirements: list[str], why: str) -> None:
    proc = _compile(tmp_path, requirements)
    assert proc.returncode != 0
    assert why in proc.stderr.lower(), proc.stderr[-2000:]
