"""Process bookkeeping of the graceful stop, on real processes of this machine."""

from __future__ import annotations

import subprocess
import sys
import time

from ansible_collections.specops.infra.plugins.module_utils.service_stop import (
    alive,
    descendants,
    parse_compute_apps,
    parse_show,
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
