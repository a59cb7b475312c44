"""The lab PVE REST API stand-in: ``/api2/json/...`` over HTTPS on 127.0.0.1.

Follows (commits in :data:`specops_lab.pve_schema.UPSTREAM`; README.md has the full table):
pve-manager ``PVE/HTTPServer.pm`` ``rest_handler`` and ``auth_handler`` (501
``Method 'GET /x' not implemented``, 401 "No ticket" / "Authentication failed!", a
``die`` is a 500 with its message, ``raise_param_exc`` a 400), pve-common
``src/PVE/RESTHandler.pm`` ``handle`` with ``src/PVE/JSONSchema.pm`` ``validate``
(:mod:`specops_lab.pve_schema`: 400 ``Parameter verification failed.`` with ``errors`` per
parameter), pve-http-server ``src/PVE/APIServer/Formatter/Standard.pm``
``prepare_response_data`` (``{"data": ..., "message": ..., "errors": ...}``), and
pve-common ``src/PVE/UPID.pm`` ``encode`` for the UPIDs of long operations (tasks).
Each handler names the API2 method it stands for. Tokens are never logged.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import ssl
import subprocess
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specops.errors import SpecopsError, ValidationError
from specops_lab.pve import backup, migrate, pct
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve_formats import split_list
from specops_lab.pve_schema import ApiError, check_call, typed_returns

__all__ = [
    "PVE_RELEASE",
    "PVE_VERSION",
    "LabApi",
    "TaskManager",
    "load_tokens",
    "make_self_signed_cert",
    "make_server",
    "serve",
]

PVE_VERSION = "9.1.1"
PVE_RELEASE = "9.1"
_BOOT = time.time()


def load_tokens(text: str) -> dict[str, str]:
    """Parse token lines ``USER@REALM!TOKENID=SECRET`` (``#`` comments allowed)."""
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        ident, sep, secret = line.partition("=")
        if not sep or "@" not in ident or "!" not in ident or not secret:
            raise ValidationError(
                f"tokens line {number}", "want USER@REALM!TOKENID=SECRET (secret not shown)"
            )
        tokens[ident] = secret
    return tokens


def _pstart(tid: int) -> int:
    try:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class Task:
    upid: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str
    lines: list[str] = field(default_factory=list)
    exitstatus: str | None = None
    endtime: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": self.user,
            "status": "stopped" if self.exitstatus is not None else "running",
        }
        if self.exitstatus is not None:
            out["exitstatus"] = self.exitstatus
        return out


