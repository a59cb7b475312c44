"""Process bookkeeping of the graceful stop, on real processes of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.service_stop import (
    alive,
    descendants,
    gpu_pids,
    parse_compute_apps,
    parse_show,
    wait_released,
)


def test_parse_show() -> None:
    state = parse_show("LoadState=loaded\nActiveState=active\nMainPID=4242\n")
    assert (state.load_state, state.active_state, state.main_pid) == ("loaded", "active", 4242)
    assert parse_show("LoadState=not-found\nActiveState=inactive\nMainPID=0\n").main_pid == 0


def test_parse_compute_apps() -> None:
    text = "12345, 40120 MiB\n23456, 512 MiB\n"
    assert parse_compute_apps(text) == [12345, 23456]
    assert parse_compute_apps("No running processes found\n") == []
    assert parse_compute_apps("") == []


def test_gpu_pids_runs_nvidia_smi_and_names_its_error(tmp_path: Path) -> None:
    """nvidia-smi prints its errors on stdout (NVML's, an unknown field): the error
    carries them, not an empty stderr."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = --query-compute-apps=pid ] && echo "4242, 100 MiB"\n')
    smi.chmod(0o755)
    assert gpu_pids(str(smi)) == [4242]
    smi.write_text(
        "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n"
    )
    with pytest.raises(RuntimeError, match=r"failed \(18\): Failed to initialize NVML"):
        gpu_pids(str(smi))


def test_descendants_follow_a_real_process_tree() -> None:
    # A parent that forks two sleeping children, like an engine and its workers.
    code = (
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen(['sleep', '30']) for _ in range(2)]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        kids = [int(p) for p in parent.stdout.readline().split()]
        tree = descendants(parent.pid)
        assert tree == sorted([parent.pid, *kids])
        assert alive(tree) == tree
    finally:
        for pid in kids:
            subprocess.run(["kill", str(pid)], check=False)
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + 10
    while alive([parent.pid, *kids]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive([parent.pid, *kids]) == []


# Above pid_max (4194304): no process here can have these PIDs, as a container's
# /proc never shows the host PIDs that nvidia-smi reports inside it.
HOST_PIDS = [4_194_401, 4_194_402]


def _exited_process() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _gpu(listings: list[list[int]]) -> tuple[list[int], Callable[[], list[int]]]:
    """An nvidia-smi stand-in (no GPU here): each read returns the next listing."""
    reads: list[int] = []

    def read() -> list[int]:
        reads.append(1)
        return listings[min(len(reads), len(listings)) - 1]

    return reads, read


def test_in_a_container_the_gpu_apps_from_before_the_stop_must_be_gone() -> None:
    """Inside LXC the driver lists host PIDs: they never match the unit's. The wait
    used to end at process exit; it lasts until the GPU lists none of them."""
    unit_pids = [_exited_process()]  # the server, already gone after systemctl stop
    reads, read = _gpu([HOST_PIDS, HOST_PIDS, [HOST_PIDS[1]], []])
    result = wait_released("x.service", unit_pids, set(HOST_PIDS), read, timeout=60, interval=0)
    assert len(reads) == 4  # the memory was released at the fourth read, not before
    assert (result.changed, result.gpu_checked, result.remaining) == (True, True, [])
    reads, read = _gpu([HOST_PIDS])
    with pytest.raises(RuntimeError, match=r"processes \[4194401, 4194402\] still alive"):
        wait_released(
            "x.service", unit_pids, set(HOST_PIDS), read, timeout=0, interval=0,
            clock=iter([0.0, 0.0, 1.0, 1.0]).__next__,
        )  # fmt: skip


def test_same_namespace_waits_for_its_own_processes_only() -> None:
    """On the host (or in a VM) the PIDs match: the unit's are watched, and another
    local program on the GPU (this test process stands in for one) is not waited for."""
    gone = _exited_process()
    reads, read = _gpu([[gone, os.getpid()], [gone, os.getpid()], [os.getpid()]])
    result = wait_released("x.service", [gone], {gone, os.getpid()}, read, timeout=60, interval=0)
    assert len(reads) == 3
    assert result.remaining == []
