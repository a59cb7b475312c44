"""The crash-point campaign's kill (scripts/lab/crash-campaign.py, issue 31) on a real
``ansible-playbook`` run on localhost, no lab: the whole process group dies at the
chosen task banner (a task's own child process included), nothing after it runs, and a
chain of kills ends with a run that completes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from plugins.scripts import load_script

from specops_lab import network

crash = load_script("lab/crash-campaign.py")

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
    [
        ("all", 3, [1, 2, 3]),
        ("4", 100, [20, 40, 60, 80]),
        ("5,9", 10, [5, 9]),
        ("=7", 10, [7]),
        ("2-4,7,9-10", 10, [2, 3, 4, 7, 9, 10]),
    ],
)
def test_points(points: str, total: int, want: list[int]) -> None:
    assert crash.parse_points(points, total) == want


@pytest.mark.parametrize("points", ["0", "11,2", "some", "3-11", "a-b,2"])
def test_points_refused(points: str) -> None:
    with pytest.raises(SystemExit, match="--points"):
        crash.parse_points(points, 10)


def test_point_ranges_print_back() -> None:
    ks = crash.parse_points("58-98,101-166", 167)
    assert len(ks) == 107
    assert crash._ranges(ks) == "58-98, 101-166"
    assert crash._ranges([3]) == "3"


def _tree(root: Path) -> None:
    (root / "etc/modprobe.d").mkdir(parents=True)
    (root / "etc/modprobe.d/nouveau.conf").write_text("blacklist nouveau\n")
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/calls").write_text("one\n")
    (root / "run/specops-lab/units").mkdir(parents=True)
    unit = {"ActiveState": "active", "SubState": "running", "Result": "success", "MainPID": 7}
    (root / "run/specops-lab/units/nvidia-persistenced.service.json").write_text(json.dumps(unit))
    (root / "sys/bus/pci/devices/0000:01:00.0").mkdir(parents=True)
    (root / "sys/bus/pci/devices/0000:01:00.0/driver").symlink_to("../../drivers/vfio-pci")


def test_node_state_finds_what_a_rerun_left_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trees built alike compare equal whatever their logs and pids say; a changed
    file, a moved binding, a stopped unit, a missing or an extra file are each named."""
    a, b = tmp_path / "a", tmp_path / "b"
    _tree(a)
    _tree(b)
    monkeypatch.setattr(crash, "_nodes", lambda: {"pve-a": a})
    reference = crash.node_state()
    monkeypatch.setattr(crash, "_nodes", lambda: {"pve-a": b})
    (b / "var/log/calls").write_text("one\ntwo\n")  # a log: volatile
    unit = b / "run/specops-lab/units/nvidia-persistenced.service.json"
    unit.write_text(unit.read_text().replace('"MainPID": 7', '"MainPID": 8'))
    assert crash.state_differences(reference, crash.node_state()) == []

    unit.write_text(unit.read_text().replace('"active"', '"failed"'))
    (b / "etc/modprobe.d/nouveau.conf").write_text("")
    driver = b / "sys/bus/pci/devices/0000:01:00.0/driver"
    driver.unlink()
    driver.symlink_to("../../drivers/nvidia")
    (b / "etc/modprobe.d/nvidia.conf").write_text("options nvidia\n")
    assert crash.state_differences(reference, crash.node_state()) == [
        "pve-a/etc/modprobe.d/nouveau.conf: differs",
        "pve-a/etc/modprobe.d/nvidia.conf: extra",
        "pve-a/run/specops-lab/units/nvidia-persistenced.service.json: differs",
        "pve-a/sys/bus/pci/devices/0000:01:00.0/driver: differs",
    ]
    (b / "etc/modprobe.d/nvidia.conf").unlink()
    (b / "etc/modprobe.d/nouveau.conf").unlink()
    assert "pve-a/etc/modprobe.d/nouveau.conf: missing" in crash.state_differences(
        reference, crash.node_state()
    )


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


