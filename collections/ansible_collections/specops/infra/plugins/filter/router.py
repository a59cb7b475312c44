"""Filters for the router in front of a serving group (logic in ``module_utils/router_plan.py``).

{{ groups | specops.infra.router_frontends(hostvars, inventory_hostname) }}
    -> [{model, backend, port, servers: [{name, address, port}]}] (a router's plan)
{{ groups | specops.infra.node_routers(hostvars, inventory_hostname) }}
    -> [{router, backend, server, model, port, servers}] (where a container is a server)
{{ frontends | specops.infra.haproxy_config(settings) }}
    -> /etc/haproxy/haproxy.cfg's text (settings: HaproxySettings' fields)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import SpecopsError
from ansible_collections.specops.infra.plugins.module_utils.router_plan import (
    Frontend,
    HaproxySettings,
    Server,
    plan,
    render_haproxy,
)
from ansible_collections.specops.infra.plugins.module_utils.router_plan import (
    node_routers as _node_routers,
)

__all__ = ["FilterModule"]

# What the plan reads of a serving container (only these are templated out of hostvars).
_KEYS = (
    "inference_service_served_model_name",
    "inference_service_host",
    "inference_service_port",
    "ansible_host",
)


def _frontends(groups: Mapping[str, Sequence[str]], hostvars: Any, router: str) -> list[Frontend]:
    hv = hostvars[router]
    group = str(hv.get("router_serving_group") or "serving")
    serving = {
        str(h): {k: hostvars[h][k] for k in _KEYS if k in hostvars[h]}
        for h in groups.get(group, [])
    }
    try:
        return plan(
            serving, models=hv.get("router_models") or {}, first_port=hv.get("router_port", 8000)
        )
    except SpecopsError as exc:
        raise ValueError(f"router {router}: {exc}") from None


def router_frontends(
    groups: Mapping[str, Sequence[str]], hostvars: Any, router: str
) -> list[dict[str, Any]]:
    return [fe.to_dict() for fe in _frontends(groups, hostvars, router)]


def node_routers(
    groups: Mapping[str, Sequence[str]], hostvars: Any, node: str
) -> list[dict[str, Any]]:
    routers = {str(r): _frontends(groups, hostvars, str(r)) for r in groups.get("routers", [])}
    return _node_routers(node, routers)


def haproxy_config(frontends: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> str:
    fes = []
    for fe in frontends:
        servers = tuple(Server(str(s["name"]), str(s["address"]), int(s["port"]))
                        for s in fe["servers"])  # fmt: skip
        fes.append(Frontend(str(fe["model"]), str(fe["backend"]), int(fe["port"]), servers))
    known = set(HaproxySettings.__dataclass_fields__)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"haproxy_config: unknown settings {', '.join(unknown)}")
    try:
        return render_haproxy(fes, HaproxySettings(**dict(settings)))
    except SpecopsError as exc:
        raise ValueError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "router_frontends": router_frontends,
            "node_routers": node_routers,
            "haproxy_config": haproxy_config,
        }
