"""The GPU doctor's reading of the router in front of a container (role router).

A serving container that is a server of a router's backend (``specops.infra.node_routers``)
is judged there too: the doctor's container phase reads each such router's view of it
(``specops.infra.router_view`` on the router), and :func:`router_views` turns the loop's
results into evidence; :func:`router_checks` adds the findings, :func:`router_column` the
table's ``router`` column (``lab-ct800 UP``).

Findings:

- ``router_down`` (error): the router's health check fails on the container, so the
  router sends it nothing, whatever the container itself shows;
- ``router_missing`` (error): the inventory makes it a server of the backend, the
  router's configuration does not (playbooks/router.yml not run since);
- ``router_drained`` (warning): drained or in maintenance there (a rollout under way, or
  one that stopped before putting it back);
- ``router_unreachable`` (warning): the router's runtime API did not answer.

Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.checks import (
    Ctx,
    Finding,
)

__all__ = ["router_checks", "router_column", "router_views"]


def router_views(results: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Evidence from the loop results of the container phase's router_view task: per
    router and backend, whether it answered (``ok``, ``error``) and the container's row
    of ``show stat`` (``stat``: None when the router has no such server)."""
    out = []
    for r in results or ():
        item = r.get("item") or {}
        server = str(item.get("server") or "")
        ok = not r.get("failed") and not r.get("unreachable") and not r.get("skipped")
        row = next((s for s in r.get("servers") or () if s.get("server") == server), None)
        out.append({
            "router": str(item.get("router") or "?"), "backend": str(item.get("backend") or "?"),
            "server": server, "ok": ok, "error": "" if ok else str(r.get("msg") or ""),
            "stat": dict(row) if row else None,
        })  # fmt: skip
    return out


def router_checks(c: Ctx, views: Sequence[Mapping[str, Any]]) -> None:
    for v in views:
        where = f"{v['router']} ({v['backend']})"
        stat = v.get("stat")
        if not v.get("ok"):
            c.add(Finding(
                "router_unreachable", "router not answering",
                f"{where}: its runtime API did not answer: {v.get('error')}",
                f"playbooks/router.yml --limit {v['router']} (HAProxy, router_stats_socket)",
                severity="warning",
            ))  # fmt: skip
        elif stat is None:
            c.add(Finding(
                "router_missing", "not in its router",
                f"{where} has no server {c.name}, which the inventory puts there",
                f"ansible-playbook playbooks/router.yml --limit {v['router']}",
            ))  # fmt: skip
        elif stat.get("admin") in ("drain", "maint"):
            c.add(Finding(
                "router_drained", f"{stat.get('admin')} in its router",
                f"{where}: {c.name} is in {stat.get('admin')} ({stat.get('status')}): the router"
                " sends it no new request",
                "a rollout under way puts it back after its gates; one that stopped: run it "
                "again (rollout.yml), or specops.infra.router_server state=ready",
                severity="warning",
            ))  # fmt: skip
        elif not stat.get("up"):
            c.add(Finding(
                "router_down", "down in its router",
                f"{where}: {stat.get('status')}, last check {stat.get('check_status')} "
                f"{stat.get('check_code')} {stat.get('last_check')}".rstrip(),
                "the server's readiness (server_down above), or the router's reach of it: "
                "the container's address and port, router_health_path",
            ))  # fmt: skip


def router_column(views: Sequence[Mapping[str, Any]]) -> str:
    """``lab-ct800 UP`` per router; ``-`` when no router holds the container."""
    if not views:
        return "-"
    parts = []
    for v in views:
        stat = v.get("stat")
        state = "?" if not v.get("ok") else "absent" if stat is None else str(stat.get("status"))
        parts.append(f"{v['router']} {state}")
    return ", ".join(parts)
