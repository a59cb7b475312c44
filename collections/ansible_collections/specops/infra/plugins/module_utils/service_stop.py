"""Graceful stop of an inference unit: ``systemctl stop``, then wait for its GPU memory.

The processes of a unit are its ``MainPID`` and that process's descendants (read from
``/proc``, so it works on cgroup v1, v2 and hybrid hosts alike). After ``systemctl
stop`` returns, the wait ends when none of those processes is alive and, where
``nvidia-smi`` exists, when their GPU memory is released (:func:`wait_released`).
Inside an LXC container ``nvidia-smi`` lists compute apps by their PIDs on the *host*
(the driver's PID namespace), which never equal the container's: there the apps the GPU
ran before the stop, none of them visible in this ``/proc``, must all be gone. In the
lab there is no GPU: the wait is for process exit.

Nothing here signals a process itself: systemd stops the unit (its ``KillMode`` and
``TimeoutStopSec`` decide how), this code only watches. Stdlib only (it runs in the
container).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "StopResult",
    "UnitState",
    "alive",
    "descendants",
    "gpu_pids",
    "parse_compute_apps",
    "parse_show",
    "show_unit",
    "stop_unit",
    "wait_released",
]


@dataclass(frozen=True)
class UnitState:
    load_state: str
    active_state: str
    main_pid: int


@dataclass(frozen=True)
class StopResult:
    changed: bool
    pids: list[int]
    seconds: float
    gpu_checked: bool
    remaining: list[int]


def parse_show(text: str) -> UnitState:
    """Parse ``systemctl show -p LoadState -p ActiveState -p MainPID`` output."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    pid = values.get("MainPID", "0").strip()
    return UnitState(
        load_state=values.get("LoadState", "").strip(),
        active_state=values.get("ActiveState", "").strip(),
        main_pid=int(pid) if pid.isdigit() else 0,
    )


def show_unit(unit: str) -> UnitState:
    proc = subprocess.run(
        ["systemctl", "show", unit, "-p", "LoadState", "-p", "ActiveState", "-p", "MainPID"],
        capture_output=True,
        text=True,
        check=False,
    )
    return parse_show(proc.stdout)


def _stat_fields(proc_root: Path, pid: int) -> list[str] | None:
    try:
        raw = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return None
    # After the parenthesised command: state ppid pgrp ...
    return raw.rsplit(")", 1)[-1].split()


def descendants(pid: int, proc_root: Path = Path("/proc")) -> list[int]:
    """``pid`` and every live process below it, from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(proc_root, int(entry.name))
        if fields and len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        if current in out:
            continue
        out.append(current)
        todo.extend(children.get(current, []))
    return sorted(p for p in out if _stat_fields(proc_root, p) is not None)


def alive(pids: Iterable[int], proc_root: Path = Path("/proc")) -> list[int]:
    """The ``pids`` that still exist and are not zombies."""
    out = []
    for pid in pids:
        fields = _stat_fields(proc_root, pid)
        if fields is not None and fields[0] not in ("Z", "X"):
            out.append(pid)
    return out


def parse_compute_apps(text: str) -> list[int]:
    """PIDs from ``nvidia-smi --query-compute-apps=pid --format=csv,noheader``."""
    return [
        int(line.split(",")[0])
        for line in text.splitlines()
        if line.strip().split(",")[0].strip().isdigit()
    ]


def gpu_pids(nvidia_smi: str) -> list[int]:
    proc = subprocess.run(
        [nvidia_smi, "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        # nvidia-smi prints its errors on stdout (NVML's, an unknown field)
        why = (proc.stderr.strip() or proc.stdout.strip())[-500:]
        raise RuntimeError(f"{nvidia_smi} failed ({proc.returncode}): {why}")
    return parse_compute_apps(proc.stdout)


def stop_unit(
    unit: str,
    *,
    timeout: float,
    check_mode: bool = False,
    nvidia_smi: str | None = None,
    interval: float = 1.0,
    proc_root: Path = Path("/proc"),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StopResult:
    """Stop ``unit`` with systemd and wait until its processes and GPU memory are gone.

    ``nvidia_smi``: path of nvidia-smi, or None to look it up on PATH (absent in the
    lab: the wait is for process exit only). Raises RuntimeError when ``systemctl
    stop`` fails or the processes outlive ``timeout``.
    """
    start = clock()
    state = show_unit(unit)
    pids = descendants(state.main_pid, proc_root) if state.main_pid > 0 else []
    running = state.active_state not in ("inactive", "failed", "") or bool(pids)
    if state.load_state == "not-found" or not running:
        return StopResult(False, [], 0.0, False, [])
    if check_mode:
        return StopResult(True, pids, 0.0, False, [])
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi is not None and not os.access(smi, os.X_OK):
        smi = None
    read_gpu = (lambda: gpu_pids(smi)) if smi is not None else None
    gpu_before = set(read_gpu()) if read_gpu is not None else set()
    proc = subprocess.run(["systemctl", "stop", unit], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"systemctl stop {unit} failed ({proc.returncode}): {proc.stderr.strip()}"
        )
    return wait_released(
        unit, pids, gpu_before, read_gpu, timeout=timeout, interval=interval,
        proc_root=proc_root, clock=clock, sleep=sleep, start=start,
    )  # fmt: skip


def wait_released(
    unit: str,
    pids: list[int],
    gpu_before: set[int],
    read_gpu: Callable[[], list[int]] | None,
    *,
    timeout: float,
    interval: float = 1.0,
    proc_root: Path = Path("/proc"),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    start: float | None = None,
) -> StopResult:
    """Wait until the unit's processes are gone and their GPU memory is released.

    ``gpu_before``: the compute apps' PIDs (``nvidia-smi``) read before the stop;
    ``read_gpu`` reads them again (None: no GPU to watch). When the GPU listed some of
    ``pids`` the PID namespaces agree and those PIDs are watched. When it listed none of
    them and none of its PIDs exists in ``proc_root``, the driver counts in another
    namespace (an LXC container sees host PIDs): every app it listed before the stop
    must be gone. RuntimeError past ``timeout``.
    """
    began = clock() if start is None else start
    watch: set[int] = set()
    if read_gpu is not None:
        if gpu_before & set(pids):
            watch = set(pids)
        elif gpu_before and not any((proc_root / str(p)).exists() for p in gpu_before):
            watch = set(gpu_before)
    while True:
        remaining = alive(pids, proc_root)
        if read_gpu is not None:
            remaining = sorted(set(remaining) | (set(read_gpu()) & watch))
        if not remaining:
            return StopResult(True, pids, clock() - began, read_gpu is not None, [])
        if clock() - began > timeout:
            raise RuntimeError(
                f"{unit}: processes {remaining} still alive or holding GPU memory"
                f" {timeout:.0f} s after systemctl stop"
            )
        sleep(interval)
