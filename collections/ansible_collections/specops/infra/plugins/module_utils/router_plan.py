"""Which serving containers a router balances, on which ports: one plan from the inventory.

A router (a host of the ``routers`` group, role ``router``) fronts the serving group it
names (``router_serving_group``, ``serving`` by default): one frontend per served model,
whose backend holds every container of the group that serves that model
(``inference_service_served_model_name``), each at the address and port its server
listens on (``inference_service_host``/``_port``; a wildcard listen address is dialled
at the host's inventory address). Clients reach a model at ``http://<router>:<port>``;
the port of each model is ``router_models[model]``, or, for the models it does not
name, ``router_port`` for the first (in name order), the next port for the next.

The same plan answers the rollout's question (:func:`node_routers`): which routers and
backends a serving container is a server of, so that it is drained there before its
server stops. The HAProxy names are :func:`backend_name` and the container's inventory
name. Pure functions over plain mappings (the filters hand in what they read from
hostvars); stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.addresses import WILDCARDS
from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "Frontend",
    "HaproxySettings",
    "Server",
    "backend_name",
    "node_routers",
    "plan",
    "render_haproxy",
]

_NAME = re.compile(r"[^A-Za-z0-9_.:-]")


def backend_name(model: str) -> str:
    """HAProxy's name for a model's frontend and backend (its characters only)."""
    return "specops_" + _NAME.sub("_", model)


@dataclass(frozen=True)
class Server:
    name: str  # the serving container's inventory name (HAProxy's server name)
    address: str
    port: int


@dataclass(frozen=True)
class Frontend:
    model: str
    backend: str
    port: int
    servers: tuple[Server, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _port(value: object, field: str) -> int:
    try:
        port = int(str(value))
    except (TypeError, ValueError):
        raise ValidationError(field, f"must be a port number (got {value!r})") from None
    if not 1 <= port <= 65535:
        raise ValidationError(field, f"must be 1..65535 (got {port})")
    return port


def _server(name: str, hv: Mapping[str, Any]) -> Server:
    host = str(hv.get("inference_service_host") or "127.0.0.1").strip()
    if host in WILDCARDS:
        host = str(hv.get("ansible_host") or name)
    if host.startswith("127.") or host == "::1":
        raise ValidationError(
            f"{name}: inference_service_host",
            f"{host} is reachable on {name} only: a router needs the address the server"
            " listens on for other hosts (the container's own address)",
        )
    port = _port(hv.get("inference_service_port", 8000), f"{name}: inference_service_port")
    return Server(name, host.strip("[]"), port)


def plan(
    serving: Mapping[str, Mapping[str, Any]],
    *,
    models: Mapping[str, Any] | None = None,
    first_port: int = 8000,
) -> list[Frontend]:
    """The router's frontends: ``serving`` maps each container of its serving group to
    its variables (``inference_service_served_model_name``, ``_host``, ``_port``,
    ``ansible_host``); ``models``: model -> port for the models given a port."""
    by_model: dict[str, list[Server]] = {}
    for name in sorted(serving):
        hv = serving[name]
        model = str(hv.get("inference_service_served_model_name") or "")
        if not model:
            raise ValidationError(
                f"{name}: inference_service_served_model_name",
                "a server of the router's group needs the model name it serves",
            )
        by_model.setdefault(model, []).append(_server(name, hv))
    wanted = dict(models or {})
    unknown = sorted(set(wanted) - set(by_model))
    if unknown:
        raise ValidationError(
            "router_models",
            f"{', '.join(unknown)}: no container of the group serves it (served: "
            f"{', '.join(sorted(by_model)) or 'none'})",
        )
    ports = {m: _port(p, f"router_models.{m}") for m, p in wanted.items()}
    nxt = _port(first_port, "router_port")
    for model in sorted(by_model):
        if model in ports:
            continue
        while nxt in ports.values():
            nxt += 1
        ports[model] = nxt
        nxt += 1
    taken: dict[int, str] = {}
    for model, port in sorted(ports.items()):
        if port in taken:
            raise ValidationError(
                f"router_models.{model}", f"port {port} is {taken[port]}'s already"
            )
        taken[port] = model
    return [
        Frontend(model, backend_name(model), ports[model], tuple(by_model[model]))
        for model in sorted(by_model)
    ]


def node_routers(
    node: str,
    routers: Mapping[str, Sequence[Frontend]],
) -> list[dict[str, Any]]:
    """Where ``node`` is a server: one entry per router and backend holding it
    (``router``, ``backend``, ``server``, ``model``, ``port``, ``servers``: how many
    servers that backend has)."""
    out = []
    for router in sorted(routers):
        for fe in routers[router]:
            if any(s.name == node for s in fe.servers):
                out.append({
                    "router": router, "backend": fe.backend, "server": node,
                    "model": fe.model, "port": fe.port, "servers": len(fe.servers),
                })  # fmt: skip
    return out


@dataclass(frozen=True)
class HaproxySettings:
    """The router role's settings that shape haproxy.cfg (its variables, role ``router``)."""

    bind_address: str = "*"
    health_path: str = "/health"
    check_interval_ms: int = 1000
    rise: int = 2
    fall: int = 2
    timeout_connect_s: int = 5
    timeout_request_s: int = 900  # client and server: a generation streams for minutes
    stats_socket: str = "/run/haproxy/admin.sock"
    state_file: str = "/var/lib/haproxy/server-state"
    maxconn: int = 4096
    balance: str = "leastconn"
    retries: int = 2


