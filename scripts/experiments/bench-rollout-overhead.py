#!/usr/bin/env python3
"""P4: rollout overhead per node = rollout time - engine time-to-healthy (target <= 5 s).

Reads the per-node records a rollout wrote (``speculative_rollout_report_dir``, default
``results/rollout/nodes``; the real test ``tests/tune/test_real_rollout.py`` prints this
table for its good change and keeps it in ``results/rollout-p4.json``). Per node:

- ``rollout``: the node's whole rollout, preflight to record;
- ``start>health``: systemd's start of the new server to ``active`` (its ExecStartPost
  /health wait) -- ``overhead`` is rollout minus this, the issue's definition;
- what else the engine spends, not the orchestration: the old server's graceful stop
  (``stop``: its processes gone) and the first generation after /health (``1st gen``,
  the readiness gate's one-token completion on a fresh server);
- the measurements: the lossless-output gate's greedy decoding in the service step
  (``output gate``), ``baseline`` (first rollout only) and ``smoke`` benchmark;
- ``orchestration``: what is left -- Ansible tasks, round trips, the controller's
  process starts. The target is judged on it.

    .venv/bin/python scripts/experiments/bench-rollout-overhead.py [RECORDS_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from specops.tune.rollout import load_records, overhead_table

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results/rollout/nodes"
    records = [r for r in load_records(directory) if r.get("outcome") == "changed"]
    if not records:
        print(f"no changed nodes recorded in {directory}", file=sys.stderr)
        return 2
    print("\n".join(overhead_table(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
