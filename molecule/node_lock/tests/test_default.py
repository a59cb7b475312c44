"""node_lock on a systemd container: the record on the node after a run, a check run and
a run that find another run's lock, and the take-over of one whose lease ran out."""

from __future__ import annotations

import json
import time
from typing import Any

LOCK = "/var/lib/specops/lock/node.json"
OTHER = {"id": "ctl-x:7:1", "controller": "ctl-x", "user": "ops", "pid": 7,
         "playbook": "deploy.yml"}  # fmt: skip


def _record(host: Any) -> dict[str, Any]:
    return json.loads(host.file(LOCK).content_string)


def _plant(host: Any, expires_in: float) -> None:
    record = {"held": True, "holder": OTHER, "since": "earlier", "lease_s": 300,
              "expires_at": time.time() + expires_in}  # fmt: skip
    host.run(f"cat > {LOCK} <<'EOF'\n{json.dumps(record)}\nEOF")


def test_the_run_s_end_released_its_lock(host: Any) -> None:
    f = host.file(LOCK)
    assert f.is_file
    assert f.mode == 0o644
    rec = _record(host)
    assert rec["held"] is False
    assert rec["previous"]["ended"] == "released"
    assert rec["previous"]["holder"]["playbook"] == "converge.yml"


def test_a_check_run_reads_another_run_s_lock_and_takes_nothing(host: Any, converge: Any) -> None:
    _plant(host, 300)
    before = host.file(LOCK).content_string
    run = converge(check=True)
    assert run.returncode == 0, run.stdout[-3000:]
    said = " ".join((run.stdout + run.stderr).split())
    assert "node lock: " in said
    assert "is locked by ops@ctl-x (deploy.yml, pid 7)" in said
    assert host.file(LOCK).content_string == before


def test_a_run_waits_then_is_refused_naming_the_holder(host: Any, converge: Any) -> None:
    _plant(host, 300)
    run = converge(node_lock_wait=3)
    assert run.returncode != 0
    said = " ".join((run.stdout + run.stderr).split())
    assert "is locked by another specops run: held by ops@ctl-x (deploy.yml, pid 7)" in said
    assert _record(host)["holder"] == OTHER


def test_a_lock_whose_lease_ran_out_is_taken_over(host: Any, converge: Any) -> None:
    _plant(host, -5)
    run = converge()
    assert run.returncode == 0, run.stdout[-3000:]
    said = " ".join((run.stdout + run.stderr).split())
    assert "took the lock over from ops@ctl-x (deploy.yml, pid 7): its lease expired" in said
    rec = _record(host)
    assert rec["held"] is False  # and released at the run's end
