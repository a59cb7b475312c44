"""Preflight: read-only checks before a migration; each failure names what is missing.

Reads the source cluster's API (where the CT is, its config, the target node, storage,
running VMs) and the TARGET node's GPU facts (``ansible_facts.specops_gpu`` of module
``specops.infra.gpu_facts``, gathered on the target with the node's roots). Nothing is
written anywhere but the migration's state file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    matches_model,
    select_free,
)

from specops.migrate.client import PveClient
from specops.migrate.spec import MigrationSpec

__all__ = [
    "Check",
    "PreflightResult",
    "ct_gpu_lines",
    "latest_backup",
    "parse_size",
    "preflight",
    "select_cards",
    "source_gone",
]

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_NV_MINOR_RE = re.compile(r"/dev/nvidia(\d+)\b")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str


@dataclass
class PreflightResult:
    vmid: int
    source: str
    target: str
    mode: str
    ct_status: str
    already_on_target: bool
    checks: list[Check] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)  # chosen target cards (addresses)
    rootfs: str = ""
    target_driver: str | None = None
    target_driver_loaded: bool = False
    source_gpu_lines: list[str] = field(default_factory=list)
    recreate: dict[str, str] = field(default_factory=dict)  # mpN -> value to re-add
    # Source node gone: "restore" (from ``archive``) or "recreate" (from the inventory);
    # "" when the source is up (a normal move). ``lost``: what cannot be carried over.
    recovery: str = ""
    archive: str = ""
    archive_ctime: int = 0
    restore_storage: str = ""
    lost: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.message}" for c in self.checks if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["plan"] = self.plan()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreflightResult:
        """The result a state file recorded (unknown keys, e.g. ``ok``, ignored)."""
        known = {f for f in cls.__dataclass_fields__ if f != "checks"}
        result = cls(**{k: v for k, v in data.items() if k in known})
        result.checks = [Check(**c) for c in data.get("checks", [])]
        return result

    def plan(self) -> str:
        """One line: what the migration will do (the check-mode plan)."""
        cards = ", ".join(self.gpus) if self.gpus else "no card"
        if self.already_on_target:
            how = f"CT {self.vmid} is already on {self.target}: the move is skipped"
        elif self.recovery == "restore":
            how = (
                f"source {self.source} is gone: CT {self.vmid} is restored on {self.target} "
                f"from {self.archive}"
            )
        elif self.recovery == "recreate":
            how = (
                f"source {self.source} is gone and no backup is seen: CT {self.vmid} is "
                f"re-created on {self.target} from the inventory"
            )
        else:
            how = f"CT {self.vmid} moves {self.source} -> {self.target} ({self.mode})"
        return f"{how}; cards on {self.target}: {cards}"


def parse_size(text: str) -> int:
    """PVE disk size (``8G``, ``512M``, ``0.5T``; bare number = bytes... PVE uses GiB
    for a bare rootfs size in pct create, but a conf always carries a unit)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a PVE size: {text!r}")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)


def _props(value: str, default_key: str = "volume") -> dict[str, str]:
    out: dict[str, str] = {}
    for i, part in enumerate(value.split(",")):
        if "=" in part:
            k, _, v = part.partition("=")
            out[k.strip()] = v.strip()
        elif i == 0:
            out[default_key] = part.strip()
    return out


def ct_gpu_lines(config: Mapping[str, Any]) -> list[str]:
    """The CT's GPU lines as ``key: value`` text: devN entries naming /dev/nvidia* and
    raw lxc lines that allow major 195 / nvidia majors or bind-mount /dev/nvidia*."""
    lines: list[str] = []
    for key in sorted(config, key=lambda k: (len(k), k)):
        if re.fullmatch(r"dev\d+", key) and "/dev/nvidia" in str(config[key]):
            lines.append(f"{key}: {config[key]}")
    for item in config.get("lxc", []) or []:
        key, value = str(item[0]), str(item[1])
        if "devices.allow" in key or ("mount.entry" in key and "/dev/nvidia" in value):
            lines.append(f"{key}: {value}")
    return lines


def _used_minors(config: Mapping[str, Any]) -> set[int]:
    return {int(m) for line in ct_gpu_lines(config) for m in _NV_MINOR_RE.findall(line)}


