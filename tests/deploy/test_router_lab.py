"""Issue 51 on the lab: a router in front of two serving containers of one model, and a
rollout under a steady load with it and without it.

``inventory/lab-router`` is the lab (the same nodes and variables: inventory/lab's, the
example's shape) with a second serving container of the tiny model on pve-a
(``lab-ct802``, one RTX A6000) and a router (``lab-ct800``: HAProxy from Debian in an
LXC container on pve-a), as the example inventory shows them. One lab, deployed from the
hard real state with that inventory (``deploy.yml``: the host roles on both nodes, three
containers, two vLLM servers, HAProxy), serves every test here:

- the router fronts both containers, each UP on its readiness check; the router play
  again changes nothing; the GPU doctor (``verify.yml``) shows the router's view of each
  container;
- a rollout of a new profile (the lab's ngram -> no speculation) across both under a
  steady load through the router (``specops bench load``, 2 requests/s): every node is
  drained before its server stops and put back after its gates; no request fails
  (a correctness condition); the latency while it ran is printed;
- the rollout back to the lab's profile without the router, on one node: the load goes
  to each container's address as clients do without one, nothing is drained; the rolled
  node's restart is an outage (its failed requests and its span printed) and the node
  left alone, loaded the same, has none. The router run has already rolled both nodes
  one after the other; a second node without the router would repeat the first's
  outage (one more vLLM restart under load, ~3 min here) and prove nothing more.

``scripts/experiments/bench-rollout-under-load.py`` makes both measurements (the commands that
re-run them are in docs/operations/router.md). ``specops lab down --destroy`` before and
after.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.readiness import wait_ready
from plugins.measurements import Record
from plugins.scripts import load_script

from specops_lab import network

pytestmark = [pytest.mark.lxc, pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = "inventory/lab-router"
NODES = ("lab-ct801", "lab-ct802")
ROUTER = "lab-ct800"
LOGS = REPO / ".cache" / "router-lab"
bench = load_script("experiments/bench-rollout-under-load.py")
crash = load_script("lab/crash-campaign.py")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv/bin'}:{env['PATH']}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    secret = Path("/var/lib/specops/lab/secrets/pve-api-token-secret")
    if secret.exists():
        env["PROXMOX_TOKEN_SECRET"] = secret.read_text().strip()
    return env


def _run(name: str, argv: list[str], timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, cwd=REPO, env=_env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, timeout=timeout, check=False,
    )  # fmt: skip
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{name}.log").write_text(proc.stdout)
    return proc


def _playbook(name: str, playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = str(REPO / ".venv/bin/ansible-playbook")
    return _run(name, [exe, "-i", INVENTORY, playbook, *extra])


def _specops(*args: str) -> None:
    subprocess.run([str(REPO / ".venv/bin/specops"), *args], cwd=REPO, env=_env(), check=True,
                   timeout=900)  # fmt: skip


@pytest.fixture(scope="module")
def deployed() -> Iterator[subprocess.CompletedProcess[str]]:
    _specops("lab", "down", "--destroy")
    _specops("lab", "up")
    start = time.monotonic()
    run = _playbook("deploy", "deploy.yml")
    run.seconds = time.monotonic() - start  # type: ignore[attr-defined]
    yield run
    _specops("lab", "down", "--destroy")


def _address(vmid: int) -> str:
    return str(network.load().address(vmid))


def _router_view() -> dict[str, str]:
    """Each backend server's status, as HAProxy's runtime API says it in the router."""
    from specops_lab.pve.layout import Cluster  # noqa: PLC0415
    from specops_lab.pve.pct import ct_exec  # noqa: PLC0415

    node = Cluster.load(Path("/var/lib/specops/lab/cluster")).node("pve-a")
    code = (
        "import socket;s=socket.socket(socket.AF_UNIX);s.connect('/run/haproxy/admin.sock');"
        "s.sendall(b'show stat\\n');d=b''\n"
        "while True:\n r=s.recv(65536)\n if not r: break\n d+=r\n"
        "print(d.decode())"
    )
    out = ct_exec(node, 800, ["python3", "-c", code], timeout=30).stdout.decode()
    header = out.lstrip("# ").splitlines()[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in out.splitlines()[1:]]
    return {r["svname"]: r["status"] for r in rows
            if r.get("svname") not in ("FRONTEND", "BACKEND", None)}  # fmt: skip


def test_the_router_fronts_both_containers(deployed: subprocess.CompletedProcess[str]) -> None:
    assert deployed.returncode == 0, deployed.stdout[-6000:]
    assert _router_view() == dict.fromkeys(NODES, "UP")
    url = f"http://{_address(800)}:8000"
    assert wait_ready(url, "tiny-qwen", timeout=60).ready  # a generation through the router
    again = _playbook("router-again", "playbooks/router.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    recap = {m["host"]: int(m["changed"]) for m in crash.RECAP.finditer(again.stdout)}
    assert recap.get(ROUTER) == 0, recap


def test_the_doctor_reports_the_router_s_view_of_each_container(
    deployed: subprocess.CompletedProcess[str],
) -> None:
    assert deployed.returncode == 0, "the deploy failed; see its test"
    run = _playbook("verify", "playbooks/verify.yml")
    assert run.returncode == 0, run.stdout[-4000:]
    said = " ".join(run.stdout.split())  # the callback folds long lines
    assert "| server | router | result |" in said
    for node in NODES:
        row = rf"\| {node} \| [^|]+ \| 8\d\d \|.*?\| {ROUTER} UP \| healthy \|"
        assert re.search(row, said), said[-3000:]


def _measure(mode: str, profile: str, *extra: str) -> dict[str, Any]:
    out = LOGS / f"rollout-{mode}"
    rc = bench.main(["--inventory", INVENTORY, "--mode", mode, "--profile", profile,
                     "--out", str(out), *extra])  # fmt: skip
    figures: dict[str, Any] = json.loads((out / "figures.json").read_text())
    assert rc == 0, (out / "rollout.log").read_text()[-6000:]
    return figures


def _record(figures: dict[str, Any], measurement: Record) -> None:
    mode = figures["mode"]
    lat = figures["latency_during_rollout_s"]["e2e_s"]
    lines = [
        f"rollout under load ({mode}, {figures['rate']:g} req/s): {figures['requests']} "
        f"requests, {figures['failed']} failed, {figures['retried']} retried, rollout "
        f"{figures['rollout_s']:.0f} s; latency during it (ms) p50 {lat['p50'] * 1000:.0f} "
        f"p90 {lat['p90'] * 1000:.0f} p99 {lat['p99'] * 1000:.0f} max {lat['max'] * 1000:.0f}",
        *bench._lines(figures),
    ]
    measurement(f"rollout-under-load-{mode}", lines, figures)


@pytest.fixture(scope="module")
def with_router(deployed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert deployed.returncode == 0, "the deploy failed; see its test"
    return _measure("router", json.dumps({"method": "none"}))


def test_a_rollout_behind_the_router_fails_no_request(
    with_router: dict[str, Any], measurement: Record
) -> None:
    _record(with_router, measurement)
    assert with_router["rollout_rc"] == 0
    assert {n: r["outcome"] for n, r in with_router["nodes"].items()} == dict.fromkeys(
        NODES, "changed"
    )
    assert with_router["requests"] > 50
    assert with_router["failed"] == 0, with_router["outages"]
    assert with_router["retried"] == 0
    assert _router_view() == dict.fromkeys(NODES, "UP")  # both put back


# The node the rollout without the router restarts; the other one is loaded the same
# and never restarted.
DIRECT_ROLLED = NODES[0]


def test_the_same_rollout_without_the_router_is_an_outage_per_node(
    with_router: dict[str, Any], measurement: Record
) -> None:
    direct = _measure("direct", "inventory", "--limit", DIRECT_ROLLED)
    _record(direct, measurement)
    assert direct["rollout_rc"] == 0
    assert {n: r["outcome"] for n, r in direct["nodes"].items()} == {DIRECT_ROLLED: "changed"}
    # the rolled node's restart cost requests: clients dialled it while it was down; the
    # node left alone answered every request sent to it
    assert sorted(direct["outages"]) == [DIRECT_ROLLED], direct["outages"]
    assert direct["failed"] > 0
    (left,) = (n for n in NODES if n != DIRECT_ROLLED)
    url = f"http://{_address(int(left.removeprefix('lab-ct')))}:8000"
    sent = [json.loads(line) for line in
            (LOGS / "rollout-direct" / "requests.jsonl").read_text().splitlines()]  # fmt: skip
    to_left = [r for r in sent if r["target"] == url]
    assert len(to_left) > 50, sorted({r["target"] for r in sent})
    assert all(r["status"] == 200 and r["error"] is None for r in to_left)
