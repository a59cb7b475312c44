"""The PVE API through proxmoxer, with the API token; tasks waited on by UPID.

Every call the migration makes goes through :meth:`PveClient.call` with a literal
path template, so ``tests/migrate/test_api_calls.py`` can list and schema-check them.
The token secret is handed to proxmoxer and never logged, printed or put in a repr.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from requests.exceptions import RequestException

from specops.errors import SpecopsError
from specops.migrate.spec import ApiEndpoint

__all__ = ["API_CALLS", "ApiCallError", "PveClient", "TaskResult"]

# Every call this package makes: (METHOD, path template, parameter names). Calls whose
# parameters are built at run time (the migrate options, re-added mount points) list
# every name they can carry; tests/migrate/test_api_calls.py checks each against the
# PVE 9.1 schema and that the code makes no call missing here.
API_CALLS: list[tuple[str, str, list[str]]] = [
    ("GET", "/nodes", []),
    ("GET", "/nodes/{node}/status", []),
    ("GET", "/cluster/resources", ["type"]),
    ("GET", "/nodes/{node}/lxc", []),
    ("GET", "/nodes/{node}/lxc/{vmid}/config", []),
    ("PUT", "/nodes/{node}/lxc/{vmid}/config", ["delete", "mp0", "mp255"]),
    ("GET", "/nodes/{node}/qemu", []),
    ("GET", "/nodes/{node}/storage", []),
    ("GET", "/nodes/{node}/storage/{storage}/content", ["content", "vmid"]),
    (
        "POST",
        "/nodes/{node}/lxc/{vmid}/migrate",
        ["target", "restart", "timeout", "target-storage"],
    ),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/start", []),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown", ["timeout", "forceStop"]),
    ("POST", "/nodes/{node}/vzdump", ["vmid", "storage", "mode", "compress"]),
    ("POST", "/nodes/{node}/lxc", ["vmid", "ostemplate", "restore", "storage"]),
    ("GET", "/nodes/{node}/tasks/{upid}/status", []),
    ("GET", "/nodes/{node}/tasks/{upid}/log", ["start", "limit"]),
]


class ApiCallError(SpecopsError):
    """A refused or failed API call; the message names the call and PVE's answer."""

    def __init__(self, method: str, path: str, detail: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(f"{method} {path}: {detail}")


@dataclass(frozen=True)
class TaskResult:
    upid: str
    node: str
    exitstatus: str
    log: list[str]

    @property
    def ok(self) -> bool:
        return self.exitstatus == "OK"


class PveClient:
    """One cluster's API. ``call(method, template, node=..., vmid=..., **params)``."""

    def __init__(self, endpoint: ApiEndpoint) -> None:
        self.endpoint = endpoint
        self._px = ProxmoxAPI(
            endpoint.host,
            port=endpoint.port,
            user=endpoint.user,
            token_name=endpoint.token_name,
            token_value=endpoint.secret(),
            verify_ssl=endpoint.verify,
            timeout=endpoint.timeout,
        )

    def __repr__(self) -> str:
        return f"PveClient({self.endpoint!r})"

    def call(
        self, method: str, template: str, path_args: dict[str, Any] | None = None, **params: Any
    ) -> Any:
        path = template.format(**(path_args or {}))
        resource = self._px(path.lstrip("/"))
        func: Callable[..., Any] = getattr(resource, method.lower())
        try:
            return func(**params)
        except ResourceException as exc:
            errors = getattr(exc, "errors", None)
            detail = f"{exc.status_code} {exc.status_message}"
            content = str(getattr(exc, "content", "") or "").strip()
            if content and content not in detail:
                detail += f" ({content})"
            if errors:
                detail += " " + "; ".join(f"{k}: {v}" for k, v in dict(errors).items())
            raise ApiCallError(method, path, detail, exc.status_code) from None
        except RequestException as exc:
            raise ApiCallError(
                method,
                path,
                f"no answer from {self.endpoint.host}:{self.endpoint.port} ({type(exc).__name__})",
            ) from None

    # -- reads used by several phases ------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/nodes"))

    def guests(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/cluster/resources", type="vm"))

    def where_is(self, vmid: int) -> tuple[str, str] | None:
        """(node, status) of CT ``vmid`` in this cluster, or None."""
        for entry in self.guests():
            if int(entry.get("vmid", -1)) == vmid and entry.get("type") == "lxc":
                return str(entry["node"]), str(entry.get("status", "unknown"))
        return None

    def ct_config(self, node: str, vmid: int) -> dict[str, Any]:
        data = self.call("GET", "/nodes/{node}/lxc/{vmid}/config", {"node": node, "vmid": vmid})
        return dict(data)

    def running_vms(self, node: str) -> set[int]:
        vms = self.call("GET", "/nodes/{node}/qemu", {"node": node})
        return {int(v["vmid"]) for v in vms if v.get("status") == "running"}

    def wait_task(
        self, node: str, upid: str, *, timeout: float, poll: float = 0.5, want_log: bool = False
    ) -> TaskResult:
        """Wait until the task ends; its exit status and (on failure) its whole log."""
        deadline = time.monotonic() + timeout
        args = {"node": node, "upid": upid}
        while True:
            status = self.call("GET", "/nodes/{node}/tasks/{upid}/status", args)
            if status.get("status") == "stopped":
                exitstatus = str(status.get("exitstatus", "unknown"))
                break
            if time.monotonic() > deadline:
                raise ApiCallError(
                    "GET",
                    f"/nodes/{node}/tasks/{upid}/status",
                    f"task still running after {timeout:.0f} s",
                )
            time.sleep(poll)
        lines: list[str] = []
        if exitstatus != "OK" or want_log:
            log = self.call("GET", "/nodes/{node}/tasks/{upid}/log", args, start=0, limit=1000)
            lines = [str(e.get("t", "")) for e in log]
        return TaskResult(upid=upid, node=node, exitstatus=exitstatus, log=lines)
