#!/usr/bin/env python3
"""P4: rollout overhead per node = rollout time - engine time-to-healthy (target <= 5 s).

Reads the per-node records a rollout wrote (``speculative_rollout_report_dir``, default
``results/rollout/nodes``; the real test ``tests/tune/test_real_rollout.py`` keeps the
good change's records in its tmp dir as ``good-rollout/``). Per node:

- ``rollout``: the node's whole rollout, preflight to record;
- ``start>health``: systemd's start of the new server to ``active`` (its ExecStartPost
  /health wait) -- ``overhead`` is rollout minus this, the issue's definition;
- what else the engine spends, not the orchestration: the old server's graceful stop
  (``stop``: its processes gone) and the first generation after /health (``1st gen``,
  the readiness gate's one-token completion on a fresh server);
- the measurements: ``baseline`` (first rollout only) and ``smoke`` benchmark;
- ``orchestration``: what is left -- Ansible tasks, round trips, the controller's
  process starts. The target is judged on it.

    scripts/bench-rollout-overhead.py [RECORDS_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]

from specops.tune.rollout import load_records  # noqa: E402

COLUMNS = ("rollout", "start>health", "overhead", "stop", "1st gen", "baseline", "smoke",
           "orchestration")  # fmt: skip


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results/rollout/nodes"
    records = [r for r in load_records(directory) if r.get("outcome") == "changed"]
    if not records:
        print(f"no changed nodes recorded in {directory}", file=sys.stderr)
        return 2
    print(f"{'node (seconds)':<22}" + "".join(f"{c:>14}" for c in COLUMNS))
    worst_over = worst_orch = 0.0
    for r in records:
        total, engine = float(r["rollout_s"]), float(r["engine_start_to_healthy_s"])
        stop, first = float(r.get("engine_stop_s") or 0), float(r.get("ready_s") or 0)
        base, smoke = float(r.get("baseline_s") or 0), float(r.get("smoke_s") or 0)
        over = total - engine
        orch = over - stop - first - base - smoke
        worst_over, worst_orch = max(worst_over, over), max(worst_orch, orch)
        row = (total, engine, over, stop, first, base, smoke, orch)
        print(f"{r['node']:<22}" + "".join(f"{v:14.1f}" for v in row))
    print(f"worst overhead {worst_over:.1f} s (rollout - start>health, incl. measurements)")
    print(f"worst orchestration {worst_orch:.1f} s (target <= 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
