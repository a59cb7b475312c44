"""Translate a PVE container config into a real LXC config, the way pve-container does.

Follows ``PVE::LXC::update_lxc_config`` (pve-container, 2025): ``lxc.arch``, the
``<ostype>.common.conf`` include, one ``lxc.cgroup2.devices.allow = c MAJ:MIN rw`` per
``devN:`` entry with the major:minor read by ``stat()`` of the device at start
(``Device <path> does not exist`` when it is missing), ``lxc.monitor.unshare``,
``lxc.tty.max``, ``lxc.environment = TERM=linux``, ``lxc.uts.name``, the rootfs, then the
raw ``lxc.*`` lines of the main section in file order. Snapshot and pending sections are
ignored.

Lab deviations (see README.md):
- no emulated network: ``lxc.net.0.type = none`` instead of ``netN`` veth pairs, so a lab
  container shares the controller's network namespace (its services answer on
  127.0.0.1 and apt reaches the controller's mirrors; ``netN`` lines are ignored);
- the node's host paths live under its root (``/dev/nvidia0`` is ``<root>/dev/nvidia0``):
  ``devN`` paths, bind-mount sources and ``lxc.mount.entry`` sources are mapped there;
- device-cgroup keys: the emulated host enforces its own version's key (``cgroup2`` on a
  v2 node, ``cgroup`` on a v1 node) and drops the other version's lines, as LXC does on
  such a host; the kept lines are then written with the key THIS machine enforces
  (cgroup v1 here), so one conf behaves here as it would on the emulated host;
- memory/cpu limits, AppArmor, seccomp profiles of PVE, hooks and unprivileged
  containers are not emulated.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from specops.errors import SpecopsError
from specops.lab.pve.conf import PveConf, PveConfError, parse_property_string
from specops.lab.pve.layout import Node

__all__ = [
    "LxcPlan",
    "PassthroughDevice",
    "StartError",
    "build_lxc_config",
    "machine_cgroup_version",
]

_V1 = "lxc.cgroup.devices."
_V2 = "lxc.cgroup2.devices."


class StartError(SpecopsError):
    """A container cannot start; the message is PVE's wording where PVE has one."""


@dataclass(frozen=True)
class PassthroughDevice:
    """A ``devN:`` entry resolved against the node's device node."""

    key: str
    path: str  # as in the conf (the node's path, e.g. /dev/nvidia0)
    kind: str  # "c" or "b"
    major: int
    minor: int
    mode: int
    uid: int
    gid: int
    deny_write: bool


