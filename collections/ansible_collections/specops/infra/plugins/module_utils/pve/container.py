"""A serving container's description: parse, check against the cluster, plan the changes.

Stdlib only, no I/O: the ``pve_container`` module feeds it what the Proxmox VE API
answered, and pytest calls the same functions directly.

* :func:`parse_spec` turns the inventory description (the role's ``pve_container_*``
  variables, without the prefix) into a :class:`ContainerSpec`; bad types or ranges raise
  :class:`SpecError` naming the variable (``pve_container_memory: ...``).
* :func:`check_cluster` checks the spec against the cluster before any write: vmid held by
  a VM (or by a container on another node), unknown node, storage or template, memory or
  cores beyond the node.
* :func:`plan_changes` compares the spec with a live ``GET .../lxc/{vmid}/config`` and
  sorts each difference: ``online`` (PUT while running: cores, memory, swap, tags,
  onboot), ``restart`` (PUT, applied at the next start: hostname, features, mount points,
  network), ``rebuild`` (backup and restore: rootfs storage, privilege) and ``refused``
  (rootfs shrink: never).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "FEATURE_KEYS",
    "MOUNT_KEYS",
    "NET_KEYS",
    "Change",
    "ClusterView",
    "ContainerSpec",
    "Mount",
    "SpecError",
    "check_cluster",
    "create_params",
    "live_settings",
    "parse_spec",
    "plan_changes",
    "wanted_config",
    "wanted_settings",
]

PREFIX = "pve_container_"
FEATURE_KEYS = ("nesting", "fuse", "keyctl", "mknod", "force_rw_sys")
MOUNT_KEYS = ("host_path", "mountpoint", "shared", "backup", "ro")
NET_KEYS = ("name", "bridge", "ip", "gw", "ip6", "gw6", "hwaddr", "mtu", "tag", "firewall", "type")
_HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
)
_NODE_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")
_STORAGE_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]$")
_TAG_RE = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9_\-+.]*$")
_TEMPLATE_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]):vztmpl/([^/\s,]+)$")
ONLINE = "online"
RESTART = "restart"
REBUILD = "rebuild"
REFUSED = "refused"


class SpecError(ValidationError, ValueError):
    """Bad input: ``field`` is the inventory variable, ``problem`` says what is valid."""


@dataclass(frozen=True)
class Mount:
    """A bind mount point (``mpN``): a node directory seen at ``mountpoint`` in the CT."""

    host_path: str
    mountpoint: str
    shared: bool = True
    backup: bool = False
    ro: bool = False

    def to_pve(self) -> str:
        parts = [self.host_path, f"mp={self.mountpoint}"]
        parts += [f"{k}=1" for k in ("shared", "backup", "ro") if getattr(self, k)]
        return ",".join(parts)


@dataclass(frozen=True)
class ContainerSpec:
    vmid: int
    hostname: str
    node: str
    ostemplate: str
    cores: int
    memory: int  # MiB
    swap: int  # MiB
    rootfs_storage: str
    rootfs_size: int  # GiB
    unprivileged: bool
    features: dict[str, bool] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    net: tuple[dict[str, str], ...] = ()
    onboot: bool = True
    tags: tuple[str, ...] = ()

    @property
    def template_storage(self) -> str:
        return self.ostemplate.split(":", 1)[0]


def _name(key: str) -> str:
    return PREFIX + key


def _int(data: Mapping[str, Any], key: str, lo: int, hi: int, unit: str = "") -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(_name(key), f"want an integer {lo}..{hi}{unit} (got {value!r})")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise SpecError(_name(key), f"want an integer {lo}..{hi}{unit} (got {value!r})") from None
    if not lo <= number <= hi:
        raise SpecError(_name(key), f"must be {lo}..{hi}{unit} (got {number})")
    return number


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise SpecError(name, f"want true or false (got {value!r})")


def _str(data: Mapping[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not pattern.match(value):
        raise SpecError(_name(key), f"want {what} (got {value!r})")
    return value


def _mounts(value: Any) -> tuple[Mount, ...]:
    name = _name("mounts")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError(name, f"want a list of {{host_path, mountpoint, shared}} (got {value!r})")
    out: list[Mount] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, Mapping):
            raise SpecError(where, f"want a mapping with host_path and mountpoint (got {item!r})")
        unknown = sorted(set(item) - set(MOUNT_KEYS))
        if unknown:
            raise SpecError(
                f"{where}.{unknown[0]}", f"unknown key (valid: {', '.join(MOUNT_KEYS)})"
            )
        for key in ("host_path", "mountpoint"):
            path = item.get(key)
            if (
                not isinstance(path, str)
                or not path.startswith("/")
                or "," in path
                or path.rstrip("/") == ""
            ):
                raise SpecError(
                    f"{where}.{key}", f"want an absolute path without commas, not / (got {path!r})"
                )
        if item["mountpoint"] in seen:
            raise SpecError(f"{where}.mountpoint", f"{item['mountpoint']} is mounted twice")
        seen.add(item["mountpoint"])
        flags = {
            k: _bool(item.get(k, k == "shared"), f"{where}.{k}") for k in ("shared", "backup", "ro")
        }
        out.append(Mount(item["host_path"], item["mountpoint"], **flags))
    return tuple(out)


def _net(value: Any) -> tuple[dict[str, str], ...]:
    name = _name("net")
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > 32:
        raise SpecError(
            name,
            "want a list (at most 32) of interfaces such as "
            f"{{name: eth0, bridge: vmbr0, ip: dhcp}} (got {value!r})",
        )
    out: list[dict[str, str]] = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SpecError(where, f"want a mapping with at least 'name' (got {item!r})")
        unknown = sorted(set(item) - set(NET_KEYS))
        if unknown:
            raise SpecError(f"{where}.{unknown[0]}", f"unknown key (valid: {', '.join(NET_KEYS)})")
        entry: dict[str, str] = {}
        for key, raw in item.items():
            text = ("1" if raw else "0") if isinstance(raw, bool) else str(raw)
            if not text or any(ch in text for ch in ", \t\n="):
                raise SpecError(
                    f"{where}.{key}", f"want a value without commas, '=' or spaces (got {raw!r})"
                )
            entry[str(key)] = text
        out.append(entry)
    return tuple(out)


def parse_spec(data: Mapping[str, Any]) -> ContainerSpec:
    """The description from the role's variables (keys without the ``pve_container_`` prefix)."""
    vmid = _int(data, "vmid", 100, 999999999)
    hostname = _str(data, "hostname", _HOSTNAME_RE, "a DNS host name such as ct801-qwen")
    node = _str(data, "node", _NODE_RE, "the PVE node's name (a host in the pve_nodes group)")
    template = data.get("ostemplate")
    if not isinstance(template, str) or not _TEMPLATE_RE.match(template):
        raise SpecError(
            _name("ostemplate"),
            "want STORAGE:vztmpl/FILE, e.g. "
            f"local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst (got {template!r})",
        )
    features_raw = data.get("features") or {}
    if not isinstance(features_raw, Mapping):
        raise SpecError(
            _name("features"), f"want a mapping such as {{nesting: true}} (got {features_raw!r})"
        )
    features: dict[str, bool] = {}
    for key, value in features_raw.items():
        if key not in FEATURE_KEYS:
            raise SpecError(
                f"{_name('features')}.{key}", f"unknown feature (valid: {', '.join(FEATURE_KEYS)})"
            )
        features[str(key)] = _bool(value, f"{_name('features')}.{key}")
    tags_raw = data.get("tags") or []
    if not isinstance(tags_raw, list):
        raise SpecError(_name("tags"), f"want a list of tags (got {tags_raw!r})")
    for tag in tags_raw:
        if not isinstance(tag, str) or not _TAG_RE.match(tag):
            raise SpecError(
                _name("tags"),
                f"tag {tag!r} is not valid (letters, digits, _ - + .; not starting with - + .)",
            )
    return ContainerSpec(
        vmid=vmid,
        hostname=hostname,
        node=node,
        ostemplate=template,
        cores=_int(data, "cores", 1, 8192),
        memory=_int(data, "memory", 16, 268435456, " MiB"),
        swap=_int(data, "swap", 0, 268435456, " MiB"),
        rootfs_storage=_str(
            data, "rootfs_storage", _STORAGE_RE, "a PVE storage id such as local-zfs"
        ),
        rootfs_size=_int(data, "rootfs_size", 1, 131072, " GiB"),
        unprivileged=_bool(data.get("unprivileged", True), _name("unprivileged")),
        features=features,
        mounts=_mounts(data.get("mounts")),
        net=_net(data.get("net")),
        onboot=_bool(data.get("onboot", True), _name("onboot")),
        # PVE keeps tags unique, sorted and lower-cased unless datacenter.cfg's tag-style
        # says case-sensitive (pve-guest-common src/PVE/GuestHelpers.pm get_unique_tags):
        # described the same way, a tag written "LLM" is no change on every run.
        tags=tuple(sorted({t.lower() for t in tags_raw})),
    )


