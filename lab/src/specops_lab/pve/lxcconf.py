"""Translate a PVE container config into a real LXC config, the way pve-container does.

Follows pve-container ``src/PVE/LXC.pm`` ``update_lxc_config`` (commit in
:data:`specops_lab.pve_schema.UPSTREAM`), line for line where the lab can, in its order:
``lxc.arch`` (``missing 'arch' - internal error`` without one), the
``<ostype>.common.conf`` include falling back to ``common.conf`` when that file is
missing (``missing 'ostype' - internal error`` without an ostype), the ``/dev/shm``
tmpfs for an ``entrypoint`` other than ``/sbin/init``, per ``devN``
``lxc.cgroup2.devices.allow = <c|b> MAJ:MIN rw`` (``r`` plus
``lxc.cgroup2.devices.deny = <c|b> MAJ:MIN w`` with ``deny-write``) from a ``stat()`` of
the device (``LXC/Tools.pm get_device_mode_and_rdev``: "Device <path> does not exist",
"<path> is not a device"), ``lxc.monitor.unshare``, ``lxc.console.path = none`` plus the
``c 5:1`` deny for ``console: 0``, ``lxc.tty.max``, ``TERM=linux``, ``lxc.uts.name``,
the rootfs, ``lxc.init.cmd``, ``lxc.environment.runtime`` per ``env`` entry, then the
main section's raw ``lxc.*`` lines in file order. Snapshot and pending sections are not
read (``vm_start`` applies pending changes before this runs).

Lab deviations (each in README.md's table):
- ``netN``: as update_lxc_config's netN loop (``specops_lab.pve.lxcnet.lxc_net_lines``),
  except that the bridge is named as ``lxc.net.N.link`` instead of PVE's lxcnetaddbr
  up-script; a conf WITHOUT any ``netN`` gets ``lxc.net.0.type = none`` (the container
  shares the controller's network namespace) where PVE gives it only loopback: kept for
  the stand-in's own tests, which start containers without networks;
- devices and mount points: PVE's prestart/autodev hooks bind-mount the passthrough node
  and each ``mpN``; the stand-in writes ``lxc.mount.entry`` lines for the same binds;
  the rootfs is the subvol directory itself (PVE mounts it at ``$dir/rootfs``);
- the node's host paths live under its root (``/dev/nvidia0`` is ``<root>/dev/nvidia0``);
- device-cgroup keys: the emulated host enforces its own version's key (``cgroup2`` on a
  v2 node, ``cgroup`` on a v1 node) and drops the other version's lines, as LXC does on
  such a host; the kept lines are then written with the key THIS machine enforces
  (cgroup v1 here), so one conf behaves here as it would on the emulated host;
- ``lxc.prlimit.memlock`` above this machine's hard limit is lowered to it
  (:func:`memlock_here`: the lab's processes cannot raise it, PVE's root can);
- not emulated: the ``lxc.cgroup.*`` dir/relative lines of LXC >= 4, memory/swap/CPU
  limits and the cpuset for ``cores``, AppArmor, PVE's seccomp profile, ``features``,
  unprivileged containers and ``lxc.idmap`` (refused at start).
"""

from __future__ import annotations

import os
import re
import resource
import stat
from dataclasses import dataclass, field
from pathlib import Path

from specops.errors import SpecopsError
from specops_lab.pve.conf import ConfError, GuestConf, parse_device, parse_volume
from specops_lab.pve.layout import Node
from specops_lab.pve.lxcnet import NetError, lxc_net_lines

__all__ = [
    "LXC_CONFIG_DIR",
    "LxcPlan",
    "PassthroughDevice",
    "StartError",
    "build_lxc_config",
    "device_mode_and_rdev",
    "machine_cgroup_version",
]

_V1 = "lxc.cgroup.devices."
_V2 = "lxc.cgroup2.devices."
LXC_CONFIG_DIR = Path("/usr/share/lxc/config")


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