class TaskManager:
    """Worker tasks with PVE UPIDs, logs in ``<root>/var/log/pve/tasks/<X>/<UPID>``."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()

    def start(
        self,
        node: Node,
        dtype: str,
        ident: str,
        user: str,
        work: Callable[[Callable[[str], None]], None],
    ) -> str:
        ready = threading.Event()
        holder: dict[str, Task] = {}

        def run() -> None:
            tid = threading.get_native_id()
            now = int(time.time())
            upid = (
                f"UPID:{node.name}:{tid:08X}:{_pstart(tid):08X}:{now:08X}:{dtype}:{ident}:{user}:"
            )
            task = Task(upid, node.name, tid, _pstart(tid), now, dtype, ident, user)
            with self._lock:
                self._tasks[upid] = task
            holder["task"] = task
            ready.set()
            logdir = node.task_dir / f"{now:X}"[-1]
            logdir.mkdir(parents=True, exist_ok=True)
            logfile = logdir / upid

            def log(line: str) -> None:
                for part in line.rstrip("\n").split("\n"):
                    task.lines.append(part)
                    with logfile.open("a") as fh:
                        fh.write(f"{part}\n")

            try:
                work(log)
                task.exitstatus = "OK"
                log("TASK OK")
            except Exception as exc:
                message = str(exc).split("\n")[0] or type(exc).__name__
                log(str(exc) if isinstance(exc, SpecopsError) else traceback.format_exc())
                task.exitstatus = message
                log(f"TASK ERROR: {message}")
            finally:
                task.endtime = int(time.time())
                task.done.set()

        threading.Thread(target=run, name=f"pve-task-{dtype}-{ident}", daemon=True).start()
        ready.wait()
        return holder["task"].upid

    def get(self, upid: str) -> Task:
        with self._lock:
            task = self._tasks.get(upid)
        if task is None:
            raise ApiError(500, f"no such task '{upid}'")
        return task

    def wait_all(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for task in list(self._tasks.values()):
            task.done.wait(max(0.0, deadline - time.monotonic()))


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0]) * 1024
    return out


def _disk(path: Path) -> dict[str, int]:
    st = os.statvfs(path if path.exists() else "/")
    total, avail = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    free = st.f_bfree * st.f_frsize
    return {"total": total, "avail": avail, "used": total - free, "free": free}


class LabApi:
    """Request routing and handlers; :func:`serve` puts it behind HTTPS."""

    def __init__(self, cluster_dir: Path, tokens: dict[str, str]) -> None:
        self.cluster_dir = cluster_dir
        self.tokens = tokens
        self.tasks = TaskManager()
        self._routes: dict[tuple[str, str], Callable[[dict[str, Any], str], Any]] = {
            ("GET", "/version"): self.version,
            ("GET", "/nodes"): self.nodes,
            ("GET", "/nodes/{node}/status"): self.node_status,
            ("GET", "/cluster/resources"): self.resources,
            ("GET", "/cluster/status"): self.cluster_status,
            ("GET", "/cluster/mapping/pci"): self.mapping_pci,
            ("GET", "/nodes/{node}/storage"): self.storage,
            ("GET", "/nodes/{node}/storage/{storage}/content"): self.storage_content,
            ("GET", "/nodes/{node}/lxc"): self.lxc_list,
            ("POST", "/nodes/{node}/lxc"): self.lxc_create,
            ("DELETE", "/nodes/{node}/lxc/{vmid}"): self.lxc_destroy,
            ("GET", "/nodes/{node}/lxc/{vmid}/config"): self.lxc_config,
            ("PUT", "/nodes/{node}/lxc/{vmid}/config"): self.lxc_config_put,
            ("PUT", "/nodes/{node}/lxc/{vmid}/resize"): self.lxc_resize,
            ("GET", "/nodes/{node}/lxc/{vmid}/status/current"): self.lxc_current,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/start"): self.lxc_start,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/stop"): self.lxc_stop,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown"): self.lxc_shutdown,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/reboot"): self.lxc_reboot,
            ("POST", "/nodes/{node}/lxc/{vmid}/migrate"): self.lxc_migrate,
            ("GET", "/nodes/{node}/tasks/{upid}/status"): self.task_status,
            ("GET", "/nodes/{node}/tasks/{upid}/log"): self.task_log,
            ("POST", "/nodes/{node}/vzdump"): self.vzdump,
            ("GET", "/nodes/{node}/qemu"): self.qemu_list,
            ("GET", "/nodes/{node}/qemu/{vmid}/config"): self.qemu_config,
            ("GET", "/nodes/{node}/qemu/{vmid}/status/current"): self.qemu_current,
        }

    # -- plumbing ----------------------------------------------------------------------
    def authenticate(self, header: str | None) -> str:
        """The token's user (``user@realm!id``) or 401 like PVE (pve-manager
        PVE/HTTPServer.pm ``auth_handler``: "No ticket" without credentials,
        "Authentication failed!" for a token that does not verify)."""
        if not header:
            raise ApiError(401, "No ticket")
        scheme, _, rest = header.partition("=")
        if scheme.strip() != "PVEAPIToken" or "=" not in rest:
            raise ApiError(401, "No ticket")
        ident, _, secret = rest.partition("=")
        known = self.tokens.get(ident.strip())
        if known is None or not hmac.compare_digest(known.encode(), secret.strip().encode()):
            # pve-manager PVE/HTTPServer.pm auth_handler: die "Authentication failed!\n"
            raise ApiError(401, "Authentication failed!")
        return ident.strip()

    def cluster(self) -> Cluster:
        return Cluster.load(self.cluster_dir)

    def node(self, params: dict[str, Any]) -> Node:
        cluster = self.cluster()
        name = str(params["node"])
        if name not in cluster.nodes:
            raise ApiError(
                500,
                f"hostname lookup '{name}' failed - failed to get address "
                f"info for: {name}: Name or service not known",
            )
        return cluster.nodes[name]

    def handle(
        self, method: str, path: str, params: dict[str, Any], auth: str | None
    ) -> tuple[int, str, dict[str, Any] | None]:
        """(HTTP status, reason, JSON body) for one request to ``/api2/json`` + ``path``.

        A refused login answers 401 with the reason only and no body, like PVE's
        ``auth_handler`` path (without PVE's 3 s delay).
        """
        try:
            user = self.authenticate(auth)
        except ApiError as exc:
            return exc.status, exc.message, None
        try:
            endpoint, typed = check_call(method, path, params)
            route = self._routes.get((endpoint.method, endpoint.template))
            if route is None:
                raise ApiError(501, f"Method '{method} {path}' not implemented")
            data = route(typed, user)
            return 200, "OK", {"data": data}
        except ApiError as exc:
            body: dict[str, Any] = {"data": None, "message": exc.message + "\n"}
            if exc.errors:
                body["errors"] = exc.errors
            return exc.status, exc.message, body
        except pct.PveError as exc:
            body = {"data": None, "message": f"{exc}\n"}
            if exc.errors:
                body["errors"] = exc.errors
            return exc.status, str(exc).split("\n")[0], body
        except SpecopsError as exc:
            return 500, str(exc).split("\n")[0], {"data": None, "message": f"{exc}\n"}

    def _task(
        self,
        node: Node,
        dtype: str,
        ident: str,
        user: str,
        work: Callable[[Callable[[str], None]], None],
    ) -> str:
        return self.tasks.start(node, dtype, ident, user, work)

    # -- cluster and nodes -------------------------------------------------------------
    def version(self, _p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2.pm ``version``."""
        return {"version": PVE_VERSION, "release": PVE_RELEASE, "repoid": "5ec0a11a"}

    def _node_entry(self, node: Node) -> dict[str, Any]:
        mem = _meminfo()
        disk = _disk(node.root)
        return {
            "node": node.name,
            "status": "online",
            "type": "node",
            "id": f"node/{node.name}",
            "cpu": os.getloadavg()[0] / (os.cpu_count() or 1),
            "maxcpu": os.cpu_count() or 1,
            "mem": mem["MemTotal"] - mem["MemAvailable"],
            "maxmem": mem["MemTotal"],
            "disk": disk["used"],
            "maxdisk": disk["total"],
            "uptime": int(time.time() - _BOOT),
            "level": "",
        }

    def nodes(self, _p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Nodes.pm ``index`` (``GET /nodes``)."""
        return [self._node_entry(n) for n in self.cluster().nodes.values()]

    def node_status(self, p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Nodes.pm ``status``."""
        node = self.node(p)
        mem = _meminfo()
        uname = os.uname()
        load = [f"{x:.2f}" for x in os.getloadavg()]
        return {
            "cpu": os.getloadavg()[0] / (os.cpu_count() or 1),
            "cpuinfo": {
                "cpus": os.cpu_count() or 1,
                "cores": os.cpu_count() or 1,
                "sockets": 1,
                "model": "lab",
                "mhz": "0",
                "hvm": "1",
                "flags": "",
                "user_hz": 100,
            },
            "memory": {
                "total": mem["MemTotal"],
                "free": mem["MemAvailable"],
                "used": mem["MemTotal"] - mem["MemAvailable"],
                "available": mem["MemAvailable"],
            },
            "swap": {
                "total": mem.get("SwapTotal", 0),
                "free": mem.get("SwapFree", 0),
                "used": mem.get("SwapTotal", 0) - mem.get("SwapFree", 0),
            },
            "rootfs": _disk(node.root),
            "loadavg": load,
            "uptime": int(time.time() - _BOOT),
            "kversion": f"{uname.sysname} {uname.release} {uname.version}",
            "pveversion": f"pve-manager/{PVE_VERSION}/5ec0a11a",
            "current-kernel": {
                "sysname": uname.sysname,
                "release": uname.release,
                "version": uname.version,
                "machine": uname.machine,
            },
            "boot-info": {"mode": "legacy-bios"},
            "idle": 0,
            "wait": 0.0,
        }

    def _guest_entries(self, node: Node) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for vmid in pct.list_cts(node):
            with contextlib.suppress(SpecopsError):
                out.append({"id": f"lxc/{vmid}", "type": "lxc", **self._ct_summary(node, vmid)})
        for vmid in pct.list_vms(node):
            with contextlib.suppress(SpecopsError):
                out.append({"id": f"qemu/{vmid}", "type": "qemu", **self._vm_summary(node, vmid)})
        return out

    def resources(self, p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Cluster.pm ``resources``."""
        kind = p.get("type")
        out: list[dict[str, Any]] = []
        for node in self.cluster().nodes.values():
            if kind in (None, "node"):
                entry = self._node_entry(node)
                entry.pop("level", None)
                out.append(entry)
            if kind in (None, "vm"):
                out.extend(self._guest_entries(node))
            if kind in (None, "storage"):
                for st in self.storage({"node": node.name}, ""):
                    out.append(
                        {
                            "id": f"storage/{node.name}/{st['storage']}",
                            "type": "storage",
                            "node": node.name,
                            "storage": st["storage"],
                            "status": "available",
                            "content": st["content"],
                            "plugintype": st["type"],
                            "shared": st["shared"],
                            "disk": st["used"],
                            "maxdisk": st["total"],
                        }
                    )
        return out

    def cluster_status(self, _p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Cluster.pm ``get_status``."""
        cluster = self.cluster()
        out: list[dict[str, Any]] = [
            {
                "type": "cluster",
                "id": "cluster",
                "name": cluster.name,
                "nodes": len(cluster.nodes),
                "quorate": 1,
                "version": 1,
            }
        ]
        for i, node in enumerate(cluster.nodes.values(), start=1):
            out.append(
                {
                    "type": "node",
                    "id": f"node/{node.name}",
                    "name": node.name,
                    "nodeid": i,
                    "online": 1,
                    "local": 1 if i == 1 else 0,
                    "ip": "127.0.0.1",
                    "level": "",
                }
            )
        return out

    def mapping_pci(self, _p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Cluster/Mapping/PCI.pm ``index``: cluster-wide PCI
        mappings (``/etc/pve/mapping/pci.cfg`` of every lab node)."""
        merged: dict[str, dict[str, Any]] = {}
        for node in self.cluster().nodes.values():
            if not node.pci_mapping_cfg.exists():
                continue
            current: dict[str, Any] | None = None
            for raw in node.pci_mapping_cfg.read_text().splitlines():
                if not raw.strip() or raw.lstrip().startswith("#"):
                    continue
                if raw[0] not in " \t":
                    ident = raw.strip()
                    current = merged.setdefault(ident, {"id": ident, "map": [], "description": ""})
                    continue
                if current is None:
                    continue
                key, _, value = raw.strip().partition(" ")
                if key == "map":
                    if value not in current["map"]:
                        current["map"].append(value)
                elif key == "description":
                    current["description"] = urllib.parse.unquote(value)
                else:
                    current[key] = value
        return list(merged.values())

    def storage(self, p: dict[str, Any], _u: str) -> Any:
        """pve-storage src/PVE/API2/Storage/Status.pm ``index``."""
        node = self.node(p)
        out = []
        for st in node.storages().values():
            if p.get("storage") and st.id != p["storage"]:
                continue
            content = ",".join(st.content)
            if p.get("content") and not set(str(p["content"]).split(",")) & set(st.content):
                continue
            disk = _disk(node.host_path(st.path)) if st.path else _disk(node.root)
            out.append(
                {
                    "storage": st.id,
                    "type": st.type,
                    "content": content,
                    "active": 1,
                    "enabled": 1,
                    "shared": 1 if st.shared else 0,
                    "total": disk["total"],
                    "used": disk["used"],
                    "avail": disk["avail"],
                    "used_fraction": disk["used"] / disk["total"] if disk["total"] else 0,
                }
            )
        return out

    def storage_content(self, p: dict[str, Any], _u: str) -> Any:
        """pve-storage src/PVE/API2/Storage/Content.pm ``index``: volumes of a ``dir``
        storage (templates, backups, ISOs and guest volumes)."""
        node = self.node(p)
        sid = str(p["storage"])
        st = node.storage(sid)
        if st.type != "dir":
            raise ApiError(501, f"storage type '{st.type}' is not emulated by the lab stand-in")
        base = node.host_path(st.path)
        found: list[tuple[str, str, Path]] = []  # (content, volname, path)
        for content, sub, prefix in (
            ("vztmpl", base / "template" / "cache", "vztmpl/"),
            ("iso", base / "template" / "iso", "iso/"),
            ("backup", base / "dump", "backup/"),
        ):
            if content in st.content and sub.is_dir():
                found += [
                    (content, prefix + f.name, f) for f in sorted(sub.iterdir()) if f.is_file()
                ]
        images = base / "images"
        if images.is_dir():
            for vmdir in sorted(d for d in images.iterdir() if d.name.isdigit()):
                for vol in sorted(vmdir.iterdir()):
                    kind = "rootdir" if vol.name.endswith(".subvol") else "images"
                    if kind in st.content:
                        found.append((kind, f"{vmdir.name}/{vol.name}", vol))
        wanted = set(str(p["content"]).split(",")) if p.get("content") else None
        out: list[dict[str, Any]] = []
        for content, volname, path in found:
            if wanted is not None and content not in wanted:
                continue
            owner = volname.split("/", 1)[0]
            vmid = int(owner) if owner.isdigit() else None
            if vmid is None and content == "backup":
                m = re.match(r"vzdump-(?:lxc|qemu)-(\d+)-", path.name)
                vmid = int(m.group(1)) if m else None
            if p.get("vmid") is not None and vmid != int(p["vmid"]):
                continue
            fmt = "subvol" if path.is_dir() else _volume_format(path.name)
            entry: dict[str, Any] = {
                "volid": f"{sid}:{volname}",
                "content": content,
                "format": fmt,
                "size": 0 if path.is_dir() else path.stat().st_size,
                "ctime": int(path.stat().st_mtime),
            }
            if vmid is not None:
                entry["vmid"] = vmid
            out.append(entry)
        return out

    # -- containers --------------------------------------------------------------------
    def _ct_summary(self, node: Node, vmid: int) -> dict[str, Any]:
        conf, _ = pct.load_ct_conf(node, vmid)
        items = conf.main.options
        st = pct.ct_status(node, vmid)
        out: dict[str, Any] = {
            "vmid": vmid,
            "name": items.get("hostname", f"CT{vmid}"),
            "status": st.status,
            "node": node.name,
            "maxmem": int(items.get("memory", "512")) * 1024 * 1024,
            "maxswap": int(items.get("swap", "512")) * 1024 * 1024,
            "cpus": int(items.get("cores", str(os.cpu_count() or 1))),
            "maxcpu": int(items.get("cores", str(os.cpu_count() or 1))),
            "maxdisk": 0,
            "disk": 0,
            "mem": 0,
            "cpu": 0,
            "uptime": 0,
            "template": 1 if items.get("template") == "1" else 0,
        }
        if st.pid:
            out["pid"] = st.pid
            with contextlib.suppress(OSError):
                out["uptime"] = int(time.time() - os.stat(f"/proc/{st.pid}").st_mtime)
        if items.get("lock"):
            out["lock"] = items["lock"]
        if items.get("tags"):
            out["tags"] = items["tags"]
        return out

    def lxc_list(self, p: dict[str, Any], _u: str) -> Any:
        """pve-container src/PVE/API2/LXC.pm ``vmlist``."""
        node = self.node(p)
        out = []
        for vmid in pct.list_cts(node):
            entry = self._ct_summary(node, vmid)
            entry["type"] = "lxc"
            entry.pop("node", None)
            out.append(entry)
        return out

    def lxc_current(self, p: dict[str, Any], _u: str) -> Any:
        """pve-container src/PVE/API2/LXC/Status.pm ``vm_status``."""
        node = self.node(p)
        out = self._ct_summary(node, int(p["vmid"]))
        out.pop("node", None)
        out["type"] = "lxc"
        out["ha"] = {"managed": 0}
        return out

    def lxc_config(self, p: dict[str, Any], _u: str) -> Any:
        """pve-container src/PVE/API2/LXC/Config.pm ``vm_config``."""
        node, vmid = self.node(p), int(p["vmid"])
        data = pct.ct_config_dict(
            node, vmid, snapshot=p.get("snapshot"), current=bool(p.get("current"))
        )
        return typed_returns("GET", f"/nodes/{node.name}/lxc/{vmid}/config", data)

    def lxc_config_put(self, p: dict[str, Any], _u: str) -> Any:
        """pve-container src/PVE/API2/LXC/Config.pm ``update_vm``."""
        node = self.node(p)
        vmid = int(p["vmid"])
        skip = {"node", "vmid", "delete", "digest", "revert"}
        changes = {k: _conf_value(v) for k, v in p.items() if k not in skip}
        pct.ct_update_config(
            node,
            vmid,
            changes,
            delete=split_list(p.get("delete")),
            digest=p.get("digest"),
            revert=split_list(p.get("revert")),
        )
        return None

    def lxc_resize(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC.pm ``resize_vm``."""
        node, vmid = self.node(p), int(p["vmid"])
        pct.load_ct_conf(node, vmid)
        disk, size = str(p["disk"]), str(p["size"])
        return self._task(
            node, "resize", str(vmid), user, lambda log: pct.ct_resize(node, vmid, disk, size, log)
        )

    def lxc_create(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC.pm ``create_vm`` (create and restore)."""
        cluster = self.cluster()
        node = self.node(p)
        vmid = int(p["vmid"])
        restore, force = bool(p.get("restore")), bool(p.get("force"))
        where = cluster.find_guest(vmid)
        if where and not restore:
            raise ApiError(500, f"CT {vmid} already exists on node '{where[0].name}'")
        if where and (not force or where[0].name != node.name):
            raise ApiError(
                500,
                f"unable to restore CT {vmid} - CT {vmid} already exists on node '{where[0].name}'",
            )
        skip = {
            "node",
            "vmid",
            "ostemplate",
            "start",
            "restore",
            "force",
            "unique",
            "ignore-unpack-errors",
            "password",
            "ssh-public-keys",
            "pool",
            "bwlimit",
            "ha-managed",
        }
        options = {k: _conf_value(v) for k, v in p.items() if k not in skip}
        start = bool(p.get("start"))

        def work(log: Callable[[str], None]) -> None:
            if restore:
                backup.ct_restore(
                    node, vmid, str(p["ostemplate"]), options, log, force=force, cluster=cluster
                )
                if start:
                    pct.ct_start(node, vmid, log)
                return
            pct.ct_create(
                cluster,
                node,
                vmid,
                ostemplate=str(p["ostemplate"]),
                options=options,
                log=log,
                start=start,
            )

        return self._task(node, "vzrestore" if restore else "vzcreate", str(vmid), user, work)

    def lxc_destroy(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC.pm ``destroy_vm``."""
        node = self.node(p)
        vmid = int(p["vmid"])
        conf, _ = pct.load_ct_conf(node, vmid)
        force = bool(p.get("force"))
        # API2/LXC.pm destroy_vm's early checks, before the task is forked
        if conf.get("protection") == "1":
            raise pct.PveError(f"can't remove CT {vmid} - protection mode enabled")
        if conf.get("lock"):
            raise pct.PveError(f"CT is locked ({conf.get('lock')})")
        if not force and pct.ct_status(node, vmid).status == "running":
            raise pct.PveError(f"unable to destroy CT {vmid} - container is running")
        return self._task(
            node,
            "vzdestroy",
            str(vmid),
            user,
            lambda log: pct.ct_destroy(node, vmid, log, force=force),
        )

    def _check_ct(
        self, node: Node, vmid: int, *, running: bool | None = None, noun: str = "CT"
    ) -> None:
        """PVE's synchronous checks before a status task is forked."""
        pct.load_ct_conf(node, vmid)
        if running is None:
            return
        is_running = pct.ct_status(node, vmid).status == "running"
        if running and not is_running:
            raise pct.PveError(f"{noun} {vmid} not running")
        if not running and is_running:
            raise pct.PveError(f"CT {vmid} already running")

    def lxc_start(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC/Status.pm ``vm_start``."""
        node, vmid = self.node(p), int(p["vmid"])
        self._check_ct(node, vmid, running=False)
        return self._task(
            node, "vzstart", str(vmid), user, lambda log: pct.ct_start(node, vmid, log)
        )

    def lxc_stop(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC/Status.pm ``vm_stop``."""
        node, vmid = self.node(p), int(p["vmid"])
        self._check_ct(node, vmid, running=True)
        return self._task(node, "vzstop", str(vmid), user, lambda log: pct.ct_stop(node, vmid, log))

    def lxc_shutdown(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC/Status.pm ``vm_shutdown``."""
        node, vmid = self.node(p), int(p["vmid"])
        self._check_ct(node, vmid, running=True)
        timeout, force = int(p.get("timeout", 60)), bool(p.get("forceStop"))
        return self._task(
            node,
            "vzshutdown",
            str(vmid),
            user,
            lambda log: pct.ct_shutdown(node, vmid, log, timeout=timeout, force_stop=force),
        )

    def lxc_reboot(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC/Status.pm ``vm_reboot``."""
        node, vmid = self.node(p), int(p["vmid"])
        self._check_ct(node, vmid, running=True, noun="VM")
        timeout = int(p.get("timeout", 60))
        return self._task(
            node,
            "vzreboot",
            str(vmid),
            user,
            lambda log: pct.ct_reboot(node, vmid, log, timeout=timeout),
        )

    def lxc_migrate(self, p: dict[str, Any], user: str) -> Any:
        """pve-container src/PVE/API2/LXC.pm ``migrate_vm``."""
        cluster = self.cluster()
        node, vmid = self.node(p), int(p["vmid"])
        target = str(p["target"])
        # API2/LXC.pm migrate_vm: these checks answer before a task is forked.
        if target == node.name:
            raise ApiError(
                400, "Parameter verification failed.", {"target": "target is local node."}
            )
        if target not in cluster.nodes:  # PVE::Cluster::check_node_exists
            raise ApiError(500, f"no such cluster node '{target}'")
        if p.get("target-storage"):
            raise ApiError(501, "target-storage is not emulated by the lab stand-in")
        pct.load_ct_conf(node, vmid)
        running = pct.ct_status(node, vmid).status == "running"
        if running and not p.get("online") and not p.get("restart"):
            raise pct.PveError("can't migrate running container without --online or --restart")
        restart, online = bool(p.get("restart")), bool(p.get("online"))
        timeout = int(p.get("timeout", 180))
        return self._task(
            node,
            "vzmigrate",
            str(vmid),
            user,
            lambda log: migrate.ct_migrate(
                cluster, node, vmid, target, log, restart=restart, online=online, timeout=timeout
            ),
        )

    def vzdump(self, p: dict[str, Any], user: str) -> Any:
        """pve-manager PVE/API2/VZDump.pm ``vzdump``."""
        node = self.node(p)
        ids = [int(v) for v in re.split(r"[,;\s]+", str(p.get("vmid", "")).strip()) if v]
        if not ids or p.get("all") or p.get("pool"):
            raise ApiError(501, "the lab vzdump emulates explicit 'vmid' lists only")
        for vmid in ids:
            pct.load_ct_conf(node, vmid)
        storage, mode = str(p.get("storage", "local")), str(p.get("mode", "snapshot"))
        compress = str(p.get("compress", "0"))

        def work(log: Callable[[str], None]) -> None:
            for vmid in ids:
                backup.ct_vzdump(node, vmid, log, storage=storage, mode=mode, compress=compress)

        return self._task(
            node, "vzdump", ",".join(map(str, ids)) if len(ids) > 1 else str(ids[0]), user, work
        )

    # -- tasks -------------------------------------------------------------------------
    def _node_task(self, p: dict[str, Any]) -> Task:
        node = self.node(p)
        task = self.tasks.get(str(p["upid"]))
        if task.node != node.name:
            raise ApiError(500, f"no such task '{p['upid']}' on node '{node.name}'")
        return task

    def task_status(self, p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Tasks.pm ``read_task_status``."""
        return self._node_task(p).status()

    def task_log(self, p: dict[str, Any], _u: str) -> Any:
        """pve-manager PVE/API2/Tasks.pm ``read_task_log``."""
        task = self._node_task(p)
        start, limit = int(p.get("start", 0)), int(p.get("limit", 50))
        lines = task.lines[start : start + limit] if limit else task.lines[start:]
        return [{"n": start + i + 1, "t": t} for i, t in enumerate(lines)]

    # -- VMs ---------------------------------------------------------------------------
    def _vm_summary(self, node: Node, vmid: int) -> dict[str, Any]:
        items = pct.load_vm_conf(node, vmid).main.options
        running = pct.vm_running(node, vmid)
        memory = re.search(r"(?:^|,)(?:current=)?(\d+)(?:,|$)", items.get("memory", "2048"))
        mem_mb = int(memory.group(1)) if memory else 2048
        return {
            "vmid": vmid,
            "name": items.get("name", f"VM{vmid}"),
            "node": node.name,
            "status": "running" if running else "stopped",
            "maxmem": mem_mb * 1024 * 1024,
            "cpus": int(items.get("cores", "1")),
            "maxcpu": int(items.get("cores", "1")),
            "maxdisk": 0,
            "disk": 0,
            "mem": 0,
            "cpu": 0,
            "uptime": 0,
            "template": 1 if items.get("template") == "1" else 0,
        }

    def qemu_list(self, p: dict[str, Any], _u: str) -> Any:
        """qemu-server src/PVE/API2/Qemu.pm ``vmlist``."""
        node = self.node(p)
        out = []
        for vmid in pct.list_vms(node):
            entry = self._vm_summary(node, vmid)
            entry.pop("node", None)
            out.append(entry)
        return out

    def qemu_config(self, p: dict[str, Any], _u: str) -> Any:
        """qemu-server src/PVE/API2/Qemu.pm ``vm_config``."""
        node, vmid = self.node(p), int(p["vmid"])
        data = pct.vm_config_dict(node, vmid, snapshot=p.get("snapshot"))
        return typed_returns("GET", f"/nodes/{node.name}/qemu/{vmid}/config", data)

    def qemu_current(self, p: dict[str, Any], _u: str) -> Any:
        """qemu-server src/PVE/API2/Qemu.pm ``vm_status``."""
        node, vmid = self.node(p), int(p["vmid"])
        if not node.vm_conf(vmid).exists():
            raise pct.PveError(
                f"Configuration file 'nodes/{node.name}/qemu-server/{vmid}.conf' does not exist"
            )
        out = self._vm_summary(node, vmid)
        out.pop("node", None)
        out["qmpstatus"] = out["status"]
        out["ha"] = {"managed": 0}
        return out


def _volume_format(name: str) -> str:
    """PVE's format of a file volume: ``tzst``/``tgz``/``tar`` archives, ``iso``, ``raw``."""
    for suffix, fmt in (
        (".tar.zst", "tzst"),
        (".tar.gz", "tgz"),
        (".tar.xz", "txz"),
        (".tar", "tar"),
        (".iso", "iso"),
        (".qcow2", "qcow2"),
    ):
        if name.endswith(suffix):
            return fmt
    return "raw"


def _conf_value(value: Any) -> str:
    """A typed API value as PVE writes it into the conf (``1`` not ``True``/``1.0``)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: the headers and the body go out as two writes; with Nagle on, the body
    # waits for the client's delayed ACK of the headers (40 ms on every call here).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        # Never log headers (tokens); the path holds no secrets.
        if self.server.quiet:
            return
        super().log_message(format, *args)

    def _params(self) -> tuple[str, dict[str, Any]]:
        url = urllib.parse.urlsplit(self.path)
        params: dict[str, Any] = {}
        pairs = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length).decode()
            if (self.headers.get("Content-Type") or "").startswith("application/json"):
                params.update(json.loads(body) if body.strip() else {})
            else:
                pairs += urllib.parse.parse_qsl(body, keep_blank_values=True)
        for key, value in pairs:
            if key in params:
                prev = params[key]
                params[key] = [*prev, value] if isinstance(prev, list) else [prev, value]
            else:
                params[key] = value
        return urllib.parse.unquote(url.path), params

    def _dispatch(self) -> None:
        path, params = self._params()
        prefix = "/api2/json"
        if path == prefix or path.startswith(prefix + "/"):
            api_path = path[len(prefix) :] or "/"
            status, reason, body = self.server.api.handle(
                self.command, api_path, params, self.headers.get("Authorization")
            )
        else:
            status, reason = 501, "no such uri"
            body = {"data": None, "message": reason + "\n"}
        raw = b"" if body is None else json.dumps(body).encode()
        self.server.record(self.command, path, status)
        self.send_response(status, reason.replace("\n", " "))
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, addr: tuple[str, int], api: LabApi, quiet: bool, request_log: Path | None = None
    ) -> None:
        self.api = api
        self.quiet = quiet
        self.request_log = request_log
        self._log_lock = threading.Lock()
        super().__init__(addr, _Handler)

    def record(self, method: str, path: str, status: int) -> None:
        """One line per request in the request log (the path only: no header, no body)."""
        if self.request_log is None:
            return
        line = f"{time.time():.3f} {method} {path} {status}\n"
        with self._log_lock, self.request_log.open("a", encoding="utf-8") as fh:
            fh.write(line)


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed cert for 127.0.0.1/localhost (made with ``openssl``)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "pve-ssl.pem", directory / "pve-ssl.key"
    if not (cert.exists() and key.exists()):
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "30",
                "-subj",
                "/CN=specops-lab-pve",
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        key.chmod(0o600)
    return cert, key


def make_server(
    cluster_dir: Path,
    tokens: dict[str, str],
    *,
    port: int = 8006,
    cert_dir: Path | None = None,
    quiet: bool = False,
    request_log: Path | None = None,
) -> tuple[_Server, Path]:
    """A bound HTTPS server (not yet serving) and its certificate's path."""
    Cluster.load(cluster_dir)  # fail early on a bad cluster dir
    cert, key = make_self_signed_cert(cert_dir or cluster_dir / "pki")
    api = LabApi(cluster_dir, tokens)
    server = _Server(("127.0.0.1", port), api, quiet, request_log)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    return server, cert


def serve(
    cluster_dir: Path,
    tokens: dict[str, str],
    *,
    port: int = 8006,
    cert_dir: Path | None = None,
    quiet: bool = False,
    ready: Callable[[int], None] | None = None,
    request_log: Path | None = None,
) -> None:
    """Serve the API on ``127.0.0.1:port`` (HTTPS) until interrupted; ``request_log``
    gets one line per request (method, path, status)."""
    server, _ = make_server(
        cluster_dir, tokens, port=port, cert_dir=cert_dir, quiet=quiet, request_log=request_log
    )
    if ready:
        ready(server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.api.tasks.wait_all(timeout=60)