# -- the cluster ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterView:
    """What the API answered: ``GET /nodes``, ``/cluster/resources?type=vm``, the node's
    ``/storage`` and ``/status``, and the template storage's ``/content?content=vztmpl``."""

    nodes: Sequence[str]
    guests: Sequence[Mapping[str, Any]]
    storages: Sequence[Mapping[str, Any]]
    node_memory: int  # bytes
    node_cpus: int
    templates: Sequence[str]  # volids


def _find_guest(view: ClusterView, vmid: int) -> Mapping[str, Any] | None:
    for guest in view.guests:
        if int(guest.get("vmid", -1)) == vmid:
            return guest
    return None


def check_cluster(spec: ContainerSpec, view: ClusterView) -> bool:
    """Raise :class:`SpecError` for what PVE would refuse or what would harm the host.

    Returns whether the container exists already (on the described node).
    """
    if spec.node not in view.nodes:
        raise SpecError(
            _name("node"),
            f"no PVE node '{spec.node}' in the cluster (have: {', '.join(sorted(view.nodes))})",
        )
    guest = _find_guest(view, spec.vmid)
    if guest is not None and guest.get("type") != "lxc":
        raise SpecError(
            _name("vmid"),
            f"{spec.vmid} is taken by VM '{guest.get('name', '?')}' ({guest.get('type')}) on node "
            f"'{guest.get('node')}'; choose a vmid no guest uses",
        )
    if guest is not None and guest.get("node") != spec.node:
        raise SpecError(
            _name("node"),
            f"container {spec.vmid} lives on node '{guest.get('node')}', not '{spec.node}'; "
            "migrate it (playbooks/migrate.yml) or describe the node it is on",
        )
    storages = {str(s.get("storage")): s for s in view.storages}
    root = storages.get(spec.rootfs_storage)
    if root is None:
        raise SpecError(
            _name("rootfs_storage"),
            f"storage '{spec.rootfs_storage}' does not exist on node '{spec.node}' "
            f"(have: {', '.join(sorted(storages))})",
        )
    if "rootdir" not in str(root.get("content", "")).split(","):
        with_rootdir = sorted(
            k for k, v in storages.items() if "rootdir" in str(v.get("content", "")).split(",")
        )
        raise SpecError(
            _name("rootfs_storage"),
            f"storage '{spec.rootfs_storage}' does not hold container volumes (content rootdir); "
            f"use one of: {', '.join(with_rootdir) or 'none'}",
        )
    if guest is None:
        tstore = storages.get(spec.template_storage)
        if tstore is None:
            raise SpecError(
                _name("ostemplate"),
                f"storage '{spec.template_storage}' does not exist on node '{spec.node}'",
            )
        if spec.ostemplate not in view.templates:
            have = ", ".join(sorted(view.templates)) or "none"
            raise SpecError(
                _name("ostemplate"),
                f"template '{spec.ostemplate}' is not on node '{spec.node}' (have: {have})",
            )
    node_mib = view.node_memory // (1024 * 1024)
    if spec.memory > node_mib:
        raise SpecError(
            _name("memory"),
            f"{spec.memory} MiB is more than node '{spec.node}' has ({node_mib} MiB)",
        )
    if view.node_cpus and spec.cores > view.node_cpus:
        raise SpecError(
            _name("cores"),
            f"{spec.cores} is more than node '{spec.node}' has ({view.node_cpus} CPUs)",
        )
    return guest is not None