def device_mode_and_rdev(node: Node, path: str) -> os.stat_result:
    """pve-container LXC/Tools.pm ``get_device_mode_and_rdev`` on the node's device."""
    try:
        st = os.stat(node.host_path(path))
    except FileNotFoundError:
        raise StartError(f"Device {path} does not exist") from None
    except OSError:
        raise StartError(f"Error accessing device {path}") from None
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        raise StartError(f"{path} is not a device")
    return st


def _resolve_device(node: Node, key: str, value: str) -> PassthroughDevice:
    try:
        props = parse_device(value)
    except ConfError as exc:
        if "Path has to be defined" in str(exc):
            raise StartError(f"Path is not defined for passthrough device {key}") from None
        raise StartError(f"unable to parse {key}: {str(exc).strip()}") from None
    path = str(props["path"])
    st = device_mode_and_rdev(node, path)
    return PassthroughDevice(
        key=key,
        path=path,
        kind="b" if stat.S_ISBLK(st.st_mode) else "c",
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=int(str(props.get("mode", "0660")), 8),
        uid=int(props.get("uid", 0)),
        gid=int(props.get("gid", 0)),
        deny_write=bool(int(props.get("deny-write", 0) or 0)),
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


def _mount_point_line(node: Node, key: str, value: str) -> str:
    """An ``mpN`` as the bind PVE's prestart hook makes (``__mountpoint_mount``: a bind
    of the volume's directory or host path, read-only with ``ro``, plus ``mountoptions``)."""
    try:
        mount = parse_volume(key, value)
    except ConfError as exc:
        raise StartError(f"unable to parse {key}: {str(exc).strip()}") from None
    if mount["type"] == "device":
        raise StartError(
            f"{key}: block-device mount points are not emulated by the lab PVE stand-in"
        )
    source = node.volume_path(str(mount["volume"]))
    if not source.exists():
        raise StartError(f"{key}: mount point source {mount['volume']} does not exist")
    opts = ["bind", "create=dir"]
    if mount.get("ro"):
        opts.append("ro")
    opts += [o for o in str(mount.get("mountoptions") or "").split(";") if o]
    return f"lxc.mount.entry = {source} {str(mount['mp']).lstrip('/')} none {','.join(opts)} 0 0"


_MEMLOCK = "lxc.prlimit.memlock"


def memlock_here(value: str) -> tuple[str, str]:
    """``lxc.prlimit.memlock`` as this machine can apply it, and a note when lowered.

    Lab deviation: on PVE, ``lxc-start`` runs as root with CAP_SYS_RESOURCE and sets any
    limit (``unlimited`` for NCCL, role ``lxc_gpu_passthrough``); here the lab's
    processes lack that capability, so a limit above this machine's hard RLIMIT_MEMLOCK
    makes LXC abort the start ("Failed to setup resource limits"). Each part (``soft`` or
    ``soft:hard``) is lowered to the hard limit; the conf keeps what PVE would apply.
    """
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        return value, ""
    parts = [p.strip() for p in value.split(":")]
    lowered = [p if p.isdigit() and int(p) <= hard else str(hard) for p in parts]
    here = ":".join(lowered)
    if here == value:
        return value, ""
    return here, f"{_MEMLOCK} {value} lowered to {here} (this machine's hard limit; lab only)"


def build_lxc_config(  # noqa: PLR0912, PLR0915  (one pass, in PVE's order)
    conf: GuestConf,
    *,
    vmid: int,
    node: Node,
    rootfs: Path,
    passthrough_dir: Path,
    machine_cgroup: str | None = None,
    lxc_config_dir: Path = LXC_CONFIG_DIR,
) -> LxcPlan:
    """The LXC config for ``conf``; raises :class:`StartError` before anything is written."""
    machine = machine_cgroup or machine_cgroup_version()
    items = conf.main.options
    plan = LxcPlan(config="")
    lines: list[str] = []

    if items.get("template") == "1":
        raise StartError("you can't start a CT if it's a template")
    custom_idmap = any(k == "lxc.idmap" for k, _ in conf.main.lxc)
    if items.get("unprivileged") == "1" or custom_idmap:
        raise StartError(
            f"CT {vmid}: unprivileged containers (unprivileged: 1 / lxc.idmap) are not "
            "emulated by the lab PVE stand-in; use a privileged container"
        )
    if not items.get("arch"):
        raise StartError("missing 'arch' - internal error")
    lines.append(f"lxc.arch = {items['arch']}")
    ostype = items.get("ostype")
    if not ostype:
        raise StartError("missing 'ostype' - internal error")
    inc = lxc_config_dir / f"{ostype}.common.conf"
    if not inc.is_file():
        inc = lxc_config_dir / "common.conf"
    lines.append(f"lxc.include = {inc}")
    if items.get("entrypoint") is not None and items["entrypoint"] != "/sbin/init":
        # "Mount /dev/shm tmpfs into the container, if no init system runs to set it up."
        lines.append("lxc.mount.entry = shm dev/shm tmpfs rw,nosuid,nodev,create=dir 0 0")

    def add(key: str, value: str) -> None:
        out = _device_key(key, node.cgroup, machine)
        if out is None:
            plan.warnings.append(
                f"{key} ignored: the emulated host '{node.name}' uses cgroup {node.cgroup}"
            )
            return
        lines.append(f"{out} = {value}")

    emulated_prefix = _V2 if node.cgroup == "v2" else _V1
    for index in conf.indexed("dev"):  # PVE: `keys %$conf` order; the lab: by N
        dev = _resolve_device(node, f"dev{index}", conf.indexed("dev")[index])
        plan.devices.append(dev)
        spec = f"{dev.kind} {dev.major}:{dev.minor}"
        add(f"{emulated_prefix}allow", f"{spec} {'r' if dev.deny_write else 'rw'}")
        if dev.deny_write:
            add(f"{emulated_prefix}deny", f"{spec} w")
        target = passthrough_dir / dev.path.lstrip("/")
        lines.append(f"lxc.mount.entry = {target} {dev.path.lstrip('/')} none bind,create=file 0 0")

    lines.append("lxc.monitor.unshare = 1")
    if items.get("console") == "0":  # has_dev_console
        lines.append("lxc.console.path = none")
        if node.cgroup == "v2":
            add(f"{_V2}deny", "c 5:1 rwm")
    lines.append(f"lxc.tty.max = {items.get('tty', '2')}")  # get_tty_count
    lines.append("lxc.environment = TERM=linux")
    lines.append(f"lxc.uts.name = {items.get('hostname') or f'CT{vmid}'}")
    if "rootfs" not in items:
        raise StartError("missing 'rootfs' configuration")
    lines.append(f"lxc.rootfs.path = dir:{rootfs}")
    if items.get("entrypoint") is not None:
        lines.append(f"lxc.init.cmd = {items['entrypoint']}")
    # update_lxc_config's netN loop (pve-container src/PVE/LXC.pm) and lxcnetaddbr.
    try:
        net_lines = lxc_net_lines(items, vmid)
    except NetError as exc:
        raise StartError(str(exc)) from None
    lines.extend(net_lines or ["lxc.net.0.type = none"])

    for index, value in conf.indexed("mp").items():  # prestart hook: foreach_volume order
        lines.append(_mount_point_line(node, f"mp{index}", value))

    for variable in re.split(r"\0+", items.get("env") or ""):
        if variable:
            lines.append(f"lxc.environment.runtime = {variable}")

    for key, given in conf.main.lxc:
        value = given
        if key == "lxc.mount.entry":
            value = _mount_entry_value(node, given)
        elif key == _MEMLOCK:
            value, note = memlock_here(given)
            if note:
                plan.warnings.append(note)
        add(key, value)

    plan.config = "".join(f"{ln}\n" for ln in lines)
    return plan
