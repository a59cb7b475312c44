#!/usr/bin/env python3
"""A rollout under a steady load (issue 51): how many requests it costs, with the router
and without it.

``playbooks/rollout.yml`` rolls a profile across the serving containers of one model
while ``specops bench load`` (specops.bench.load) holds a steady load for as long as the
rollout runs:

- ``--mode router``: the load goes through the router in front of the containers (the
  inventory's ``routers`` group), and the rollout drains each container there before its
  server restarts and puts it back after its gates (the default);
- ``--mode direct``: the load goes to each container's own address in turn, as clients
  do without a router, and the rollout leaves the router alone
  (``speculative_rollout_router_drain: false``): each node's restart is an outage.

``--limit`` rolls the profile over some of the containers only (the load still goes to
every one of them): a container left out is never restarted, so without the router its
address shows no outage while a rolled one's does.

It prints and writes (``--out``: ``figures.json``, the load's ``load.json`` and
``requests.jsonl``, the rollout's node records and log) the failed and retried requests,
the latency while the rollout ran, each target's outages, and each node's rollout and
engine times from its record. Timings are measurements of this machine; the failed
requests are the result.

Run it on a deployed lab with a router, under the lab lock (the lab is shared)::

    specops lab up && ansible-playbook -i inventory/lab-router deploy.yml   # once
    flock -o /run/specops-lab.lock .venv/bin/python \\
        scripts/experiments/bench-rollout-under-load.py --inventory inventory/lab-router \\
        --mode router --profile '{"method": "none"}' --out results/rollout-under-load/router
    flock -o /run/specops-lab.lock .venv/bin/python \\
        scripts/experiments/bench-rollout-under-load.py --inventory inventory/lab-router \\
        --mode direct --profile inventory --out results/rollout-under-load/direct

(the first rolls the lab's ngram profile to no speculation through the router, the second
rolls it back without the router: each node restarts once in each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from specops.bench.load import LoadSpec, render, run_load, summarize, write  # noqa: E402

# The lab's rollout: a small smoke plan on a two-core machine; timings decide nothing
# here (the throughput gate is measured and reported, not gated); HumanEval's completions
# short, since the tiny random-weight model never stops by itself.
LAB_ROLLOUT_VARS: dict[str, Any] = {
    "speculative_rollout_smoke_plan": {
        "concurrency": [2], "context_lengths": [128], "output_len": 32,
        "requests_per_cell": 4, "warmup_per_cell": 1, "humaneval": {"max_tokens": 48},
    },
    "speculative_rollout_throughput_drop": None,
}  # fmt: skip


def _render(inventory: str, pattern: str, expression: str) -> dict[str, Any]:
    """``expression`` rendered by Ansible for each host of ``pattern`` (the debug action
    contacts no host): host -> its value (JSON)."""
    exe = Path(sys.executable).parent / "ansible"
    proc = subprocess.run(
        [str(exe), pattern, "-i", inventory, "-m", "ansible.builtin.debug", "-a",
         f"msg={{{{ {expression} | to_json }}}}"],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
             "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",  # ad-hoc ansible: use the one below
             "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"ansible could not read {inventory}: {proc.stdout[-2000:]}{proc.stderr}")
    hosts = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    return {h: json.loads(r["msg"]) for h, r in hosts.items()}


_SERVING = (
    "{'url': inference_service_host | specops.infra.service_url("
    "inference_service_port | default(8000), ansible_host | default(inventory_hostname)),"
    " 'model': inference_service_served_model_name,"
    " 'profile': inference_service_speculative | default({})}"
)
_ROUTER = (
    "{'address': (pve_container_net | specops.infra.container_address)"
    " if pve_container_net is defined else ansible_host | default(inventory_hostname),"
    " 'frontends': groups | specops.infra.router_frontends(hostvars, inventory_hostname)}"
)


def inventory_targets(inventory: str, model: str | None) -> dict[str, Any]:
    """The router's URL for the model (when the inventory has a router) and each serving
    container's own URL and profile, rendered by Ansible."""
    serving = _render(inventory, "serving", _SERVING)
    models = {s["model"] for s in serving.values()}
    chosen = model or (sorted(models)[0] if len(models) == 1 else None)
    if chosen is None:
        raise SystemExit(f"--model: the group serves {sorted(models)}; name one")
    nodes = {n: s for n, s in sorted(serving.items()) if s["model"] == chosen}
    routers = {}
    for router, r in sorted(_render(inventory, "routers", _ROUTER).items()):
        for fe in r["frontends"]:
            if fe["model"] == chosen:
                routers[router] = f"http://{r['address']}:{fe['port']}"
    return {"model": chosen, "nodes": nodes, "routers": routers}


