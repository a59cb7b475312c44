"""The controller's side of the node lock: who this run is, whether a holder still lives,
and the run directory through which the run's lease renewers learn that it ended.

A run is one ``ansible-playbook`` process (the main process: every worker is its child).
Its holder id is ``<controller host>:<pid>:<start>``, the start being the process's
start time in clock ticks since boot (``/proc/<pid>/stat``), so that a later process
with the same pid is another holder. A nested run (the sweep's applier runs
``speculative-apply.yml`` while ``sweep.yml`` holds the canary's node) shares its
parent's id through :data:`HOLDER_ENV`.

The run directory (:func:`run_dir`, private to the user) holds one pid file per lease
renewer the run started (``renewer-<node>.pid``, written by the action plugin) and, once
the run ends in order, the marker ``ended`` (the ``node_lock`` callback writes it and
waits for the renewers to release their locks). A renewer that finds the run's process
gone without that marker (a killed controller) stops renewing and releases nothing: the
lease runs out, or a run from this controller sees the holder's process gone and takes
the lock over at once.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ENDED",
    "HOLDER_ENV",
    "RunIdentity",
    "holder_gone",
    "mark_ended",
    "process_alive",
    "process_start",
    "renewer_pids",
    "run_dir",
    "run_identity",
    "wait_renewers",
]

HOLDER_ENV = "SPECOPS_NODE_LOCK_HOLDER"  # a parent run's holder id, for nested runs
ENDED = "ended"


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' when unknown: no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _started_at(start: str) -> str:
    """ISO time of a process start given in ticks since boot ('' when unknown)."""
    try:
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
            if line.startswith("btime ")
        )
        epoch = btime + int(start) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return ""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def process_alive(pid: int, start: str = "") -> bool:
    """Whether process ``pid`` lives (and, when ``start`` is known, is the same process)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    if start:
        now = process_start(pid)
        return now in ("", start)
    return True


@dataclass(frozen=True)
class RunIdentity:
    """This run as a lock holder."""

    id: str
    controller: str
    user: str
    pid: int
    pid_start: str
    playbook: str
    run_started_at: str
    inherited: bool = False  # the id is a parent run's (HOLDER_ENV)

    def holder(self, **extra: Any) -> dict[str, Any]:
        out = asdict(self)
        out.pop("inherited")
        out.update({k: v for k, v in extra.items() if v not in (None, "")})
        return out


def run_identity(
    main_pid: int, playbooks: list[str], environ: Mapping[str, str] | None = None
) -> RunIdentity:
    """The identity of the run whose main process is ``main_pid``."""
    env = os.environ if environ is None else environ
    controller = socket.gethostname()
    start = process_start(main_pid)
    own = f"{controller}:{main_pid}:{start}"
    parent = env.get(HOLDER_ENV, "").strip()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return RunIdentity(
        id=parent or own,
        controller=controller,
        user=user,
        pid=main_pid,
        pid_start=start,
        playbook=" ".join(os.path.basename(p) for p in playbooks) or "?",
        run_started_at=_started_at(start),
        inherited=bool(parent),
    )


def holder_gone(holder: Mapping[str, Any], controller: str | None = None) -> bool:
    """Whether ``holder`` ran on this controller and its process is gone (then its lock
    can be taken over at once). Another controller's holder is never judged here."""
    here = socket.gethostname() if controller is None else controller
    if holder.get("controller") != here:
        return False
    try:
        pid = int(holder.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    return pid > 0 and not process_alive(pid, str(holder.get("pid_start") or ""))


def run_dir(pid: int, start: str, base: str | None = None) -> Path:
    """The run's directory (made 0700 when missing)."""
    root = Path(base or tempfile.gettempdir()) / f"specops-node-lock-{os.getuid()}"
    path = root / f"{pid}-{start or 'x'}"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        root.chmod(0o700)
    return path


def renewer_pids(directory: Path) -> dict[str, int]:
    """Node -> pid of each live renewer the run started."""
    out: dict[str, int] = {}
    for f in sorted(directory.glob("renewer-*.pid")):
        try:
            pid = int(f.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            continue
        if process_alive(pid):
            out[f.name[len("renewer-") : -len(".pid")]] = pid
    return out


def mark_ended(directory: Path) -> None:
    """Tell the run's renewers that it ended in order: they release their locks."""
    (directory / ENDED).write_text(str(time.time()), encoding="ascii")


def wait_renewers(directory: Path, timeout: float, poll: float = 0.1) -> dict[str, int]:
    """Wait until the run's renewers are gone (their locks released); those still
    running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = renewer_pids(directory)
    while left and time.monotonic() < deadline:
        time.sleep(poll)
        left = renewer_pids(directory)
    return left
