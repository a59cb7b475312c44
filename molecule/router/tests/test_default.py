"""router on a systemd container: HAProxy from Debian in front of two real HTTP
servers, health-checked on /health; a server stopped goes DOWN and comes back UP; the
module drains and puts back a server; a reload keeps a drained server drained."""

from __future__ import annotations

import time
from typing import Any

SOCKET = "/run/haproxy/admin.sock"
STAT = (
    "import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
    "s.sendall(b'show stat\\n');d=b''\n"
    "while True:\n    r=s.recv(65536)\n    if not r: break\n    d+=r\n"
    "print(d.decode())"
)


def _status(host: Any) -> dict[str, str]:
    out = host.check_output(f'python3 -c "{STAT}" {SOCKET}')
    header = out.lstrip("# ").splitlines()[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in out.splitlines()[1:]]
    return {r["svname"]: r["status"] for r in rows if r.get("pxname") == "specops_tiny"
            and r.get("svname") not in ("FRONTEND", "BACKEND")}  # fmt: skip


def _wait(host: Any, server: str, want: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _status(host).get(server) != want:
        assert time.monotonic() < deadline, _status(host)
        time.sleep(0.5)


def test_haproxy_runs_the_plan(host: Any, assert_service_running: Any) -> None:
    assert_service_running("haproxy")
    assert host.service("haproxy").is_enabled
    cfg = host.file("/etc/haproxy/haproxy.cfg").content_string
    assert "server backend-1 127.0.0.1:18001 check" in cfg
    assert "option httpchk GET /health" in cfg
    assert _status(host) == {"backend-1": "UP", "backend-2": "UP"}


def test_requests_reach_the_backends_through_the_router(host: Any) -> None:
    get = "python3 -c \"import urllib.request as u;print(u.urlopen('http://127.0.0.1:8000/health').status)\""
    assert host.check_output(get) == "200"


def test_a_stopped_server_goes_down_and_comes_back_up(host: Any) -> None:
    host.run("systemctl stop backend-2")
    _wait(host, "backend-2", "DOWN")
    host.run("systemctl start backend-2")
    _wait(host, "backend-2", "UP")


def test_the_module_drains_and_puts_back_and_a_reload_keeps_the_drain(
    host: Any, converge: Any
) -> None:
    out = host.ansible("specops.infra.router_server",
                       "backend=specops_tiny server=backend-1 state=drained timeout=30",
                       check=False)  # fmt: skip
    assert out.get("changed"), out
    assert _status(host)["backend-1"] == "DRAIN"
    run = converge(router_check_rise=3)  # another configuration: a reload
    assert run.returncode == 0, run.stdout[-3000:]
    assert "rise 3" in host.file("/etc/haproxy/haproxy.cfg").content_string
    assert _status(host)["backend-1"] == "DRAIN"
    out = host.ansible("specops.infra.router_server",
                       "backend=specops_tiny server=backend-1 state=ready timeout=30",
                       check=False)  # fmt: skip
    assert out["after"]["status"] == "UP", out
    assert converge().returncode == 0  # back to the scenario's configuration