# -- settings and changes ----------------------------------------------------------------


def _features_str(features: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={int(v)}" for k, v in sorted(features.items()))


def _net_str(net: Mapping[str, str]) -> str:
    order = [k for k in NET_KEYS if k in net]
    return ",".join(f"{k}={net[k]}" for k in order)


def wanted_config(spec: ContainerSpec) -> dict[str, Any]:
    """The API config keys the description sets (values as PUT takes them)."""
    out: dict[str, Any] = {
        "hostname": spec.hostname,
        "cores": spec.cores,
        "memory": spec.memory,
        "swap": spec.swap,
        "onboot": int(spec.onboot),
        "tags": ";".join(spec.tags),
        "features": _features_str(spec.features),
        "unprivileged": int(spec.unprivileged),
    }
    for i, mount in enumerate(spec.mounts):
        out[f"mp{i}"] = mount.to_pve()
    for i, net in enumerate(spec.net):
        out[f"net{i}"] = _net_str(net)
    return out


def create_params(spec: ContainerSpec) -> dict[str, Any]:
    """Arguments for community.proxmox.proxmox (create); tags follow through PUT (see README)."""
    return {
        "features": [f"{k}={int(v)}" for k, v in sorted(spec.features.items())],
        "netif": {f"net{i}": _net_str(n) for i, n in enumerate(spec.net)},
        "mount_volumes": [
            {
                "id": f"mp{i}",
                "host_path": m.host_path,
                "mountpoint": m.mountpoint,
                "options": {k: 1 for k in ("shared", "backup", "ro") if getattr(m, k)},
            }
            for i, m in enumerate(spec.mounts)
        ],
        "disk_volume": {"storage": spec.rootfs_storage, "size": spec.rootfs_size},
    }


def _props(value: str, default_key: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep and default_key:
            out[default_key] = key
        else:
            out[key] = val
    return out


def _size_gib(size: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", size.strip())
    if not m:
        return 0.0
    factor = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "": 1 / 1024**3}[m.group(2)]
    return float(m.group(1)) * factor


def _norm_mount(value: str) -> str:
    props = _props(value, "volume")
    flags = [
        f"{k}=1" for k in ("shared", "backup", "ro") if props.get(k) in ("1", "true", "yes", "on")
    ]
    return ",".join([props.get("volume", ""), f"mp={props.get('mp', '')}", *flags])


def live_settings(config: Mapping[str, Any], spec: ContainerSpec) -> dict[str, Any]:
    """The live config in the shape of :func:`wanted_settings` (for the diff and the plan)."""
    rootfs = _props(str(config.get("rootfs", "")), "volume")
    volume = rootfs.get("volume", "")
    settings: dict[str, Any] = {
        "hostname": str(config.get("hostname", "")),
        "cores": int(config["cores"]) if "cores" in config else None,
        "memory": int(config.get("memory", 512)),
        "swap": int(config.get("swap", 512)),
        "onboot": bool(int(config.get("onboot", 0))),
        "tags": sorted({t.lower() for t in re.split(r"[;, ]+", str(config.get("tags", ""))) if t}),
        "features": {
            k: v in ("1", "true", "yes", "on")
            for k, v in _props(str(config.get("features", "")), None).items()
        },
        "unprivileged": bool(int(config.get("unprivileged", 0))),
        "rootfs_storage": volume.split(":", 1)[0] if ":" in volume else volume,
        "rootfs_size": _size_gib(rootfs.get("size", "0")),
        "mounts": {
            k: _norm_mount(str(v)) for k, v in sorted(config.items()) if re.fullmatch(r"mp\d+", k)
        },
        "net": {
            k: _props(str(v), None) for k, v in sorted(config.items()) if re.fullmatch(r"net\d+", k)
        },
    }
    return settings


def wanted_settings(spec: ContainerSpec) -> dict[str, Any]:
    return {
        "hostname": spec.hostname,
        "cores": spec.cores,
        "memory": spec.memory,
        "swap": spec.swap,
        "onboot": spec.onboot,
        "tags": list(spec.tags),
        "features": dict(sorted(spec.features.items())),
        "unprivileged": spec.unprivileged,
        "rootfs_storage": spec.rootfs_storage,
        "rootfs_size": float(spec.rootfs_size),
        "mounts": {f"mp{i}": m.to_pve() for i, m in enumerate(spec.mounts)},
        "net": {f"net{i}": dict(n) for i, n in enumerate(spec.net)},
    }


@dataclass(frozen=True)
class Change:
    """One difference: the inventory ``field``, the API ``key``, both values, the action."""

    field: str
    key: str
    current: Any
    wanted: Any
    action: str  # online | restart | rebuild | refused
    value: Any = None  # what PUT sends (online/restart)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "key": self.key,
            "current": self.current,
            "wanted": self.wanted,
            "action": self.action,
            "message": self.message,
        }


def plan_changes(spec: ContainerSpec, config: Mapping[str, Any]) -> list[Change]:
    """Differences between the description and the live config, each with its action."""
    live = live_settings(config, spec)
    want = wanted_settings(spec)
    put = wanted_config(spec)
    changes: list[Change] = []
    for key in ("cores", "memory", "swap", "onboot", "tags"):
        if live[key] != want[key]:
            changes.append(Change(_name(key), key, live[key], want[key], ONLINE, put[key]))
    if live["hostname"] != want["hostname"]:
        changes.append(
            Change(
                _name("hostname"),
                "hostname",
                live["hostname"],
                want["hostname"],
                RESTART,
                put["hostname"],
            )
        )
    # features: only the described keys; a feature set live but not described is left alone
    live_features = {k: live["features"].get(k, False) for k in want["features"]}
    if live_features != want["features"]:
        merged = {**live["features"], **want["features"]}
        changes.append(
            Change(
                _name("features"),
                "features",
                live["features"],
                want["features"],
                RESTART,
                _features_str(merged),
            )
        )
    for key, value in want["mounts"].items():
        if live["mounts"].get(key) != value:
            changes.append(
                Change(_name("mounts"), key, live["mounts"].get(key), value, RESTART, value)
            )
    for key, value in want["net"].items():
        current = live["net"].get(key) or {}
        if {k: current.get(k) for k in value} != value:
            merged_net = {**current, **value}
            changes.append(
                Change(_name("net"), key, current or None, value, RESTART, _net_str(merged_net))
            )
    if live["unprivileged"] != want["unprivileged"]:
        changes.append(
            Change(
                _name("unprivileged"),
                "unprivileged",
                live["unprivileged"],
                want["unprivileged"],
                REBUILD,
                message=(
                    "a privilege change remaps every file owner: "
                    "backup and restore with the new setting"
                ),
            )
        )
    if live["rootfs_storage"] != want["rootfs_storage"]:
        changes.append(
            Change(
                _name("rootfs_storage"),
                "rootfs",
                live["rootfs_storage"],
                want["rootfs_storage"],
                REBUILD,
                message="moving the root volume to another storage: backup and restore onto it",
            )
        )
    if want["rootfs_size"] < live["rootfs_size"]:
        changes.append(
            Change(
                _name("rootfs_size"),
                "rootfs",
                live["rootfs_size"],
                want["rootfs_size"],
                REFUSED,
                message=(
                    f"refusing to shrink the root filesystem of CT {spec.vmid} from "
                    f"{live['rootfs_size']:g} GiB to {spec.rootfs_size} GiB: Proxmox VE cannot "
                    "shrink a container volume (data would be lost). Keep "
                    "pve_container_rootfs_size >= "
                    f"{live['rootfs_size']:g}, or rebuild the container yourself"
                ),
            )
        )
    elif want["rootfs_size"] > live["rootfs_size"]:
        changes.append(
            Change(
                _name("rootfs_size"),
                "rootfs",
                live["rootfs_size"],
                want["rootfs_size"],
                ONLINE,
                f"{spec.rootfs_size}G",
                message="grown online with PUT .../resize",
            )
        )
    return changes
