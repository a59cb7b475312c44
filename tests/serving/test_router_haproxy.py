"""The router, for real: Debian's HAProxy run with the configuration the router role
writes (module_utils/router_plan.render_haproxy) in front of two real HTTP servers on
127.0.0.1 (bench's synthetic SSE server), driven through its runtime API
(module_utils/haproxy.py): health checks on the readiness endpoint, a drain that waits
for the request in flight and sends no new one, a drain that times out and puts the
server back, a server restarted behind the router under a steady load with no request
failed, and a drained server that stays drained across a restart of HAProxy (the
server-state file)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ansible_collections.specops.infra.plugins.module_utils import haproxy
from ansible_collections.specops.infra.plugins.module_utils.router_plan import (
    Frontend,
    HaproxySettings,
    Server,
    backend_name,
    render_haproxy,
)

from specops.bench.load import LoadSpec, run_load, summarize
from specops.bench.synthetic import SyntheticServer

pytestmark = [pytest.mark.slow]

BACKEND = backend_name("synthetic")
Start = Callable[..., SyntheticServer]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Router:
    url: str
    sock: str
    cfg: Path
    state: str
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.cfg)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                haproxy.show_stat(self.sock)
                return
            except haproxy.HaproxyError:
                time.sleep(0.1)
        raise AssertionError("haproxy did not open its runtime socket")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
            self.proc = None

    def stat(self, server: str) -> haproxy.ServerStat:
        return haproxy.find(self.sock, BACKEND, server)

    def wait_up(self, *servers: str) -> None:
        deadline = time.monotonic() + 20
        while not all(self.stat(s).up for s in servers):
            assert time.monotonic() < deadline, [self.stat(s) for s in servers]
            time.sleep(0.2)


@pytest.fixture
def router(synthetic: Start, tmp_path: Path) -> Iterator[tuple[Router, dict[str, SyntheticServer]]]:
    if shutil.which("haproxy") is None:
        pytest.fail("haproxy is missing: scripts/setup.sh packages installs it")
    servers = {
        "ct-a": synthetic(chunk_delay_s=0.01),
        "ct-b": synthetic(chunk_delay_s=0.01),
    }
    port = _free_port()
    fe = Frontend("synthetic", BACKEND, port,
                  tuple(Server(n, "127.0.0.1", s.port) for n, s in servers.items()))  # fmt: skip
    settings = HaproxySettings(
        bind_address="127.0.0.1", check_interval_ms=200, rise=2, fall=2,
        stats_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"),
    )  # fmt: skip
    cfg = tmp_path / "haproxy.cfg"
    text = render_haproxy([fe], settings)
    # a foreground haproxy of the test's own: no daemon, no chroot, no user switch
    for line in ("    daemon\n", "    chroot /var/lib/haproxy\n", "    user haproxy\n",
                 "    group haproxy\n"):  # fmt: skip
        text = text.replace(line, "")
    cfg.write_text(text)
    check = subprocess.run(
        ["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    r = Router(f"http://127.0.0.1:{port}", settings.stats_socket, cfg, settings.state_file)
    r.start()
    try:
        r.wait_up(*servers)
        yield r, servers
    finally:
        r.stop()


def _load(url: str, seconds: float, **kw: object) -> threading.Thread:
    out: dict[str, object] = {}

    def run() -> None:
        spec = LoadSpec(targets=(url,), duration_s=seconds, rate=20.0, output_len=8, drain_s=10)
        out["summary"] = summarize(asyncio.run(run_load(spec)))

    t = threading.Thread(target=run, daemon=True)
    t.summary = out  # type: ignore[attr-defined]
    t.start()
    return t


def test_the_rendered_configuration_is_valid_and_checks_readiness() -> None:
    servers = (Server("ct129", "10.20.1.129", 8000), Server("ct130", "fd00::130", 8000))
    fe = Frontend("qwen3.6-27b", backend_name("qwen3.6-27b"), 8000, servers)
    text = render_haproxy([fe], HaproxySettings())
    assert "backend specops_qwen3.6-27b" in text
    assert "    option httpchk GET /health" in text
    assert "    server ct129 10.20.1.129:8000 check" in text
    assert "    server ct130 [fd00::130]:8000 check" in text
    assert "stats socket /run/haproxy/admin.sock mode 660 level admin" in text
    assert "load-server-state-from-file global" in text


def test_both_servers_are_up_and_serve_through_the_router(router: tuple[Router, dict]) -> None:
    r, servers = router
    t = _load(r.url, 2.0)
    t.join(60)
    s = t.summary["summary"]  # type: ignore[attr-defined]
    assert s["failed"] == 0
    assert s["requests"] > 20
    assert all(srv.requests > 5 for srv in servers.values())
    view = {row.server: row for row in haproxy.show_stat(r.sock)}
    assert view["ct-a"].check_status == "L7OK"
    assert view["ct-a"].total + view["ct-b"].total >= s["requests"]


def test_a_drain_waits_for_the_request_in_flight_and_sends_no_new_one(
    router: tuple[Router, dict],
) -> None:
    r, servers = router
    haproxy.set_state(r.sock, BACKEND, "ct-b", "maint")  # the slow request lands on ct-a
    done: dict[str, httpx.Response] = {}

    def slow() -> None:
        body = {"model": "synthetic", "prompt": "x", "max_tokens": 200, "stream": False}
        done["r"] = httpx.post(f"{r.url}/v1/completions", json=body, timeout=60)

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + 10
    while r.stat("ct-a").sessions == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    haproxy.set_state(r.sock, BACKEND, "ct-b", "ready")
    r.wait_up("ct-b")
    before_a = servers["ct-a"].requests
    out = haproxy.drain(r.sock, BACKEND, "ct-a", timeout=30)
    t.join(30)
    assert done["r"].status_code == 200  # finished, not cut
    assert out.changed
    assert out.seconds > 0.1  # it waited for that request
    assert out.after.admin == "drain"
    assert out.after.idle
    # drained: new requests all go to ct-b
    t = _load(r.url, 1.0)
    t.join(30)
    assert t.summary["summary"]["failed"] == 0  # type: ignore[attr-defined]
    assert servers["ct-a"].requests == before_a
    back = haproxy.ready(r.sock, BACKEND, "ct-a", timeout=20)
    assert back.after.up


def test_a_drain_that_outlives_its_time_puts_the_server_back(
    router: tuple[Router, dict],
) -> None:
    r, _ = router
    haproxy.set_state(r.sock, BACKEND, "ct-b", "maint")

    def slow() -> None:
        body = {"model": "synthetic", "prompt": "x", "max_tokens": 400, "stream": False}
        httpx.post(f"{r.url}/v1/completions", json=body, timeout=60)

    t = threading.Thread(target=slow)
    t.start()
    while r.stat("ct-a").sessions == 0:
        time.sleep(0.05)
    haproxy.set_state(r.sock, BACKEND, "ct-b", "ready")
    r.wait_up("ct-b")
    with pytest.raises(haproxy.HaproxyError, match=r"still in flight .* put back to ready"):
        haproxy.drain(r.sock, BACKEND, "ct-a", timeout=0.5)
    assert r.stat("ct-a").admin == "ready"
    t.join(30)


def test_a_server_restarted_behind_the_router_under_load_fails_no_request(
    router: tuple[Router, dict],
) -> None:
    """Each server in turn: drained, stopped, started again, put back once UP: what the
    rollout does to each node. The load through the router sees no failure."""
    r, servers = router
    t = _load(r.url, 8.0)
    time.sleep(0.5)
    for name, server in servers.items():
        haproxy.drain(r.sock, BACKEND, name, timeout=30)
        port = server.port
        server.stop()
        time.sleep(1.0)  # the server's outage
        server.start(port)
        haproxy.ready(r.sock, BACKEND, name, timeout=30)
    t.join(60)
    s = t.summary["summary"]  # type: ignore[attr-defined]
    assert s["failed"] == 0, s["failed_requests"]
    assert s["retried"] == 0


def test_a_drained_server_stays_drained_across_a_restart_of_haproxy(
    router: tuple[Router, dict],
) -> None:
    r, _ = router
    haproxy.drain(r.sock, BACKEND, "ct-a", timeout=10)
    text = haproxy.save_state(r.sock, r.state)
    assert "ct-a" in text
    r.stop()
    r.start()
    assert r.stat("ct-a").admin == "drain"
    assert r.stat("ct-b").admin == "ready"


def test_the_last_server_up_is_not_drained(router: tuple[Router, dict]) -> None:
    r, _ = router
    haproxy.set_state(r.sock, BACKEND, "ct-b", "maint")
    with pytest.raises(haproxy.HaproxyError, match="no other server is UP"):
        haproxy.drain(r.sock, BACKEND, "ct-a", timeout=5)
    assert r.stat("ct-a").admin == "ready"
    assert r.stat("ct-a").up