def select_cards(
    facts: Mapping[str, Any],
    model: str,
    count: int,
    *,
    running_vms: set[int] | None,
    minors_in_use: set[int],
    min_vram_gib: int = 0,
    allow_stopped_vm_cards: bool = False,
) -> tuple[list[str], list[str]]:
    """(chosen addresses, problems), by module_utils ``gpu_select``'s one rule, the same
    the target phase's vfio release and passthrough apply: ``model`` is the exact product
    name or the vendor:device id; a card is free when no running VM (the API's view,
    ``running_vms``, or the node's) and no process holds it, a stopped VM's card only
    with ``allow_stopped_vm_cards``; and not given to another CT of the node."""
    problems: list[str] = []
    cards: list[Mapping[str, Any]] = list(facts.get("gpus", []))
    node = str(facts.get("node") or "the target")
    taken = {
        str(c["address"]): f"given to another container (/dev/nvidia{minor})"
        for c in cards
        if (minor := (c.get("nvidia") or {}).get("minor")) is not None
        and int(minor) in minors_in_use
    }
    try:
        selection = select_free(
            cards,
            model,
            max(count, 1),
            node=node,
            allow_stopped_vm_cards=allow_stopped_vm_cards,
            running_vms=running_vms,
            taken=taken,
        )
    except GpuSelectError as exc:
        return [], [str(exc)]
    if len(selection.chosen) < count:
        hint = ""
        if selection.stopped_only and not allow_stopped_vm_cards:
            hint = (
                f" ({selection.stopped_only} more assigned to stopped VMs: "
                "migrate_allow_stopped_vm_cards takes them)"
            )
        problems.append(
            f"{node} has {len(selection.chosen)} free '{model}' card(s), {count} wanted{hint}: "
            + "; ".join(selection.notes)
        )
    candidates = [c for c in cards if matches_model(c, model)]
    if min_vram_gib and candidates:
        name = str(candidates[0].get("name"))
        product = gpu_catalogue.by_pci_id(str(candidates[0].get("pci_id", "")))
        vram = product.vram_gib if product is not None else None
        if vram is None:
            problems.append(
                f"VRAM of '{name}' is not known to specops (the GPU catalogue,"
                " module_utils/gpu_catalogue.py); drop min_vram_gib or add the card there"
            )
        elif vram < min_vram_gib:
            problems.append(f"'{name}' has {vram} GiB per card, {min_vram_gib} GiB wanted")
    return selection.chosen[:count], problems


def _check_target(spec: MigrationSpec, client: PveClient) -> Check:
    nodes = {str(n["node"]): str(n.get("status", "unknown")) for n in client.nodes()}
    if spec.target not in nodes:
        return Check(
            "target_node",
            False,
            f"{spec.target} is not a node of the cluster (nodes: {', '.join(sorted(nodes))})",
        )
    if nodes[spec.target] != "online":
        return Check("target_node", False, f"{spec.target} is {nodes[spec.target]}, not online")
    status = client.call("GET", "/nodes/{node}/status", {"node": spec.target})
    version = (status.get("pveversion") or "").strip()
    return Check("target_node", True, f"{spec.target} online and answering ({version or 'pve'})")


def _check_storage(
    spec: MigrationSpec, client: PveClient, config: Mapping[str, Any]
) -> tuple[Check, str]:
    rootfs = str(config.get("rootfs", ""))
    props = _props(rootfs)
    volume = props.get("volume", "")
    sid = spec.target_storage or volume.split(":", 1)[0]
    try:
        size = parse_size(props.get("size", "0G"))
    except ValueError as exc:
        return Check("storage", False, f"rootfs: {exc}"), rootfs
    storages = {
        str(s["storage"]): s
        for s in client.call("GET", "/nodes/{node}/storage", {"node": spec.target})
    }
    st = storages.get(sid)
    if st is None:
        return Check(
            "storage",
            False,
            f"storage '{sid}' for the rootfs does not exist on {spec.target} "
            f"(there: {', '.join(sorted(storages))})",
        ), rootfs
    content = str(st.get("content", "")).split(",")
    if not st.get("enabled", 1) or not st.get("active", 0):
        return Check(
            "storage", False, f"storage '{sid}' on {spec.target} is not enabled and active"
        ), rootfs
    if "rootdir" not in content:
        return Check(
            "storage",
            False,
            f"storage '{sid}' on {spec.target} does not hold container volumes "
            f"(content {','.join(content)}, needs rootdir)",
        ), rootfs
    avail = int(st.get("avail", 0))
    if not st.get("shared") and avail < size:
        return Check(
            "storage",
            False,
            f"storage '{sid}' on {spec.target} has {avail / 2**30:.1f} GiB free, "
            f"the rootfs needs {size / 2**30:.1f} GiB",
        ), rootfs
    return Check(
        "storage",
        True,
        f"'{sid}' on {spec.target}: {avail / 2**30:.1f} GiB free "
        f"for a {size / 2**30:.1f} GiB rootfs",
    ), rootfs


