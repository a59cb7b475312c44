"""The crash-point campaign's kill (scripts/crash-campaign.py, issue 31) on a real
``ansible-playbook`` run on localhost, no lab: the whole process group dies at the
chosen task banner (a task's own child process included), nothing after it runs, and a
chain of kills ends with a run that completes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from plugins.scripts import load_script

from specops_lab import network

crash = load_script("crash-campaign.py")

_PLAY = """\
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
{tasks}
"""


def _playbook(tmp: Path, n: int) -> Path:
    """Task i touches ``i.done``; task 3 first writes its shell's pid, sleeps 5 s and
    marks ``3.late``."""
    tasks = []
    for i in range(1, n + 1):
        cmd = f"touch {tmp}/{i}.done"
        if i == 3:
            cmd = f"sh -c 'echo $$ > {tmp}/3.pid; sleep 5; touch {tmp}/3.late'; {cmd}"
        tasks.append(
            f"    - name: Step {i}.\n      ansible.builtin.shell: {cmd!r}\n      changed_when: true"
        )
    path = tmp / "play.yml"
    path.write_text(_PLAY.format(tasks="\n".join(tasks)))
    return path


def _argv(play: Path) -> list[str]:
    return [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    return env


def test_kill_at_a_banner_stops_the_run_there(tmp_path: Path) -> None:
    play = _playbook(tmp_path, 5)
    seg = crash.run_segment(_argv(play), crash.KillAt(3), env=_env())
    assert seg.killed, seg.output[-2000:]
    assert (seg.rc, seg.tasks) == (-9, 3)
    assert sorted(p.name for p in tmp_path.glob("*.done")) == ["1.done", "2.done"]


def test_a_kill_mid_task_lets_the_worker_finish_and_nothing_after(tmp_path: Path) -> None:
    """Ansible's workers run in their own sessions: the task under way finishes (as a
    module on a remote node would); the controller is gone, so no later task starts.
    The segment returns once that worker has ended."""
    play = _playbook(tmp_path, 5)
    seg = crash.run_segment(
        _argv(play), crash.KillAt("Step 3.", after_s=2.0), env=_env(), workers="finish"
    )
    assert seg.killed, seg.output[-2000:]
    assert seg.orphans >= 1
    assert seg.orphans_left == []
    assert (tmp_path / "3.late").exists()
    assert (tmp_path / "3.done").exists()
    time.sleep(1)
    assert not (tmp_path / "4.done").exists()


def test_a_kill_mid_task_takes_the_workers_and_the_module(tmp_path: Path) -> None:
    """The default: the workers' sessions die with the controller, the module under way
    with them (over ssh it would die with its connection)."""
    play = _playbook(tmp_path, 5)
    seg = crash.run_segment(_argv(play), crash.KillAt("Step 3.", after_s=2.0), env=_env())
    assert seg.killed, seg.output[-2000:]
    assert (tmp_path / "3.pid").is_file(), "the kill came after task 3 started its child"
    time.sleep(5)
    assert not (tmp_path / "3.late").exists(), "the module outlived the controller"
    assert not (tmp_path / "3.done").exists()


def test_a_chain_of_kills_ends_with_a_complete_run(tmp_path: Path) -> None:
    play = _playbook(tmp_path, 4)
    segs = crash.chain(_argv(play), [crash.KillAt(2), crash.KillAt("Step 4.")], env=_env())
    assert [s.killed for s in segs] == [True, True, False]
    assert (segs[-1].rc, segs[-1].tasks) == (0, 4)
    assert segs[-1].changed() == {"localhost": 4}
    assert len(list(tmp_path.glob("*.done"))) == 4


def test_a_run_shorter_than_its_point_is_not_killed(tmp_path: Path) -> None:
    seg = crash.run_segment(_argv(_playbook(tmp_path, 2)), crash.KillAt(7), env=_env())
    assert not seg.killed
    assert (seg.rc, seg.tasks) == (0, 2)


@pytest.mark.parametrize(
    ("points", "total", "want"),
    [("all", 3, [1, 2, 3]), ("4", 100, [20, 40, 60, 80]), ("5,9", 10, [5, 9]), ("=7", 10, [7])],
)
def test_points(points: str, total: int, want: list[int]) -> None:
    assert crash.parse_points(points, total) == want


@pytest.mark.parametrize("points", ["0", "11,2", "some"])
def test_points_refused(points: str) -> None:
    with pytest.raises(SystemExit, match="--points"):
        crash.parse_points(points, 10)


def test_banner_names_find_the_task_again() -> None:
    url = f"http://{network.load().address(801)}:8000"  # the lab's own address for CT 801
    line = f"TASK [benchmark : Run the benchmark against {url}.] ******\n"
    name = crash._banner_name(line)
    assert name == f"benchmark : Run the benchmark against {url}."
    assert crash.KillAt(name).reached(1, line)
    assert not crash.KillAt(name).reached(1, "TASK [benchmark : Record where the results are.]")


def test_records_half_written_or_unreadable_are_found(tmp_path: Path) -> None:
    run = tmp_path / "20261203T000000Z-abc"
    run.mkdir()
    (run / "results.json").write_text('{"cells": []}')
    (run / "run.json").write_text('{"finished_at": null}')
    assert crash.record_problems(tmp_path) == []
    (run / "results.json.tmp").write_text("{")
    (run / "cells.json").write_text('{"cells": [')
    found = crash.record_problems(tmp_path)
    assert [Path(p.split(":")[0]).name for p in found] == ["cells.json", "results.json.tmp"]
