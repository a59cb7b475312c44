#!/usr/bin/env python3
"""P5: the sweep's pick against the full grid's, and the restarts each needed.

On one real lab node (vLLM CPU, tiny model, systemd container ``specops-tune-node4``,
applied through Ansible exactly as ``specops sweep run`` does) it runs the full grid
over ngram num_speculative_tokens 1..8 (the profile's num_draft_tokens 2..9) and then the
coordinate-ascent sweep from the base profile (num_speculative_tokens 3), and prints
both picks, whether the sweep's pick is within noise of the grid's (judged on the grid's
own measurements), the restarts each search made and their ratio (target <= 0.60).

    scripts/bench-sweep-vs-grid.py [--out results/p5] [--keep-node]

Re-running with the same --out resumes both searches from their results files.
Takes ~12 engine starts (30-60 s each on an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "collections")]

from specops.tune.apply import AnsibleApplier  # noqa: E402
from specops.tune.lab import LabNode, node_names, remove_nodes, start_nodes, write_inventory  # noqa: E402
from specops.tune.score import Decision, compare  # noqa: E402
from specops.tune.sweep import SweepResult, load_config, run_sweep  # noqa: E402

BASE = {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
NODE = 4


def search_restarts(out: Path) -> int:
    events = [json.loads(x) for x in (out / "sweep.jsonl").read_text().splitlines()[1:] if x]
    return sum(
        1 for e in events if e["kind"] == "run" and (e.get("restart") or {}).get("restarted")
    )


def say(message: str) -> None:
    print(message, flush=True)


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
        inventory = write_inventory([node], args.out / "hosts.json", BASE)
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
               "PYTHONPATH": str(REPO / "src")}  # fmt: skip
        setup = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
             str(REPO / "tests/fixtures/tune/lab-nodes.yml")],
            cwd=REPO, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if setup.returncode != 0:
            print(setup.stdout[-4000:], file=sys.stderr)
            return 2
        common = {
            "canary": node.name,
            "inventory": str(inventory),
            "base_url": node.base_url,
            "served_model_name": "tiny-qwen",
            "base_profile": BASE,
            "space": {"num_draft_tokens": "2..9"},
            "plan": {"concurrency": [4], "context_lengths": [128], "output_len": 48,
                     "requests_per_cell": 8, "warmup_per_cell": 1},
            "objective": {"k": 1.0, "min_gain": 0.03, "tolerance": 0.03,
                          "min_repeats": 2, "max_repeats": 3},
        }  # fmt: skip
        applier = AnsibleApplier(inventory, node.name, node.base_url, "tiny-qwen",
                                 log=args.out / "ansible.log")  # fmt: skip
        results: dict[str, SweepResult] = {}
        for mode in ("grid", "ascent"):
            cfg = load_config({**common, "mode": mode})
            results[mode] = run_sweep(cfg, applier, args.out / mode, log=say)
        g, a = results["grid"].outcome, results["ascent"].outcome
        if g.pick is None or a.pick is None:
            print("no usable candidate", file=sys.stderr)
            return 1
        scoring = load_config(common).scoring
        same = a.pick.candidate.key == g.pick.candidate.key
        decision = compare(
            g.standings[a.pick.candidate.key].values, g.standings[g.pick.candidate.key].values,
            scoring,
        )  # fmt: skip
        rg, ra = search_restarts(args.out / "grid"), search_restarts(args.out / "ascent")
        print()
        print(f"grid pick:   {g.pick.candidate.key} (score {g.pick.score(scoring.k):.1f} tok/s)")
        print(f"sweep pick:  {a.pick.candidate.key} (score {a.pick.score(scoring.k):.1f} tok/s)")
        ok = same or decision is not Decision.WORSE
        print(
            f"same pick: {same}; sweep pick vs grid pick on the grid's runs: {decision.value}"
            f" -> {'OK' if ok else 'NOT within noise'}"
        )
        print(f"restarts: grid {rg}, sweep {ra}, ratio {ra / rg:.2f} (target <= 0.60)")
        print(f"wall time {time.monotonic() - began:.0f} s")
        return 0 if ok and ra <= 0.6 * rg else 1
    finally:
        if not args.keep_node:
            remove_nodes(1, first=NODE)


if __name__ == "__main__":
    sys.exit(main())