def _check_mounts(spec: MigrationSpec, config: Mapping[str, Any]) -> tuple[Check, dict[str, str]]:
    problems: list[str] = []
    recreate: dict[str, str] = {}
    for key in spec.recreate_mounts:
        if key not in config:
            problems.append(f"{key} is listed in recreate_mounts but the container has no {key}")
    for key in sorted((k for k in config if re.fullmatch(r"mp\d+", k)), key=lambda k: int(k[2:])):
        value = str(config[key])
        props = _props(value)
        volume = props.get("volume", "")
        if not volume.startswith("/"):
            continue  # a storage volume: migrated with the CT
        if key in spec.recreate_mounts:
            recreate[key] = value
        elif props.get("shared") != "1":
            kind = "device" if volume.startswith("/dev/") else "bind"
            problems.append(
                f"{key} ({volume}) is a local {kind} mount without shared=1: mark it shared=1 "
                f"(the same path on every node) or list it in recreate_mounts"
            )
    if problems:
        return Check("mounts", False, "; ".join(problems)), recreate
    note = (
        f" ({', '.join(recreate)} removed before the move and re-added on the target)"
        if recreate
        else ""
    )
    return Check("mounts", True, "every mount point can move" + note), recreate


def preflight(
    spec: MigrationSpec,
    client: PveClient,
    target_facts: Mapping[str, Any] | None,
    *,
    target_client: PveClient | None = None,
) -> PreflightResult:
    """Run every check; never raises for a failed check (see ``result.failures()``)."""
    tclient = target_client or client
    if spec.source and spec.mode == "migrate":
        gone = source_gone(spec, client)
        if gone is not None:
            return _preflight_source_gone(spec, client, target_facts, gone)
    where = client.where_is(spec.vmid)
    twhere = tclient.where_is(spec.vmid) if target_client is not None else None
    if where is None and twhere is not None:
        where = twhere
    if where is None:
        result = PreflightResult(spec.vmid, spec.source, spec.target, spec.mode, "missing", False)
        result.checks.append(Check("container", False, f"CT {spec.vmid} is not in the cluster"))
        return result
    node, status = where
    on_target = node == spec.target and (target_client is None or twhere is not None)
    result = PreflightResult(spec.vmid, node, spec.target, spec.mode, status, on_target)
    if spec.source and node not in (spec.source, spec.target):
        result.checks.append(
            Check(
                "container", False, f"CT {spec.vmid} is on {node}, not on the source {spec.source}"
            )
        )
        return result
    result.checks.append(
        Check(
            "container",
            True,
            f"CT {spec.vmid} is {status} on {node}"
            + (" (already on the target: the move is skipped)" if on_target else ""),
        )
    )
    if spec.source:
        result.checks.append(
            Check(
                "mode",
                True,
                f"normal: {spec.source} is online in the cluster; CT {spec.vmid} is moved "
                f"from it ({spec.mode})",
            )
        )
    config = (tclient if on_target and target_client else client).ct_config(node, spec.vmid)
    result.source_gpu_lines = ct_gpu_lines(config)

    result.checks.append(_check_target(spec, tclient))
    if spec.mode == "migrate":
        names = {str(n["node"]) for n in client.nodes()}
        ok = spec.target in names
        msg = f"{spec.target} is in the source's cluster: POST .../lxc/{spec.vmid}/migrate"
        if not ok:
            msg = (
                f"{spec.target} is not in the cluster of {node}: "
                "set mode backup_restore (with target_api) in the inventory"
            )
        result.checks.append(Check("cluster", ok, msg))
    else:
        result.checks.append(
            Check(
                "cluster",
                True,
                f"backup/restore chosen in the inventory (vzdump to '{spec.backup_storage}', "
                f"restore on {spec.target})",
            )
        )

    if not next(c.ok for c in result.checks if c.name == "target_node"):  # its checks cannot run
        result.checks.append(
            Check("target_checks", False, f"storage and cards of {spec.target} not checked")
        )
        return result
    if not on_target:
        storage_check, result.rootfs = _check_storage(spec, tclient, config)
        result.checks.append(storage_check)
        mounts_check, result.recreate = _check_mounts(spec, config)
        result.checks.append(mounts_check)
    else:
        result.rootfs = str(config.get("rootfs", ""))

    _check_gpus(spec, tclient, target_facts, result)
    return result