_BALANCE = ("leastconn", "roundrobin", "first")


def render_haproxy(frontends: Sequence[Frontend], settings: HaproxySettings) -> str:
    """``/etc/haproxy/haproxy.cfg`` for the plan: one frontend and backend per model, each
    server health-checked on the engine's readiness endpoint; the admin runtime socket
    (drain and ready), the server-state file (a reload keeps a drained server drained)."""
    s = settings
    if s.balance not in _BALANCE:
        raise ValidationError("router_balance", f"{s.balance!r}; valid: {', '.join(_BALANCE)}")
    if not s.health_path.startswith("/") or any(c.isspace() for c in s.health_path):
        raise ValidationError("router_health_path", f"{s.health_path!r}: a path such as /health")
    lines = [
        "# Written by specops (role router); changes here are overwritten.",
        "global",
        "    log /dev/log local0",
        "    chroot /var/lib/haproxy",
        f"    stats socket {s.stats_socket} mode 660 level admin expose-fd listeners",
        "    stats timeout 30s",
        "    user haproxy",
        "    group haproxy",
        "    daemon",
        f"    maxconn {s.maxconn}",
        f"    server-state-file {s.state_file}",
        "",
        "defaults",
        "    log global",
        "    mode http",
        "    option httplog",
        "    option dontlognull",
        f"    timeout connect {s.timeout_connect_s}s",
        f"    timeout client {s.timeout_request_s}s",
        f"    timeout server {s.timeout_request_s}s",
        "    timeout queue 60s",
        # a request whose connection to a server was refused goes to another (never one
        # that reached a server: a generation is not replayed)
        f"    retries {s.retries}",
        "    option redispatch 1",
        "    retry-on conn-failure",
        "    load-server-state-from-file global",
        f"    default-server inter {s.check_interval_ms}ms fall {s.fall} rise {s.rise}",
    ]
    for fe in frontends:
        lines += [
            "",
            f"frontend {fe.backend}",
            f"    bind {s.bind_address}:{fe.port}",
            f"    default_backend {fe.backend}",
            "",
            f"backend {fe.backend}",
            f"    balance {s.balance}",
            f"    option httpchk GET {s.health_path}",
            "    http-check expect status 200",
        ]
        for srv in fe.servers:
            address = f"[{srv.address}]" if ":" in srv.address else srv.address
            lines.append(f"    server {srv.name} {address}:{srv.port} check")
    return "\n".join(lines) + "\n"
