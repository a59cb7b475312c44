#!/usr/bin/env python3
"""How deploy, no-change, check and verify grow with the fleet (issue 34): a benchmark
script, not a timed test. Targets are reported, never asserted.

For each N (``--nodes 1,2,4,8,16,32``) a fresh lab fleet of N simulated PVE nodes
(:mod:`specops_lab.fleet`, in its own lab directory under ``--base``: its own PVE API
stand-in, node trees and fact cache; no container, no network, the shared lab is not
touched) runs:

- ``first``: ``playbooks/host.yml`` (deploy.yml's host part) from the hard real state
  (nouveau loaded, no driver, every card on vfio-pci): blacklist, reboot (emulated),
  driver install (stand-in), card release, in batches of ``--batch``;
- ``nochange``: the same again (a converged fleet);
- ``check``: the same with ``--check --diff``;
- ``verify``: ``playbooks/verify.yml``'s node part (``--limit pve_nodes``: the GPU doctor
  on every node; the container part needs the serving container, which only the
  shared lab runs);
- ``container-check`` (not in the default list): ``playbooks/container.yml --check
  --diff``, the one play that calls the PVE API (pve_container, from the controller): the
  lab's serving container, absent here, is looked up and planned, not created.

deploy.yml's container, serve and benchmark parts, and the rollout of a profile change
over the serving group, work on the lab's real serving container, which the fleet does
not multiply (the other nodes host none). ``--rollout`` measures the rollout against the
fleet's size on THE lab (``specops lab up --nodes N``, the lab's own directory, network
and serving container ``lab-ct801`` on pve-b): the lab grown to each N in turn
(``deploy.yml`` at the first N, then ``playbooks/host.yml`` for the nodes added), and at
each N ``playbooks/rollout.yml`` rolls a profile change over the serving group (ngram 4
and 6 draft tokens in turn: every rollout restarts the server and runs every gate).

Each run's wall time, task results (PLAY RECAP: ok + failed + skipped + unreachable),
changed count, PVE API calls (the API stand-in's request log), the controller's peak RSS
(wait4 over ansible-playbook and its workers) and the slowest tasks
(``ansible.posix.profile_tasks``) are printed as a table with the ratio to N = 1, and
written as JSON (``--json``). Run it under the lab lock (the lab's rules):

    flock /tmp/specops-lab.lock .venv/bin/python scripts/experiments/bench-fleet-scale.py \\
        --nodes 1,2,4,8,16 --batch 25% --json .cache/fleet-scale.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from ansible_collections.specops.infra.plugins.module_utils.gpu import (  # noqa: E402
    HostRoots,
    gather_facts,
)

from specops_lab.fleet import fleet_plan, write_fleet  # noqa: E402
from specops_lab.fleet_run import PlaybookRun, profile_summary, run_playbook  # noqa: E402
from specops_lab.node import NO_RETURN_FAULT, boot  # noqa: E402
from specops_lab.paths import UNREACHABLE_FAULT, lab_dir  # noqa: E402
from specops_lab.pve.testing import free_port  # noqa: E402
from specops_lab.up import LabPaths, down, up  # noqa: E402

STEPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "first": ("playbooks/host.yml", ()),
    "nochange": ("playbooks/host.yml", ()),
    "check": ("playbooks/host.yml", ("--check", "--diff")),
    "verify": ("playbooks/verify.yml", ("--limit", "pve_nodes")),
    "container-check": ("playbooks/container.yml", ("--check", "--diff")),
}


# --tune: after the steps, the no-change run again under each of these (what to set for a
# fleet): forks, the free strategy, no fact cache (facts gathered on every run).
TUNE: dict[str, dict[str, str]] = {
    "nochange forks=4": {"ANSIBLE_FORKS": "4"},
    "nochange forks=16": {"ANSIBLE_FORKS": "16"},
    "nochange forks=32": {"ANSIBLE_FORKS": "32"},
    "nochange strategy=free": {"ANSIBLE_STRATEGY": "free"},
    "nochange no fact cache": {"ANSIBLE_CACHE_PLUGIN": "memory"},
}


def _settings_env(args: argparse.Namespace) -> dict[str, str]:
    env = {"ANSIBLE_FORKS": str(args.forks)}
    if args.strategy_free:
        env["ANSIBLE_STRATEGY"] = "free"
    if args.no_fact_cache:
        env["ANSIBLE_CACHE_PLUGIN"] = "memory"
    return env


def _fresh_lab(n: int, args: argparse.Namespace) -> tuple[LabPaths, Path, float, int]:
    lab = Path(args.base) / f"n{n}"
    paths = LabPaths(lab)
    if lab.exists() and not args.reuse:
        down(paths, destroy=False)
        shutil.rmtree(lab)
    lab.mkdir(parents=True, exist_ok=True)
    template = lab / "template.tar"
    template.write_bytes(b"not a rootfs: the host plays make no container")
    files = write_fleet(lab, n, batch=args.batch, max_fail_percentage=args.max_fail)
    t0 = time.monotonic()
    port = free_port()
    up(paths, hardware_dir=files.hardware_dir, template=template, cache=lab / "cache",
       port=port, with_network=False)  # fmt: skip
    return paths, files.inventory_dir, time.monotonic() - t0, port


def bench_one(n: int, args: argparse.Namespace) -> dict[str, Any]:
    paths, inventory, up_s, port = _fresh_lab(n, args)
    # This lab's API stand-in (the inventory names the default lab's port).
    api = ("-e", json.dumps({"pve_container_api_port": port}))
    lab = paths.lab_dir
    row: dict[str, Any] = {"n": n, "up_s": round(up_s, 1), "steps": {}}
    try:
        if args.fail:
            row["failure"] = failure_case(paths, inventory, args)
            return row
        for step in args.steps:
            playbook, extra = STEPS[step]
            run = run_playbook(lab, inventory, playbook, *extra, *api, env=_settings_env(args))
            row["steps"][step] = _summary(run)
            print(f"  N={n} {step}: {_line(row['steps'][step])}", flush=True)
            if run.rc != 0:
                (Path(args.base) / f"n{n}-{step}.log").write_text(run.output)
                print(f"  N={n} {step}: rc {run.rc}, log in {args.base}/n{n}-{step}.log")
        for name, env in TUNE.items() if args.tune else ():
            run = run_playbook(
                lab, inventory, "playbooks/host.yml", env={**_settings_env(args), **env}
            )
            row["steps"][name] = _summary(run)
            print(f"  N={n} {name}: {_line(row['steps'][name])}", flush=True)
    finally:
        down(paths)
    return row


# --rollout: the lab's serving profile (inventory/lab: ngram, 4 draft tokens) and the
# change rolled out, in turn; the smoke benchmark kept small (tests/tune's plan).
ROLLOUT_PROFILES = (
    {"method": "ngram", "num_draft_tokens": 6, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
)
ROLLOUT_SMOKE = {"concurrency": [2], "context_lengths": [128], "output_len": 32,
                 "requests_per_cell": 4, "warmup_per_cell": 1,
                 "humaneval": {"max_tokens": 48}}  # fmt: skip


def _lab_up_fleet(n: int) -> Path:
    """THE lab grown (or shrunk) to ``n`` nodes; returns its fleet inventory."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "specops"), "lab", "up", "--nodes", str(n), "--json"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"specops lab up --nodes {n}: rc {out.returncode}\n{out.stderr[-3000:]}")
    return Path(json.loads(out.stdout)["inventory"])