def _check_gpus(
    spec: MigrationSpec,
    tclient: PveClient,
    target_facts: Mapping[str, Any] | None,
    result: PreflightResult,
) -> None:
    if spec.gpu_count:
        if target_facts is None:
            result.checks.append(
                Check(
                    "gpus",
                    False,
                    f"no GPU facts of {spec.target} (run specops.infra.gpu_facts on it)",
                )
            )
        else:
            minors: set[int] = set()
            for ct in tclient.call("GET", "/nodes/{node}/lxc", {"node": spec.target}):
                if int(ct["vmid"]) != spec.vmid:
                    minors |= _used_minors(tclient.ct_config(spec.target, int(ct["vmid"])))
            chosen, problems = select_cards(
                target_facts,
                spec.gpu_model,
                spec.gpu_count,
                running_vms=tclient.running_vms(spec.target),
                minors_in_use=minors,
                min_vram_gib=spec.min_vram_gib,
                allow_stopped_vm_cards=spec.allow_stopped_vm_cards,
            )
            result.gpus = chosen
            result.checks.append(
                Check(
                    "gpus",
                    not problems,
                    "; ".join(problems)
                    or f"{len(chosen)} free '{spec.gpu_model}' on {spec.target}: "
                    + ", ".join(chosen),
                )
            )
        module = (target_facts or {}).get("nvidia_module") or {}
        result.target_driver_loaded = bool(module.get("loaded"))
        result.target_driver = module.get("version")


def source_gone(spec: MigrationSpec, client: PveClient) -> str | None:
    """Why the source node is gone (removed from the cluster, or not online there), or
    None when it is online. Read from the cluster's node list (``GET /nodes``)."""
    nodes = {str(n["node"]): str(n.get("status", "unknown")) for n in client.nodes()}
    status = nodes.get(spec.source)
    if status is None:
        return (
            f"{spec.source} is not a node of the cluster any more "
            f"(nodes: {', '.join(sorted(nodes))})"
        )
    if status != "online":
        return f"{spec.source} is {status} in the cluster"
    return None


def latest_backup(
    spec: MigrationSpec, client: PveClient
) -> tuple[dict[str, Any] | None, list[str]]:
    """The newest vzdump archive of the CT on a storage the target sees (the storages
    of the target with ``backup`` content, or ``backup_storage`` alone), and the
    storages searched (``GET /nodes/{node}/storage/{storage}/content``)."""
    storages = [
        str(s["storage"])
        for s in client.call("GET", "/nodes/{node}/storage", {"node": spec.target})
        if "backup" in str(s.get("content", "")).split(",") and s.get("active", 1)
    ]
    if spec.backup_storage:
        storages = [s for s in storages if s == spec.backup_storage]
    found: list[dict[str, Any]] = []
    for sid in storages:
        found += [
            dict(v)
            for v in client.call(
                "GET",
                "/nodes/{node}/storage/{storage}/content",
                {"node": spec.target, "storage": sid},
                content="backup",
                vmid=spec.vmid,
            )
            # a container's archive (vzdump-lxc-* on a dir/NFS storage, ct/<vmid>/ on PBS)
            if str(v.get("subtype", "lxc")) == "lxc"
            and not re.search(r"vzdump-qemu-|backup/vm/", str(v.get("volid", "")))
        ]
    found.sort(key=lambda v: (int(v.get("ctime", 0)), str(v["volid"])))
    return (found[-1] if found else None), storages


def _restore_storage(spec: MigrationSpec, client: PveClient) -> Check:
    """The storage the restored rootfs goes to: ``target_storage``, else ``local``,
    else the first of the target's storages that holds container volumes."""
    storages = {
        str(s["storage"]): s
        for s in client.call("GET", "/nodes/{node}/storage", {"node": spec.target})
    }
    rootdir = [
        sid
        for sid, st in storages.items()
        if "rootdir" in str(st.get("content", "")).split(",") and st.get("active", 1)
    ]
    wanted = spec.target_storage or ("local" if "local" in rootdir else "")
    sid = wanted or (rootdir[0] if rootdir else "")
    if not sid or sid not in rootdir:
        return Check(
            "storage",
            False,
            f"no storage on {spec.target} holds container volumes for the restore"
            + (f" ('{wanted}' does not: set migrate_target_storage)" if wanted else "")
            + f" (with rootdir: {', '.join(rootdir) or 'none'})",
        )
    avail = int(storages[sid].get("avail", 0))
    return Check("storage", True, f"'{sid}' on {spec.target}: {avail / 2**30:.1f} GiB free")