@dataclass
class LxcPlan:
    """The LXC config text and the device nodes to create before ``lxc-start``."""

    config: str
    devices: list[PassthroughDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def machine_cgroup_version() -> str:
    """Which device-cgroup key LXC enforces on this machine (v1 when the v1 controller is
    mounted: the hybrid layout here; v2 on a unified host)."""
    return "v1" if Path("/sys/fs/cgroup/devices").is_dir() else "v2"


def _resolve_device(node: Node, key: str, value: str) -> PassthroughDevice:
    try:
        props = parse_property_string(value, default_key="path")
    except PveConfError as exc:
        raise StartError(f"unable to parse {key}: {exc}") from exc
    path = props.get("path")
    if not path:
        raise StartError(f"Path is not defined for passthrough device {key}")
    host = node.host_path(path)
    try:
        st = os.stat(host)
    except FileNotFoundError:
        raise StartError(f"Device {path} does not exist") from None
    except OSError:
        raise StartError(f"Error accessing device {path}") from None
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        raise StartError(f"{path} is not a device")
    return PassthroughDevice(
        key=key,
        path=path,
        kind="b" if stat.S_ISBLK(st.st_mode) else "c",
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=int(props.get("mode", "0660"), 8),
        uid=int(props.get("uid", "0")),
        gid=int(props.get("gid", "0")),
        deny_write=props.get("deny-write", "0") in ("1", "true", "yes", "on"),
    )


def _mount_entry_value(node: Node, value: str) -> str:
    """Map an absolute source of an ``lxc.mount.entry`` to the node's root."""
    parts = value.split(None, 1)
    if parts and parts[0].startswith("/"):
        return " ".join([str(node.host_path(parts[0])), *parts[1:]])
    return value


def _device_key(key: str, emulated: str, machine: str) -> str | None:
    """The key to write for a device-cgroup line, or None when the emulated host ignores it."""
    if key.startswith(_V2):
        version, rest = "v2", key[len(_V2) :]
    elif key.startswith(_V1):
        version, rest = "v1", key[len(_V1) :]
    else:
        return key
    if version != emulated:
        return None
    return (_V1 if machine == "v1" else _V2) + rest


def build_lxc_config(  # noqa: PLR0912, PLR0915  (one pass, in PVE's order)
    conf: PveConf,
    *,
    vmid: int,
    node: Node,
    rootfs: Path,
    passthrough_dir: Path,
    machine_cgroup: str | None = None,
) -> LxcPlan:
    """The LXC config for ``conf``; raises :class:`StartError` before anything is written."""
    machine = machine_cgroup or machine_cgroup_version()
    items = conf.items()
    plan = LxcPlan(config="")
    lines: list[str] = []

    if items.get("template") in ("1",):
        raise StartError("a template cannot be started")
    custom_idmap = any(k == "lxc.idmap" for k, _ in conf.lxc())
    if items.get("unprivileged") == "1" or custom_idmap:
        raise StartError(
            f"CT {vmid}: unprivileged containers (unprivileged: 1 / lxc.idmap) are not "
            "emulated by the lab PVE stand-in; use a privileged container"
        )
    if "rootfs" not in items:
        raise StartError("missing 'rootfs' configuration")

    arch = items.get("arch", "amd64")
    lines.append(f"lxc.arch = {arch}")
    ostype = items.get("ostype", "unmanaged")
    inc = Path(f"/usr/share/lxc/config/{ostype}.common.conf")
    if not inc.is_file():
        inc = Path("/usr/share/lxc/config/common.conf")
    lines.append(f"lxc.include = {inc}")

    def add(key: str, value: str) -> None:
        out = _device_key(key, node.cgroup, machine)
        if out is None:
            plan.warnings.append(
                f"{key} ignored: the emulated host '{node.name}' uses cgroup {node.cgroup}"
            )
            return
        lines.append(f"{out} = {value}")

    emulated_prefix = _V2 if node.cgroup == "v2" else _V1
    for index, spec in conf.indexed("dev").items():
        dev = _resolve_device(node, f"dev{index}", spec)
        plan.devices.append(dev)
        perms = "r" if dev.deny_write else "rw"
        add(f"{emulated_prefix}allow", f"{dev.kind} {dev.major}:{dev.minor} {perms}")
        target = passthrough_dir / dev.path.lstrip("/")
        lines.append(f"lxc.mount.entry = {target} {dev.path.lstrip('/')} none bind,create=file 0 0")

    lines.append("lxc.monitor.unshare = 1")
    if items.get("console", "1") == "0":
        lines.append("lxc.console.path = none")
    lines.append(f"lxc.tty.max = {items.get('tty', '2')}")
    lines.append("lxc.environment = TERM=linux")
    lines.append(f"lxc.uts.name = {items.get('hostname', f'CT{vmid}')}")
    lines.append(f"lxc.rootfs.path = dir:{rootfs}")
    if "entrypoint" in items:
        lines.append(f"lxc.init.cmd = {items['entrypoint']}")
    lines.append("lxc.net.0.type = none")

    for index, spec in sorted(conf.indexed("mp").items()):
        key = f"mp{index}"
        try:
            props = parse_property_string(spec, default_key="volume")
        except PveConfError as exc:
            raise StartError(f"unable to parse {key}: {exc}") from exc
        volume, mp = props.get("volume", ""), props.get("mp", "")
        if not volume or not mp.startswith("/"):
            raise StartError(f"{key}: need a volume and an absolute mp= path")
        source = node.volume_path(volume)
        if not source.exists():
            raise StartError(f"{key}: mount point source {volume} does not exist")
        opts = "bind,create=dir" + (",ro" if props.get("ro") == "1" else "")
        lines.append(f"lxc.mount.entry = {source} {mp.lstrip('/')} none {opts} 0 0")

    if "env" in items:
        for var in filter(None, items["env"].split("\0")):
            lines.append(f"lxc.environment.runtime = {var}")

    for key, value in conf.lxc():
        add(key, _mount_entry_value(node, value) if key == "lxc.mount.entry" else value)

    plan.config = "".join(f"{ln}\n" for ln in lines)
    return plan