def rollout_fleet(sizes: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rollout of a profile change over the serving group as the fleet grows: see the
    module's text (``--rollout``). One row per N: the converging run (``grow``: the
    first deploy, then the host part for the nodes added) and the rollout."""
    lab = lab_dir()
    work = Path(args.base) / "rollout"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    down(LabPaths(lab), destroy=True)  # the first deploy from the hard real state
    for i, n in enumerate(sizes):
        inventory = _lab_up_fleet(n)
        grow = run_playbook(lab, inventory, "deploy.yml" if i == 0 else "playbooks/host.yml",
                            env=_settings_env(args))  # fmt: skip
        row: dict[str, Any] = {"n": n, "steps": {"grow": _summary(grow)}}
        print(f"  N={n} grow: {_line(row['steps']['grow'])}", flush=True)
        if grow.rc != 0:
            (Path(args.base) / f"rollout-n{n}-grow.log").write_text(grow.output)
            raise SystemExit(f"N={n}: the converging run failed, log {args.base}")
        profile = ROLLOUT_PROFILES[i % 2]
        extra = work / f"vars-n{n}.json"
        extra.write_text(json.dumps({
            "speculative_rollout_profile": profile,
            "speculative_rollout_smoke_plan": ROLLOUT_SMOKE,
            # timings on a two-core machine decide nothing here: measured, not gated
            "speculative_rollout_throughput_drop": None,
            "speculative_rollout_baseline_dir": str(work / "baselines"),
            "speculative_rollout_report_dir": str(work / "nodes"),
            "speculative_rollout_plain_baseline_dir": str(work / "plain"),
        }))  # fmt: skip
        run = run_playbook(lab, inventory, "playbooks/rollout.yml", "-e", f"@{extra}",
                           env=_settings_env(args))  # fmt: skip
        row["steps"]["rollout"] = _summary(run)
        row["steps"]["rollout"]["serving"] = sorted(
            h for h in run.hosts if h not in ("localhost",) and not h.startswith("pve-")
        )
        print(f"  N={n} rollout ({profile['num_draft_tokens']} draft tokens): "
              f"{_line(row['steps']['rollout'])}", flush=True)  # fmt: skip
        if run.rc != 0:
            (Path(args.base) / f"rollout-n{n}.log").write_text(run.output)
            raise SystemExit(f"N={n}: the rollout failed, log {args.base}/rollout-n{n}.log")
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps({"settings": {"batch": args.batch},
                                                   "rows": rows}, indent=1))  # fmt: skip
    return rows


def _driver_loaded(paths: LabPaths, node: str) -> bool:
    facts = gather_facts(HostRoots.under(str(paths.node_root(node))))
    return facts.nvidia_module.loaded


def failure_case(paths: LabPaths, inventory: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Two nodes fail during the first deploy: the last node cannot be reached, the
    middle one's reboot never returns. The run must converge the others and name the two;
    once both are back, a run limited to them must complete the fleet."""
    nodes = sorted(p.stem for p in (paths.lab_dir / "fleet" / "hardware").glob("*.yml"))
    order = list(fleet_plan(len(nodes)))
    unreachable, no_return = order[-1], order[len(order) // 2 - 1]
    for node, fault in ((unreachable, UNREACHABLE_FAULT), (no_return, NO_RETURN_FAULT)):
        path = paths.node_root(node) / fault
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("bench-fleet-scale --fail\n")
    fast = ("-e", json.dumps({"nvidia_driver_reboot_timeout": args.reboot_timeout}))
    env = _settings_env(args)
    run = run_playbook(paths.lab_dir, inventory, "playbooks/host.yml", *fast, env=env)
    named = re.search(r"Not converged: ([^(]+) \(failed or unreachable", run.output)
    hosts = run.hosts
    first = {
        **_summary(run),
        "unreachable": sorted(h for h, c in hosts.items() if c.unreachable),
        "failed": sorted(h for h, c in hosts.items() if c.failed),
        "named": named[1].strip() if named else None,
        "others_converged": all(
            _driver_loaded(paths, n) for n in order if n not in (unreachable, no_return)
        ),
        "two_without_driver": not any(_driver_loaded(paths, n) for n in (unreachable, no_return)),
    }
    print(f"  failing nodes {unreachable} (unreachable), {no_return} (no return): {first}")
    (paths.node_root(unreachable) / UNREACHABLE_FAULT).unlink()
    (paths.node_root(no_return) / NO_RETURN_FAULT).unlink()
    boot(paths.node_root(no_return), say=lambda _msg: None)  # brought back (console, BMC)
    rerun = run_playbook(
        paths.lab_dir, inventory, "playbooks/host.yml", "--limit", f"{unreachable},{no_return}",
        *fast, env=env,
    )  # fmt: skip
    second = {**_summary(rerun), "fleet_converged": all(_driver_loaded(paths, n) for n in order)}
    print(f"  re-run limited to the two: {second}")
    if run.rc == 0 or rerun.rc != 0:
        (Path(args.base) / "fail-first.log").write_text(run.output)
        (Path(args.base) / "fail-rerun.log").write_text(rerun.output)
    return {"unreachable_node": unreachable, "no_return_node": no_return,
            "first": first, "rerun": second}  # fmt: skip


def _summary(run: PlaybookRun) -> dict[str, Any]:
    return {
        "rc": run.rc,
        "wall_s": round(run.wall_s, 1),
        "cpu_s": round(run.cpu_s, 1),
        "main_cpu_s": round(run.main_cpu_s, 1),
        "tasks": run.tasks,
        "changed": run.changed,
        "api_calls": run.api_calls,
        "peak_rss_mb": round(run.peak_rss_mb, 1),
        "slowest": profile_summary(run.output)[:3],
    }


def _line(s: dict[str, Any]) -> str:
    return (
        f"rc {s['rc']}, {s['wall_s']} s ({s['cpu_s']} s CPU), {s['tasks']} tasks "
        f"({s['changed']} changed), {s['api_calls']} API calls, {s['peak_rss_mb']} MB"
    )


def table(rows: list[dict[str, Any]], steps: list[str]) -> str:
    """Markdown: one line per N and step, with the ratio to the smallest N."""
    base = rows[0]
    out = [
        "| N | step | wall s | x N=1 | CPU s | tasks | changed | API calls | peak RSS MB |"
        " slowest task |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        for step in steps:
            s = row["steps"].get(step)
            if s is None:
                continue
            ref = base["steps"].get(step)
            ratio = f"{s['wall_s'] / ref['wall_s']:.2f}" if ref else "-"
            slow = s["slowest"][0] if s["slowest"] else ("-", 0.0)
            out.append(
                f"| {row['n']} | {step} | {s['wall_s']} | {ratio} | {s.get('cpu_s', '-')} | "
                f"{s['tasks']} | "
                f"{s['changed']} | {s['api_calls']} | {s['peak_rss_mb']} | "
                f"{slow[0]} ({slow[1]:.1f} s) |"
            )
    return "\n".join(out)


def _batch_nodes(batch: str, n: int) -> int:
    if batch.endswith("%"):
        return max(1, int(n * int(batch[:-1]) / 100))
    return max(1, min(n, int(batch)))


def targets(rows: list[dict[str, Any]], batch: str) -> list[str]:
    """Issue 34's goals against the largest N measured: each met or not, with figures."""
    one, big = rows[0], rows[-1]
    n = big["n"]
    lines = []
    for step in ("nochange", "check"):
        if step in one["steps"] and step in big["steps"]:
            r = big["steps"][step]["wall_s"] / one["steps"][step]["wall_s"]
            lines.append(f"{step} at N={n}: {r:.2f}x N={one['n']} (goal ≤ 2x): "
                         f"{'met' if r <= 2 else 'NOT met'}")  # fmt: skip
    if "first" in one["steps"] and "first" in big["steps"]:
        b = _batch_nodes(batch, n)
        goal = math.ceil(n / b) * one["steps"]["first"]["wall_s"] * 1.2
        got = big["steps"]["first"]["wall_s"]
        lines.append(
            f"first at N={n}: {got} s; goal ceil({n}/{b}) x {one['steps']['first']['wall_s']} s"
            f" (N=1's first deploy) + 20 % = {goal:.0f} s: {'met' if got <= goal else 'NOT met'}"
        )
    for step in ("first", "nochange", "check", "verify"):
        per = [(r["n"], r["steps"][step]["api_calls"] / r["n"]) for r in rows if step in r["steps"]]
        if per:
            text = ", ".join(f"N={k}: {v:.1f}" for k, v in per)
            lines.append(f"PVE API calls per node ({step}): {text}")
    if len(rows) > 1 and "first" in big["steps"]:
        rss = [(r["n"], max(s["peak_rss_mb"] for s in r["steps"].values())) for r in rows]
        slope = (rss[-1][1] - rss[0][1]) / (rss[-1][0] - rss[0][0])
        lines.append(
            f"controller peak RSS: {rss[0][1]} MB at N={rss[0][0]}, {rss[-1][1]} MB at "
            f"N={rss[-1][0]}: {slope:.2f} MB per node (goal < 20): "
            f"{'met' if slope < 20 else 'NOT met'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,2,4,8,16,32", help="fleet sizes, comma-separated")
    p.add_argument("--steps", default="first,nochange,check,verify",
                   help=f"comma-separated, of {', '.join(STEPS)}")  # fmt: skip
    p.add_argument("--batch", default="25%", help="specops_host_batch (nodes or 'P%%')")
    p.add_argument("--max-fail", type=int, default=0, help="specops_host_max_fail_percentage")
    p.add_argument("--forks", type=int, default=8, help="ANSIBLE_FORKS (ansible.cfg: 8)")
    p.add_argument("--strategy-free", action="store_true", help="ANSIBLE_STRATEGY=free")
    p.add_argument("--no-fact-cache", action="store_true", help="memory fact cache only")
    p.add_argument("--tune", action="store_true", help=f"then: {', '.join(TUNE)}")
    p.add_argument(
        "--fail",
        action="store_true",
        help="the failure case instead of the steps: the first deploy with the last node "
        "unreachable and the middle one's reboot never returning, then a run limited to them",
    )
    p.add_argument("--reboot-timeout", type=int, default=10, help="nvidia_driver_reboot_timeout")
    p.add_argument(
        "--rollout",
        action="store_true",
        help="instead of the steps: THE lab grown to each N, a rollout over its serving group "
        "at each (the lab's serving container; run under the lab lock)",
    )
    p.add_argument("--reuse", action="store_true", help="keep the lab of an earlier run")
    p.add_argument("--base", default=str(REPO / ".cache" / "fleet-bench"), help="lab directories")
    p.add_argument("--json", help="write the rows here")
    p.add_argument(
        "--table", help="print the table of these JSON files (comma-separated, merged) and exit"
    )
    args = p.parse_args(argv)
    args.base = str(Path(args.base).resolve())
    # A stop (SIGTERM) still takes each lab down (bench_one's finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.table:
        parts = [json.loads(Path(f).read_text()) for f in args.table.split(",")]
        merged = sorted((r for d in parts for r in d["rows"]), key=lambda r: r["n"])
        steps = list(dict.fromkeys(k for r in merged for k in r["steps"]))
        print(table(merged, steps))
        print("\n".join(f"- {t}" for t in targets(merged, parts[0]["settings"]["batch"])))
        return 0
    args.steps = args.steps.split(",")
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown:
        p.error(f"--steps: {', '.join(unknown)} (valid: {', '.join(STEPS)})")
    sizes = [int(x) for x in args.nodes.split(",")]
    settings = {
        "batch": args.batch,
        "max_fail": args.max_fail,
        "forks": args.forks,
        "strategy_free": args.strategy_free,
        "fact_cache": not args.no_fact_cache,
    }
    print(f"fleet scale: N = {sizes}, settings {settings}", flush=True)
    if args.rollout:
        if sizes != sorted(set(sizes)):
            p.error("--rollout: --nodes must grow (each N larger than the one before)")
        try:
            rows = rollout_fleet(sizes, args)
        finally:  # the lab back to nothing: the next `specops lab up` builds the two nodes
            down(LabPaths(lab_dir()), destroy=True)
        print(table(rows, ["grow", "rollout"]))
        return 0
    rows = []
    for n in sizes:
        rows.append(bench_one(n, args))
        if args.json:
            Path(args.json).write_text(
                json.dumps({"settings": settings, "steps": args.steps, "rows": rows}, indent=1)
            )
    print(table(rows, args.steps))
    print("\n".join(f"- {t}" for t in targets(rows, args.batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