def _preflight_source_gone(
    spec: MigrationSpec,
    client: PveClient,
    target_facts: Mapping[str, Any] | None,
    why: str,
) -> PreflightResult:
    """The source node is gone: restore the CT from its latest backup on the target,
    else re-create it from the inventory; the mode check says which and why."""
    where = client.where_is(spec.vmid)
    on_target = where is not None and where[0] == spec.target
    status = where[1] if where else "missing"
    result = PreflightResult(spec.vmid, spec.source, spec.target, spec.mode, status, on_target)
    if where is not None and not on_target:
        if where[0] == spec.source:
            message = (
                f"{why}, but CT {spec.vmid} is still registered on it: PVE refuses to "
                f"restore or create VMID {spec.vmid} while that config exists. Remove the "
                f"dead node from the cluster (pvecm delnode {spec.source}) or move "
                f"/etc/pve/nodes/{spec.source}/lxc/{spec.vmid}.conf to "
                f"/etc/pve/nodes/{spec.target}/lxc/ on a node with quorum, then run again"
            )
        else:
            message = f"CT {spec.vmid} is on {where[0]}, not on the source {spec.source}"
        result.checks.append(Check("container", False, message))
        return result
    result.checks.append(_check_target(spec, client))
    if not result.checks[-1].ok:
        return result
    if on_target:
        result.checks.append(
            Check(
                "container",
                True,
                f"CT {spec.vmid} is {status} on {spec.target} (already brought back: "
                "the move is skipped)",
            )
        )
        result.rootfs = str(client.ct_config(spec.target, spec.vmid).get("rootfs", ""))
        _check_gpus(spec, client, target_facts, result)
        return result
    backup, storages = (None, []) if spec.recovery == "inventory" else latest_backup(spec, client)
    seen = ", ".join(storages) or "none"
    if backup is not None:
        result.recovery = "restore"
        result.archive = str(backup["volid"])
        result.archive_ctime = int(backup.get("ctime", 0))
        taken = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.archive_ctime))
        result.checks.append(
            Check(
                "mode",
                True,
                f"restore: {why}; the latest backup of CT {spec.vmid} that {spec.target} "
                f"sees is {result.archive} ({taken})",
            )
        )
        result.lost = [
            f"what CT {spec.vmid} wrote after its backup of {taken} ({result.archive}): "
            f"it was on {spec.source}'s disks"
        ]
        storage = _restore_storage(spec, client)
        result.checks.append(storage)
        result.restore_storage = storage.message.split("'")[1] if storage.ok else ""
    elif spec.recovery == "backup":
        result.checks.append(
            Check(
                "mode",
                False,
                f"{why}; migrate_source_gone_recovery is 'backup' but no backup of CT "
                f"{spec.vmid} is on a storage {spec.target} sees (searched: {seen})",
            )
        )
        return result
    elif spec.inventory_host:
        result.recovery = "recreate"
        reason = (
            "migrate_source_gone_recovery is 'inventory'"
            if spec.recovery == "inventory"
            else f"no backup of CT {spec.vmid} on a storage {spec.target} sees (searched: {seen})"
        )
        result.checks.append(
            Check(
                "mode",
                True,
                f"re-create: {why}; {reason}: CT {spec.vmid} is re-created on {spec.target} "
                f"from the inventory ({spec.inventory_host}, role pve_container), its mounts "
                "re-attached, its software installed again",
            )
        )
        result.lost = [
            f"CT {spec.vmid}'s root disk on {spec.source} (its local storage): the "
            "container is re-created empty from its inventory description",
            f"its volumes and bind-mounted directories local to {spec.source}"
            " (mounts marked shared are re-attached)",
        ]
    else:
        result.checks.append(
            Check(
                "mode",
                False,
                f"{why}; no backup of CT {spec.vmid} on a storage {spec.target} sees "
                f"(searched: {seen}) and no migrate_ct_host to re-create it from: make a "
                "backup reachable from the target or name the container's inventory host",
            )
        )
        return result
    result.checks.append(
        Check("container", True, f"CT {spec.vmid} is in no node of the cluster (its node is gone)")
    )
    _check_gpus(spec, client, target_facts, result)
    return result


def gather_local_facts(root: str, running_vmids: Sequence[int] | None = None) -> dict[str, Any]:
    """GPU facts of a node whose file system is readable here (a lab node root), through
    the same module_utils the ``gpu_facts`` module runs."""
    from ansible_collections.specops.infra.plugins.module_utils.gpu import (  # noqa: PLC0415
        HostRoots,
        gather_facts,
    )

    running = None if running_vmids is None else set(running_vmids)
    check = None if running is None else (lambda vmid: vmid in running)
    facts: dict[str, Any] = gather_facts(HostRoots.under(root), vm_running=check).to_dict()
    return facts
