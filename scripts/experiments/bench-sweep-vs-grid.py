#!/usr/bin/env python3
"""P5: the sweep's pick against the full grid's, and the restarts each needed.

On one real lab node (vLLM CPU, tiny model, systemd container ``specops-tune-node4``,
applied through Ansible exactly as ``specops sweep run`` does) it runs the full grid
over ngram num_speculative_tokens 1..8 (the profile's num_draft_tokens 2..9) and then the
coordinate-ascent sweep from the base profile (num_speculative_tokens 3), and prints
the grid's best and the sweep's pick, whether that pick is within the grid's noise band
of its best (judged on the grid's own measurements), the restarts each search made and
their ratio (target <= 0.40).
The logic is ``specops.tune.versus``; the fleet test runs the same comparison.

    scripts/experiments/bench-sweep-vs-grid.py [--out results/p5] [--keep-node] [--reuse-node]

Re-running with the same --out resumes both searches from their results files.
Takes ~11 engine starts (30-40 s each on an idle machine), ~10 minutes here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from specops.tune.apply import AnsibleApplier  # noqa: E402
from specops.tune.versus import LAB_SEARCH, sweep_vs_grid  # noqa: E402
from specops_lab.tune_nodes import LabNode, node_names, remove_nodes, start_nodes, write_inventory  # noqa: E402

NODE = 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "p5")
    ap.add_argument("--keep-node", action="store_true", help="leave the node running")
    ap.add_argument("--reuse-node", action="store_true", help="use a running node 4 as it is")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    if args.reuse_node:
        node = LabNode(node_names(1, NODE)[0], 18710 + NODE)
    else:
        (node,) = start_nodes(1, first=NODE)
    try:
        inventory = write_inventory([node], args.out / "hosts.json", LAB_SEARCH["base_profile"])
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
               "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}"}  # fmt: skip
        setup = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
             str(REPO / "tests/fixtures/tune/lab-nodes.yml")],
            cwd=REPO, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if setup.returncode != 0:
            print(setup.stdout[-4000:], file=sys.stderr)
            return 2
        # the applier runs specops.infra.speculative_apply with this process's
        # environment: the checkout's ansible.cfg, wherever the script is started from
        os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
        applier = AnsibleApplier(inventory, node.name, node.base_url, "tiny-qwen",
                                 log=args.out / "ansible.log")  # fmt: skip
        config = {**LAB_SEARCH, "canary": node.name, "inventory": str(inventory),
                  "base_url": node.base_url}  # fmt: skip
        result = sweep_vs_grid(config, applier, args.out, log=lambda m: print(m, flush=True))
        print()
        print("\n".join(result.lines()))
        print(f"wall time {time.monotonic() - began:.0f} s")
        (args.out / "p5.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0 if result.ok else 1
    finally:
        if not args.keep_node:
            remove_nodes(1, first=NODE)


if __name__ == "__main__":
    sys.exit(main())
