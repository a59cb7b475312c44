#!/usr/bin/env python3
"""P4: rollout overhead per node = rollout time - engine time-to-healthy (target <= 5 s).

Reads the per-node records a rollout wrote (``speculative_rollout_report_dir``, default
``results/rollout/nodes``; the real test ``tests/tune/test_real_rollout.py`` keeps the
good change's records in its tmp dir as ``good-rollout/``). Per node: the whole
rollout (preflight to record), systemd's start-to-healthy of the new server
(ExecMainStart -> ActiveEnter, i.e. until /health answered), the difference, and that
difference without the baseline measurement (first rollout only) and the smoke
benchmark, i.e. what the orchestration itself costs (Ansible tasks, graceful stop,
readiness gate, identity checks).

    scripts/bench-rollout-overhead.py [RECORDS_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]

from specops.tune.rollout import load_records  # noqa: E402


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results/rollout/nodes"
    records = [r for r in load_records(directory) if r.get("outcome") == "changed"]
    if not records:
        print(f"no changed nodes recorded in {directory}", file=sys.stderr)
        return 2
    print(f"{'node':<22} {'rollout s':>9} {'engine s':>9} {'overhead s':>10} "
          f"{'baseline s':>10} {'smoke s':>8} {'orchestration s':>15}")  # fmt: skip
    worst = 0.0
    for r in records:
        total, engine = float(r["rollout_s"]), float(r["engine_start_to_healthy_s"])
        base, smoke = float(r.get("baseline_s") or 0), float(r.get("smoke_s") or 0)
        over = total - engine
        orch = over - base - smoke
        worst = max(worst, orch)
        print(f"{r['node']:<22} {total:9.1f} {engine:9.1f} {over:10.1f} {base:10.1f} "
              f"{smoke:8.1f} {orch:15.1f}")  # fmt: skip
    print(f"worst orchestration overhead {worst:.1f} s (target <= 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
