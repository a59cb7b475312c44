"""The node lock's decisions and record (module_utils/node_lock.py), on a temporary node
root with a fake clock: free, re-entrant, busy, waited for, expired and taken over,
gone and taken over, renewed, lost, released, read; and the controller's view of a
holder (plugin_utils/node_lock_run.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import node_lock as nl
from ansible_collections.specops.infra.plugins.plugin_utils import node_lock_run as run

A = {"id": "ctl-a:100:1", "controller": "ctl-a", "user": "ops", "pid": 100,
     "playbook": "rollout.yml"}  # fmt: skip
B = {"id": "ctl-b:200:2", "controller": "ctl-b", "user": "dev", "pid": 200, "playbook": "serve.yml"}


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture
def path(tmp_path: Path) -> str:
    return nl.lock_path(str(tmp_path))


def test_the_record_lives_under_the_node_root(tmp_path: Path) -> None:
    assert nl.lock_path(str(tmp_path)) == str(tmp_path / "var/lib/specops/lock/node.json")
    assert nl.lock_path("/") == "/var/lib/specops/lock/node.json"


def test_a_free_lock_is_taken_and_recorded(path: str) -> None:
    clock = Clock()
    out = nl.acquire(path, A, lease=300, clock=clock)
    assert (out.held, out.acquired_now, out.taken_over) == (True, True, None)
    rec = json.loads(Path(path).read_text())
    assert rec["held"] is True
    assert rec["holder"] == A
    assert rec["expires_at"] == clock.t + 300
    assert rec["lease_s"] == 300


def test_the_same_run_renews_its_lock(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)
    since = json.loads(Path(path).read_text())["since"]
    clock.t += 100
    out = nl.acquire(path, A, lease=300, clock=clock)
    assert (out.held, out.acquired_now) == (True, False)
    rec = json.loads(Path(path).read_text())
    assert rec["since"] == since
    assert rec["expires_at"] == clock.t + 300


def test_another_run_is_refused_after_its_wait_naming_the_holder(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)
    with pytest.raises(nl.LockError) as err:
        nl.acquire(path, B, lease=300, wait=10, poll=1, clock=clock, sleep=clock.sleep)
    msg = str(err.value)
    assert "held by ops@ctl-a (rollout.yml, pid 100)" in msg
    assert "lease runs 290 s more" in msg
    assert clock.t == 1_000_010.0  # it waited, then gave up
    assert json.loads(Path(path).read_text())["holder"] == A  # untouched


def test_a_waiting_run_gets_the_lock_once_released(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)

    def sleep(s: float) -> None:
        clock.sleep(s)
        if clock.t >= 1_000_005:
            nl.release(path, A["id"], clock=clock)

    out = nl.acquire(path, B, lease=300, wait=60, poll=1, clock=clock, sleep=sleep)
    assert (out.held, out.acquired_now, out.taken_over) == (True, True, None)
    rec = json.loads(Path(path).read_text())
    assert rec["holder"] == B
    assert rec["previous"]["holder"] == A
    assert rec["previous"]["ended"] == "released"


def test_an_expired_lease_is_taken_over_with_a_message(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)
    clock.t += 301
    out = nl.acquire(path, B, lease=300, clock=clock)
    assert out.taken_over == A
    assert out.message.startswith("took the lock over from ops@ctl-a (rollout.yml, pid 100)")
    assert "lease expired 1 s ago" in out.message
    rec = json.loads(Path(path).read_text())
    assert rec["holder"] == B
    assert rec["previous"]["ended"].startswith("taken over: its lease expired")


def test_a_gone_holder_is_taken_over_only_by_its_id(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)
    with pytest.raises(nl.LockError):
        nl.acquire(path, B, lease=300, take_over_from="someone-else", clock=clock)
    out = nl.acquire(path, B, lease=300, take_over_from=A["id"], clock=clock)
    assert out.taken_over == A
    assert "is gone from ctl-a" in out.message


def test_renewal_extends_the_lease_and_fails_once_the_lock_is_another_s(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=10, clock=clock)
    clock.t += 8
    nl.renew(path, A["id"], lease=10, clock=clock)
    clock.t += 8  # 16 s after the start: alive thanks to the renewal
    with pytest.raises(nl.LockError):
        nl.acquire(path, B, lease=10, clock=clock)
    clock.t += 3  # past the renewed lease: B takes it over
    nl.acquire(path, B, lease=10, clock=clock)
    with pytest.raises(nl.LockError, match="no longer this run's: now held by dev@ctl-b"):
        nl.renew(path, A["id"], lease=10, clock=clock)


def test_release_leaves_another_s_lock_alone(path: str) -> None:
    clock = Clock()
    nl.acquire(path, A, lease=300, clock=clock)
    out = nl.release(path, B["id"], clock=clock)
    assert out.message.startswith("not this run's lock (held by ops@ctl-a")
    assert json.loads(Path(path).read_text())["holder"] == A
    assert nl.release(path, A["id"], clock=clock).message == "released"
    assert nl.query(path, clock=clock).held is False


def test_check_mode_writes_nothing_and_says_who_holds_it(path: str) -> None:
    clock = Clock()
    out = nl.acquire(path, A, lease=300, check_mode=True, clock=clock)
    assert out.held
    assert not Path(path).exists()
    nl.acquire(path, A, lease=300, clock=clock)
    before = Path(path).read_text()
    out = nl.acquire(path, B, lease=300, wait=100, check_mode=True, clock=clock)
    assert not out.held
    assert "held by ops@ctl-a" in out.message
    assert Path(path).read_text() == before
    assert clock.t == 1_000_000.0  # no wait in check mode


def test_query_reads_a_held_and_an_expired_lock(path: str) -> None:
    clock = Clock()
    assert nl.query(path, clock=clock).held is False
    nl.acquire(path, A, lease=300, clock=clock)
    q = nl.query(path, clock=clock)
    assert q.held
    assert q.message.startswith("locked by ops@ctl-a (rollout.yml, pid 100) since ")
    clock.t += 400
    q = nl.query(path, clock=clock)
    assert not q.held
    assert "lease expired 100 s ago" in q.message


def test_an_unreadable_record_counts_as_free(path: str) -> None:
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text("{not json")
    out = nl.acquire(path, A, lease=300, clock=Clock())
    assert out.held
    assert out.acquired_now


def test_a_holder_needs_an_id_and_a_lease(path: str) -> None:
    with pytest.raises(ValueError, match=r"holder\.id"):
        nl.acquire(path, {"controller": "x"}, lease=300)
    with pytest.raises(ValueError, match="lease"):
        nl.acquire(path, A, lease=0)


def test_two_processes_asking_at_once_get_one_lock(path: str) -> None:
    """The flock makes the read-modify-write one step: of 6 processes started together,
    exactly one takes the lock (the others are refused without waiting)."""
    code = (
        "import sys\n"
        "from ansible_collections.specops.infra.plugins.module_utils import node_lock as nl\n"
        "h = {'id': sys.argv[2], 'controller': 'c', 'user': 'u', 'pid': 1, 'playbook': 'p'}\n"
        "try:\n"
        "    nl.acquire(sys.argv[1], h, lease=300)\n"
        "    print('took')\n"
        "except nl.LockError:\n"
        "    print('refused')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, path, f"run-{i}"], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        for i in range(6)
    ]  # fmt: skip
    said = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert said == ["refused"] * 5 + ["took"]


# -- the controller's side ------------------------------------------------------------


def test_this_process_is_alive_and_a_dead_one_is_not() -> None:
    me = os.getpid()
    assert run.process_alive(me, run.process_start(me))
    assert not run.process_alive(me, "1")  # the same pid with another start: another process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not run.process_alive(dead.pid)


def test_a_holder_is_gone_only_when_it_ran_here_and_its_process_died() -> None:
    here = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert run.holder_gone({"controller": here, "pid": dead.pid})
    assert not run.holder_gone({"controller": here, "pid": os.getpid()})
    # another controller's holder is never judged from here
    assert not run.holder_gone({"controller": here + "-other", "pid": dead.pid})


def test_a_run_s_identity_and_a_nested_run_s() -> None:
    me = run.run_identity(os.getpid(), ["/x/playbooks/rollout.yml"], environ={})
    assert me.id == f"{socket.gethostname()}:{os.getpid()}:{run.process_start(os.getpid())}"
    assert me.playbook == "rollout.yml"
    assert not me.inherited
    nested = run.run_identity(os.getpid(), ["speculative-apply.yml"],
                              environ={run.HOLDER_ENV: "sweep-run"})  # fmt: skip
    assert (nested.id, nested.inherited) == ("sweep-run", True)
    assert "inherited" not in nested.holder()


def test_the_run_directory_is_private_and_lists_live_renewers(tmp_path: Path) -> None:
    d = run.run_dir(123, "45", base=str(tmp_path))
    assert (d.parent.stat().st_mode & 0o777) == 0o700
    (d / "renewer-pve-b.pid").write_text(str(os.getpid()))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / "renewer-pve-a.pid").write_text(str(dead.pid))
    assert run.renewer_pids(d) == {"pve-b": os.getpid()}
    run.mark_ended(d)
    assert (d / run.ENDED).exists()