_BATCHES = """\
- name: Batches.
  hosts: all
  serial: 1
  gather_facts: false
  connection: local
  tasks:
{tasks}
"""


def test_a_recurring_task_is_killed_in_the_batch_its_position_names(tmp_path: Path) -> None:
    """The host roles' tasks recur in each serial batch under the same names: a point is
    the name and its position (the play banner's n-th print, the name's n-th print
    there), so the second batch's task is killed there, not at the first batch's."""
    tasks = "\n".join(
        f"    - name: Step {i}.\n      ansible.builtin.command: touch {tmp_path}/"
        f"{{{{ inventory_hostname }}}}-{i}.done\n      changed_when: true"
        for i in (1, 2, 3)
    )
    play = tmp_path / "batches.yml"
    play.write_text(_BATCHES.format(tasks=tasks))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "h1,h2,", str(play)]
    clean = crash.run_segment(argv, None, env=_env())
    found = crash.task_positions(clean.output)
    assert [(name, p.play_n, p.nth) for name, p in found] == [
        ("Step 1.", 1, 1), ("Step 2.", 1, 1), ("Step 3.", 1, 1),
        ("Step 1.", 2, 1), ("Step 2.", 2, 1), ("Step 3.", 2, 1),
    ]  # fmt: skip
    for done in tmp_path.glob("*.done"):
        done.unlink()
    name, where = found[4]  # batch 2's "Step 2."
    seg = crash.run_segment(argv, crash.KillAt(name, where=where), env=_env())
    assert seg.killed, seg.output[-2000:]
    assert sorted(p.name for p in tmp_path.glob("*.done")) == [
        "h1-1.done", "h1-2.done", "h1-3.done", "h2-1.done",
    ]  # fmt: skip


def test_a_chain_goes_on_past_a_point_its_run_did_not_reach(tmp_path: Path) -> None:
    """A re-run that skips what is done may never print a point's banner: it runs to its
    end unkilled, and the chain takes the next point."""
    play = _playbook(tmp_path, 4)
    where = crash.Position("localhost", 9, 1)  # a ninth print of the play: never
    segs = crash.chain(
        _argv(play),
        [crash.KillAt("Step 2.", where=where), crash.KillAt(3)],
        env=_env(),
    )
    assert [s.killed for s in segs] == [False, True, False]
    assert [s.rc for s in segs] == [0, -9, 0]


def test_a_point_at_gathering_facts_is_reached_although_the_cache_holds_them(
    tmp_path: Path,
) -> None:
    """A clean run from a fresh lab outlives the fact cache's timeout and prints a later
    play's ``Gathering Facts``; a re-run finds the facts cached and does not. The chain
    empties the cache before the run meant for that point: the kill lands there, and
    the completing run converges."""
    cache = tmp_path / "facts"
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n  tasks:\n"
        f"    - name: Step 1.\n      ansible.builtin.shell: touch {tmp_path}/1.done\n"
        "      changed_when: true\n"
    )
    env = _env() | {
        "ANSIBLE_GATHERING": "smart",
        "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache),
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "600",
    }
    first = crash.run_segment(_argv(play), None, env=env)
    assert first.rc == 0, first.output[-2000:]
    assert "TASK [Gathering Facts]" in first.output
    cached = crash.run_segment(_argv(play), None, env=env)  # what a re-run finds
    assert cached.rc == 0
    assert "TASK [Gathering Facts]" not in cached.output
    assert list(cache.iterdir())

    point = crash.KillAt(crash.GATHERING, where=crash.Position("localhost", 1, 1))
    segs = crash.chain(_argv(play), [point], env=env, facts=cache)
    assert [s.killed for s in segs] == [True, False], segs[0].output[-2000:]
    assert crash.task_positions(segs[0].output)[-1] == (crash.GATHERING, point.where)
    assert segs[-1].rc == 0
