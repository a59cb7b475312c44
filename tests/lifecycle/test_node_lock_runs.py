"""The node lock between real ``ansible-playbook`` runs (roles/node_lock: the action
plugin, the module, the lease renewer and the callback), on a node root in a temporary
directory reached with the local connection. No lab: the lab's own pair of runs on a
serving container is tests/deploy/test_node_lock_lab.py.

- a second run waits while the first holds the lock, then gets it; a third with a short
  wait is refused naming the holder (controller, user, playbook, pid), changing nothing;
- the lease is renewed while the holder runs past it (nobody takes it over);
- each run's end releases its lock (the record says who held it last);
- a run killed while it holds the lock (SIGKILL of its process group and workers, as
  the crash campaign kills) leaves the lock held; the next run from this controller
  takes it over at once, saying from whom; a lock whose lease ran out is taken over too;
- a check run and ``node_lock_state: query`` take nothing and warn about the holder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from plugins.scripts import load_script

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PLAY = REPO / "tests" / "fixtures" / "node_lock" / "hold.yml"
crash = load_script("lab/crash-campaign.py")


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "node"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"lock-node": {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specops_host_root": str(root),
    }}}}))  # fmt: skip
    return root, inventory


def _argv(inventory: Path, *extra: str) -> list[str]:
    exe = Path(sys.executable).parent / "ansible-playbook"
    return [str(exe), "-i", str(inventory), str(PLAY), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def _start(inventory: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_argv(inventory, *extra), cwd=REPO, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def _run(inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # warnings go to stderr: one stream, as an operator's terminal shows it
    return subprocess.run(_argv(inventory, *extra), cwd=REPO, env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                          check=False)  # fmt: skip


def _record(root: Path) -> dict[str, Any]:
    return json.loads((root / "var/lib/specops/lock/node.json").read_text())


def _said(output: str) -> str:
    return " ".join(output.split())


def _wait_held(root: Path, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = root / "var/lib/specops/lock/node.json"
        if path.exists() and _record(root).get("held"):
            return _record(root)
        time.sleep(0.2)
    raise AssertionError("the first run never took the lock")


def test_a_second_run_waits_a_third_is_refused_and_each_end_releases(
    node: tuple[Path, Path],
) -> None:
    root, inventory = node
    # The holder outlives its lease (5 s) threefold: renewals keep it.
    first = _start(inventory, "-e", "hold_s=18", "-e", "node_lock_lease=5")
    held = _wait_held(root)
    refused = _run(inventory, "-e", "node_lock_wait=2")
    assert refused.returncode != 0
    said = _said(refused.stdout)
    assert "lock-node is locked by another specops run: held by" in said
    assert f"({PLAY.name}, pid {held['holder']['pid']})" in said
    assert "Gave up after" in said
    assert _record(root)["holder"] == held["holder"]  # the refused run changed nothing

    waiting = _run(inventory, "-e", "node_lock_wait=120")
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out[-3000:]
    assert waiting.returncode == 0, waiting.stdout[-3000:]
    said = _said(waiting.stdout)
    assert "[WARNING]: node lock: lock-node is held by" in said
    assert "waiting up to 120 s" in said
    assert "took the lock over" not in said  # renewed: never expired under the holder
    rec = _record(root)
    assert rec["held"] is False  # the waiting run's end released it
    assert rec["previous"]["ended"] == "released"
    assert rec["previous"]["holder"]["id"] != held["holder"]["id"]


def test_a_killed_run_s_lock_is_taken_over_by_the_next(node: tuple[Path, Path]) -> None:
    root, inventory = node
    seg = crash.run_segment(
        _argv(inventory, "-e", "hold_s=60"), crash.KillAt("Work while holding it.", after_s=2),
        env=_env(),
    )  # fmt: skip
    assert seg.killed, seg.output[-2000:]
    killed = _record(root)
    assert killed["held"] is True, "a killed run releases nothing"
    rerun = _run(inventory)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    said = _said(rerun.stdout)
    assert re.search(
        rf"node lock: lock-node: took the lock over from \S+ \({PLAY.name}, pid "
        rf"{killed['holder']['pid']}\): its run \(pid {killed['holder']['pid']}\) is gone from ",
        said,
    ), said
    rec = _record(root)
    assert rec["held"] is False
    # the killed holder is named where the re-run's own lock began
    assert rec["previous"]["holder"]["pid"] != killed["holder"]["pid"]


def test_an_expired_lease_of_another_controller_is_taken_over(node: tuple[Path, Path]) -> None:
    root, inventory = node
    path = root / "var/lib/specops/lock/node.json"
    path.parent.mkdir(parents=True)
    other = {"id": "elsewhere:1:1", "controller": "elsewhere", "user": "ops", "pid": 1,
             "playbook": "deploy.yml"}  # fmt: skip
    path.write_text(json.dumps({"held": True, "holder": other, "since": "earlier",
                                "expires_at": time.time() - 30, "lease_s": 300}))  # fmt: skip
    run = _run(inventory)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "took the lock over from ops@elsewhere (deploy.yml, pid 1): its lease expired" in (
        _said(run.stdout)
    )


def test_check_mode_and_query_take_nothing_and_warn(node: tuple[Path, Path]) -> None:
    root, inventory = node
    first = _start(inventory, "-e", "hold_s=15")
    held = _wait_held(root)
    for extra in (["--check"], ["-e", "node_lock_state=query"]):
        run = _run(inventory, *extra)
        assert run.returncode == 0, run.stdout[-3000:]
        said = _said(run.stdout)
        assert "[WARNING]: node lock: lock-node is locked by" in said
        assert _record(root)["holder"] == held["holder"]
    first.communicate(timeout=120)
    assert _record(root)["held"] is False