def _rolled(limit: str | None, nodes: dict[str, Any]) -> list[str]:
    """The containers the rollout restarts: ``--limit``'s, else every one of the model's."""
    if not limit:
        return list(nodes)
    rolled = [n.strip() for n in limit.split(",") if n.strip()]
    unknown = sorted(set(rolled) - set(nodes))
    if unknown or not rolled:
        raise SystemExit(f"--limit: {unknown or limit!r} not among {sorted(nodes)}")
    return rolled


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default="inventory/lab-router")
    parser.add_argument("--mode", choices=("router", "direct"), required=True)
    parser.add_argument(
        "--profile", required=True,
        help="the new profile as JSON, or 'inventory' (the containers' own profile)",
    )  # fmt: skip
    parser.add_argument("--model", help="the served model (default: the group's only one)")
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second")
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--max-duration", type=float, default=3600.0)
    parser.add_argument("--tail", type=float, default=5.0, help="seconds of load after it")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rollout-vars", type=Path, help="a JSON file of rollout variables")
    parser.add_argument(
        "--limit", help="roll over these serving containers only (comma-separated; default: "
        "all of the model's); the load still goes to all of them",
    )  # fmt: skip
    parser.add_argument("--api-key-file", help="the servers' API key (a 0600 file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    found = inventory_targets(ns.inventory, ns.model)
    nodes = found["nodes"]
    if ns.profile == "inventory":
        profile = next(iter(nodes.values()))["profile"]
    else:
        profile = json.loads(ns.profile)
    if ns.mode == "router":
        if not found["routers"]:
            raise SystemExit(f"--mode router: no router of {ns.inventory} serves {found['model']}")
        targets = tuple(found["routers"].values())
    else:
        targets = tuple(n["url"] for n in nodes.values())
    rolled = _rolled(ns.limit, nodes)
    out = ns.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rollout_vars = dict(LAB_ROLLOUT_VARS)
    if ns.rollout_vars:
        rollout_vars.update(json.loads(ns.rollout_vars.read_text()))
    rollout_vars.update(
        speculative_rollout_profile=profile,
        speculative_rollout_router_drain=ns.mode == "router",
        speculative_rollout_report_dir=str(out / "nodes"),
        speculative_rollout_baseline_dir=str(out / "baselines"),
        speculative_rollout_plain_baseline_dir=str(out / "plain"),
    )
    (out / "rollout-vars.json").write_text(json.dumps(rollout_vars, indent=2))
    log = (out / "rollout.log").open("w")
    argv_rollout = [
        str(Path(sys.executable).parent / "ansible-playbook"), "-i", ns.inventory,
        "playbooks/rollout.yml", "-e", f"@{out / 'rollout-vars.json'}",
        "-l", ",".join(rolled),
    ]  # fmt: skip
    spec = LoadSpec(
        targets=targets, duration_s=ns.max_duration, rate=ns.rate, model=found["model"],
        output_len=ns.output_len, tail_s=ns.tail, temperature=0.0, api_key_file=ns.api_key_file,
    )  # fmt: skip
    print(f"{ns.mode}: rolling {json.dumps(profile)} over {', '.join(rolled)} under "
          f"{ns.rate:g} req/s to {', '.join(targets)}", flush=True)  # fmt: skip
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        report = asyncio.run(run_load(spec, argv_rollout, during_stdout=log.fileno()))
    finally:
        os.chdir(cwd)
        log.close()
    summary = summarize(report)
    write(report, summary, out)
    figures = _figures(ns, profile, nodes, summary, out)
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\n".join(render(summary) + _lines(figures)))
    print(f"figures: {out / 'figures.json'}")
    return 0 if summary["command"]["rc"] == 0 else 1


_RECORD_KEYS = ("outcome", "rollout_s", "engine_stop_s", "engine_start_to_healthy_s", "ready_s")


def _figures(
    ns: argparse.Namespace, profile: Any, nodes: dict[str, Any], summary: dict[str, Any],
    out: Path,
) -> dict[str, Any]:  # fmt: skip
    names = {n["url"]: name for name, n in nodes.items()}
    records = {p.stem: json.loads(p.read_text()) for p in sorted((out / "nodes").glob("*.json"))}
    return {
        "mode": ns.mode,
        "inventory": ns.inventory,
        "profile": profile,
        "rate": ns.rate,
        "rollout_rc": summary["command"]["rc"],
        "rollout_s": summary["command"]["seconds"],
        "requests": summary["requests"],
        "failed": summary["failed"],
        "retried": summary["retried"],
        "latency_during_rollout_s": summary["window"]["latency"],
        "outages": {names.get(t, t): spans for t, spans in summary["outages"].items()},
        "nodes": {n: {k: r.get(k) for k in _RECORD_KEYS} for n, r in records.items()},
    }


def _lines(figures: dict[str, Any]) -> list[str]:
    lines = []
    for node, rec in figures["nodes"].items():
        lines.append(
            f"node {node}: {rec['outcome']}, rollout {rec['rollout_s']} s, engine stop "
            f"{rec['engine_stop_s']} s, start to healthy {rec['engine_start_to_healthy_s']} s"
        )
    for node, spans in figures["outages"].items():
        lines.append(
            f"outage of {node}: {sum(s['failed'] for s in spans)} failed requests over "
            f"{sum(s['seconds'] for s in spans):.1f} s ({len(spans)} span(s))"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
