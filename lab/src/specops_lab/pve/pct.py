"""Container operations of the lab PVE stand-in: what ``pct`` and the API both call.

Every operation works on one lab node (:class:`~specops_lab.pve.layout.Node`), takes the
per-CT lock ``<root>/run/lock/lxc/pve-config-<vmid>.lock`` like PVE, and drives a real
LXC container named ``<node>-<vmid>`` in the node's lxcpath with ``lxc-start``,
``lxc-stop``, ``lxc-info`` and ``lxc-attach``. Confs are read and written with the
stand-in's own PVE grammar (:mod:`specops_lab.pve.conf`). Each function names the
upstream function it follows (commits: :data:`specops_lab.pve_schema.UPSTREAM`; the table
with every emulated behaviour and every deliberate difference is in README.md). Errors
use PVE's wording. ``log`` callbacks receive the lines a PVE task log would show.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.file_lock import flock_within
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostRoots, gather_facts
from ansible_collections.specops.infra.plugins.module_utils.vfio import vm_lock_file

from specops.errors import SpecopsError, ValidationError
from specops_lab.pve.conf import (
    LXC_FASTPLUG_OPTIONS,
    ConfError,
    GuestConf,
    Section,
    add_to_pending_delete,
    cleanup_pending,
    conf_bytes,
    current_config,
    lock_config,
    option_exists,
    parse_device,
    parse_lxc_network,
    parse_pct_config,
    parse_pending_delete,
    parse_vm_config,
    parse_volume,
    print_volume,
    read_conf,
    remove_from_pending_delete,
    split_nameservers,
    write_pct_config,
)
from specops_lab.pve.conf import (
    check_type as conf_check_type,
)
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.lxcconf import StartError, build_lxc_config, device_mode_and_rdev
from specops_lab.pve.setup import setup_guest
from specops_lab.pve_formats import split_list

__all__ = [
    "CtStatus",
    "PveError",
    "ct_config_dict",
    "ct_create",
    "ct_destroy",
    "ct_exec",
    "ct_lock",
    "ct_push",
    "ct_reboot",
    "ct_resize",
    "ct_shutdown",
    "ct_start",
    "ct_status",
    "ct_stop",
    "ct_update_config",
    "list_cts",
    "list_vms",
    "load_ct_conf",
    "vm_config_dict",
    "vm_running",
    "vm_set_running",
]

Log = Callable[[str], None]
_ATTACH_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PveError(SpecopsError):
    """An operation PVE would refuse; ``status`` is the HTTP code the API answers with
    (400 with per-parameter ``errors`` for PVE's ``raise_param_exc``, else 500)."""

    def __init__(
        self, message: str, status: int = 500, errors: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.errors = errors
        super().__init__(message)


def _param_error(errors: dict[str, str]) -> PveError:
    """pve-common Exception.pm ``raise_param_exc``."""
    return PveError("Parameter verification failed.", 400, errors)


def _nolog(_line: str) -> None:
    return None


def _run(
    argv: Sequence[str],
    *,
    timeout: float = 60,
    check: bool = True,
    input_bytes: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        list(argv), capture_output=True, timeout=timeout, check=False, input=input_bytes
    )
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        raise PveError(
            f"command '{' '.join(argv)}' failed: exit code {proc.returncode}"
            + (f": {err}" if err else "")
        )
    return proc


@contextlib.contextmanager
def ct_lock(node: Node, vmid: int, timeout: float = 10) -> Iterator[None]:
    """``PVE::AbstractConfig::lock_config`` (see :func:`specops_lab.pve.conf.lock_config`)."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lock_config(str(node.root), vmid, timeout))
        except ConfError as exc:  # only the lock's own timeout
            raise PveError(str(exc)) from None
        yield


def _conf_missing(node: Node, vmid: int, kind: str = "lxc") -> PveError:
    """``PVE::AbstractConfig::load_config``'s error."""
    return PveError(f"Configuration file 'nodes/{node.name}/{kind}/{vmid}.conf' does not exist")


def load_ct_conf(node: Node, vmid: int) -> tuple[GuestConf, str]:
    """``load_config``: the parsed conf (PVE's grammar) and its raw text."""
    path = node.ct_conf(vmid)
    if not path.exists():
        raise _conf_missing(node, vmid)
    text = read_conf(path)
    return parse_pct_config(vmid, text), text


def _write_conf(node: Node, vmid: int, conf: GuestConf, directory: Path | None = None) -> None:
    """``write_config`` (``write_pct_config`` through pmxcfs: atomic here)."""
    path = (directory or node.lxc_conf_dir) / f"{vmid}.conf"
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_bytes(conf_bytes(write_pct_config(conf)))
    tmp.replace(path)


def _check_lock(conf: GuestConf) -> None:
    """``PVE::AbstractConfig::check_lock``."""
    if conf.get("lock"):
        raise PveError(f"CT is locked ({conf.get('lock')})")


def _check_protection(conf: GuestConf, message: str) -> None:
    """``PVE::AbstractConfig::check_protection``."""
    if conf.get("protection") == "1":
        raise PveError(f"{message} - protection mode enabled")


def _lxc_args(node: Node, vmid: int) -> list[str]:
    return ["-n", node.lxc_name(vmid), "-P", str(node.lxcpath)]


@dataclass(frozen=True)
class CtStatus:
    status: str  # running | stopped
    pid: int | None


def ct_status(node: Node, vmid: int) -> CtStatus:
    """``PVE::LXC::check_running`` / ``vmstatus`` (from ``lxc-info``)."""
    if not node.ct_conf(vmid).exists():
        raise _conf_missing(node, vmid)
    lxc_dir = node.lxcpath / node.lxc_name(vmid)
    if not (lxc_dir / "config").exists():
        return CtStatus("stopped", None)
    proc = _run(["lxc-info", *_lxc_args(node, vmid), "-s", "-p"], check=False)
    fields: dict[str, str] = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    if proc.returncode == 0 and fields.get("State") == "RUNNING":
        pid = fields.get("PID", "")
        return CtStatus("running", int(pid) if pid.isdigit() else None)
    return CtStatus("stopped", None)


def _running(node: Node, vmid: int) -> bool:
    return ct_status(node, vmid).status == "running"


def _rootfs_path(node: Node, conf: GuestConf) -> Path:
    rootfs = conf.get("rootfs")
    if rootfs is None:
        raise StartError("missing 'rootfs' configuration")
    return node.volume_path(str(parse_volume("rootfs", rootfs)["volume"]))


# --------------------------------------------------------------------------- start / stop


def ct_start(node: Node, vmid: int, log: Log = _nolog, *, timeout: float = 30) -> None:
    """``pct start`` / ``POST .../status/start``: API2/LXC/Status.pm ``vm_start`` (lock,
    template and lock checks) then LXC.pm ``vm_start``."""
    with ct_lock(node, vmid):
        _start_locked(node, vmid, log, timeout=timeout)


def _start_locked(
    node: Node, vmid: int, log: Log, *, timeout: float, skiplock: bool = False
) -> None:
    conf, _ = load_ct_conf(node, vmid)
    if conf.get("template") == "1":
        raise PveError("you can't start a CT if it's a template")
    if not skiplock and conf.get("lock") != "mounted":
        _check_lock(conf)
    if _running(node, vmid):
        raise PveError(f"CT {vmid} already running")
    if conf.pending:  # LXC.pm vm_start: apply pending changes while starting
        errors: dict[str, str] = {}
        _apply_pending(node, conf, errors, log=log)
        _write_conf(node, vmid, conf)
        conf, _ = load_ct_conf(node, vmid)
    lxc_dir = node.lxcpath / node.lxc_name(vmid)
    rootfs = _rootfs_path(node, conf)
    if not rootfs.is_dir():
        raise StartError(f"rootfs of CT {vmid} ({conf.get('rootfs')}) is missing: {rootfs}")
    plan = build_lxc_config(
        conf, vmid=vmid, node=node, rootfs=rootfs, passthrough_dir=lxc_dir / "passthrough"
    )
    for warning in [*conf.warnings, *plan.warnings]:
        log(f"WARN: {warning}")
    # Nothing changed so far; now the guest's files and the LXC side.
    setup_guest(rootfs, conf)  # LXC/Setup: setup_network (Debian), set_hostname, set_dns
    lxc_dir.mkdir(parents=True, exist_ok=True)
    passthrough = lxc_dir / "passthrough"
    if passthrough.exists():
        shutil.rmtree(passthrough)
    for dev in plan.devices:  # LXC.pm create_passthrough_device_node (prestart hook)
        target = passthrough / dev.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        kind = 0o020000 if dev.kind == "c" else 0o060000
        os.mknod(target, kind | 0o600, os.makedev(dev.major, dev.minor))
        os.chmod(target, dev.mode)
        os.chown(target, dev.uid, dev.gid)
    (lxc_dir / "config").write_text(plan.config)
    logfile = lxc_dir / "console-start.log"
    proc = _run(
        ["lxc-start", *_lxc_args(node, vmid), "-d", "-l", "INFO", "-o", str(logfile)],
        check=False,
        timeout=timeout,
    )
    if proc.returncode == 0:
        proc = _run(
            ["lxc-wait", *_lxc_args(node, vmid), "-s", "RUNNING", "-t", str(int(timeout))],
            check=False,
            timeout=timeout + 5,
        )
    if proc.returncode != 0:
        detail = ""
        if logfile.exists():
            errors_seen = [
                ln for ln in logfile.read_text(errors="replace").splitlines() if " ERROR " in ln
            ]
            detail = "\n".join(errors_seen[-5:])
        raise PveError(f"startup for container '{vmid}' failed" + (f"\n{detail}" if detail else ""))
    log(f"CT {vmid} started on node '{node.name}'")


def ct_stop(node: Node, vmid: int, log: Log = _nolog) -> None:
    """``pct stop``: Status.pm ``vm_stop`` (lock unless ``mounted``) -> LXC.pm
    ``vm_stop($vmid, 1)`` (``lxc-stop --kill``)."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        if conf.get("lock") != "mounted":
            _check_lock(conf)
        if not _running(node, vmid):
            raise PveError(f"CT {vmid} not running")
        _run(["lxc-stop", *_lxc_args(node, vmid), "--kill"], timeout=60)
        log(f"CT {vmid} stopped")


def ct_shutdown(
    node: Node, vmid: int, log: Log = _nolog, *, timeout: int = 60, force_stop: bool = False
) -> None:
    """``pct shutdown``: Status.pm ``vm_shutdown`` (``check_lock``) -> LXC.pm ``vm_stop($vmid,
    0, $timeout, $forceStop)``: a clean stop, killed after ``timeout`` only with
    ``forceStop`` (else ``--nokill``, and "container did not stop")."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        _check_lock(conf)
        _shutdown_locked(node, vmid, log, timeout=timeout, force_stop=force_stop)


def _shutdown_locked(node: Node, vmid: int, log: Log, *, timeout: int, force_stop: bool) -> None:
    if not _running(node, vmid):
        raise PveError(f"CT {vmid} not running")
    argv = ["lxc-stop", *_lxc_args(node, vmid), "--timeout", str(timeout)]
    if not force_stop:
        argv.append("--nokill")
    proc = _run(argv, check=False, timeout=timeout + 30)
    if proc.returncode != 0 and _running(node, vmid):
        raise PveError("container did not stop")
    log(f"CT {vmid} shut down")


def ct_reboot(node: Node, vmid: int, log: Log = _nolog, *, timeout: int = 60) -> None:
    """``pct reboot``: LXC.pm ``vm_reboot``: under the lock, ``vm_stop($vmid, 0, $timeout,
    1)`` (killed after the timeout), then ``vm_start`` (pending changes applied, the LXC
    config regenerated)."""
    with ct_lock(node, vmid):
        if not _running(node, vmid):
            return
        _shutdown_locked(node, vmid, log, timeout=timeout, force_stop=True)
        _start_locked(node, vmid, log, timeout=30, skiplock=True)


def ct_exec(
    node: Node,
    vmid: int,
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    input_bytes: bytes | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """``pct exec``: run a command in the running container (clean environment)."""
    if not _running(node, vmid):
        raise PveError(f"CT {vmid} not running")
    cmd = ["lxc-attach", *_lxc_args(node, vmid), "--clear-env", "-v", _ATTACH_PATH, "--", *argv]
    if capture:
        return subprocess.run(
            cmd, capture_output=True, timeout=timeout, check=False, input=input_bytes
        )
    return subprocess.run(cmd, timeout=timeout, check=False, input=input_bytes)


def ct_push(
    node: Node,
    vmid: int,
    source: Path,
    dest: str,
    *,
    perms: str | None = None,
    user: str | None = None,
    group: str | None = None,
) -> None:
    """``pct push``: copy a host file into the running container."""
    if not dest.startswith("/"):
        raise ValidationError("destination", f"must be an absolute path (got {dest!r})")
    data = source.read_bytes()
    script = (
        'cat > "$1" || exit 1; [ -z "$2" ] || chmod "$2" "$1" || exit 1; '
        '[ -z "$3" ] || chown "$3" "$1"'
    )
    owner = user or ""
    if group:
        owner = f"{owner}:{group}"
    proc = ct_exec(
        node,
        vmid,
        ["/bin/sh", "-c", script, "sh", dest, perms or "", owner],
        input_bytes=data,
        timeout=60,
    )
    if proc.returncode != 0:
        raise PveError(
            f"failed to push {source} to CT {vmid}:{dest}: "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )


# --------------------------------------------------------------------------- config GET / PUT


def ct_config_dict(
    node: Node, vmid: int, *, snapshot: str | None = None, current: bool = False
) -> dict[str, object]:
    """``GET .../lxc/{vmid}/config``: API2/LXC/Config.pm ``vm_config`` ->
    ``load_snapshot_config`` or ``load_current_config`` (pending merged unless
    ``current``), the raw ``lxc`` pairs, the file's ``digest``."""
    if snapshot and current:
        message = "cannot use 'snapshot' parameter with 'current'"
        raise _param_error({"snapshot": message, "current": message})
    conf, _ = load_ct_conf(node, vmid)
    if snapshot:
        if snapshot not in conf.snapshots:
            raise PveError(f"snapshot '{snapshot}' does not exist")
        section: Section = conf.snapshots[snapshot]
        out: dict[str, object] = dict(section.options)
    else:
        section = conf.main
        out = dict(current_config(conf, current=current))
    if section.lxc:
        out["lxc"] = [[k, v] for k, v in section.lxc]
    out["digest"] = conf.digest
    return out


def ct_update_config(
    node: Node,
    vmid: int,
    changes: dict[str, str],
    *,
    delete: Sequence[str] = (),
    digest: str | None = None,
    revert: Sequence[str] = (),
    log: Log = _nolog,
) -> None:
    """``PUT .../config`` / ``pct set``: API2/LXC/Config.pm ``update_vm`` ->
    Config.pm ``update_pct_config`` (changes go to ``[pve:pending]``), then
    ``vmconfig_apply_pending`` for a stopped CT or ``vmconfig_hotplug_pending`` for a
    running one, then ``write_config``."""
    if not changes and not delete and not revert:
        raise PveError("no options specified")
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        _check_lock(conf)
        if digest and conf.digest and digest != conf.digest:  # PVE::Tools::assert_if_modified
            raise PveError(
                "detected modified configuration - file changed by other user? Try again."
            )
        for opt in revert:
            if not option_exists("lxc", opt):
                raise _param_error({"revert": f"unknown option '{opt}'"})
            if opt in changes:
                raise _param_error(
                    {"revert": f"you can't use '-{opt}' and '-revert {opt}' at the same time"}
                )
        for opt in delete:
            if not option_exists("lxc", opt):
                raise _param_error({"delete": f"unknown option '{opt}'"})
            if opt in changes:
                raise _param_error(
                    {"delete": f"you can't use '-{opt}' and -delete {opt}' at the same time"}
                )
            if opt in revert:
                both = f"you can't use '-delete {opt}' and '-revert {opt}' at the same time"
                raise _param_error({"delete": both})
        running = _running(node, vmid)
        errors = _update_pct_config(
            node, vmid, conf, running=running, param=changes, delete=delete, revert=revert, log=log
        )
        if errors:  # "don't write to config if we get any errors"
            raise _param_error(errors)
        _write_conf(node, vmid, conf)


def _unique_tags(value: str) -> str:
    """pve-guest-common GuestHelpers.pm ``get_unique_tags`` with datacenter.cfg defaults
    (no ``tag-style``: case-insensitive, sorted, lower-cased, ``;``-joined)."""
    seen: list[str] = []
    for tag in sorted(split_list(value), key=str.lower):
        if tag.lower() not in seen:
            seen.append(tag.lower())
    return ";".join(seen)


def _update_pct_config(  # noqa: PLR0912  (update_pct_config's branches)
    node: Node,
    vmid: int,
    conf: GuestConf,
    *,
    running: bool,
    param: dict[str, str],
    delete: Sequence[str],
    revert: Sequence[str],
    log: Log,
) -> dict[str, str]:
    """Config.pm ``update_pct_config``."""
    for opt in revert:
        conf.pending.options.pop(opt, None)
        remove_from_pending_delete(conf, opt)
    modified: set[str] = set()
    for opt in delete:
        if opt not in conf.main.options and opt not in conf.pending.options:
            log(f"cannot delete '{opt}' - not set in current configuration!")
            continue
        modified.add(opt)
        if opt in ("memory", "rootfs", "ostype"):
            raise PveError(f"unable to delete required option '{opt}'")
        if re.fullmatch(r"(unused|mp)\d+", opt):
            _check_protection(conf, f"can't remove CT {vmid} drive '{opt}'")
        elif opt == "unprivileged":
            raise PveError(f"unable to delete read-only option: '{opt}'")
        add_to_pending_delete(conf, opt)
    for opt in sorted(param):
        modified.add(opt)
        value = param[opt]
        if re.fullmatch(r"mp\d+", opt) or opt == "rootfs":
            _check_protection(conf, f"can't update CT {vmid} drive '{opt}'")
            mount = _parse_or_die(parse_volume, opt, value)
            if mount["type"] == "volume":
                sid = str(mount["volume"]).split(":", 1)[0]
                if "rootdir" not in node.storage(sid).content:
                    raise PveError(
                        f"storage '{sid}' does not allow content type 'rootdir' (Container)"
                    )
        elif opt in ("nameserver", "searchdomain"):
            value = split_nameservers(value)
        elif opt == "unprivileged":
            raise PveError(f"unable to modify read-only option: '{opt}'")
        elif opt == "tags":
            value = _unique_tags(value)
        elif re.fullmatch(r"net\d+", opt):
            _parse_or_die(lambda _k, v: parse_lxc_network(v), opt, value)
        elif re.fullmatch(r"dev\d+", opt):
            device = _parse_or_die(lambda _k, v: parse_device(v), opt, value)
            device_mode_and_rdev(node, str(device["path"]))  # "Device ... does not exist"
        conf.pending.options[opt] = value
        remove_from_pending_delete(conf, opt)
    cleanup_pending(conf)
    errors: dict[str, str] = {}
    if running:
        _hotplug_pending(conf, modified)
    else:
        _apply_pending(node, conf, errors, log=log, selection=modified)
    return errors


def _parse_or_die(
    parser: Callable[[str, str], dict[str, Any]], key: str, value: str
) -> dict[str, Any]:
    try:
        return parser(key, value)
    except ConfError as exc:
        raise PveError(str(exc).rstrip("\n")) from None


def _hotplug_pending(conf: GuestConf, selection: set[str]) -> None:
    """Config.pm ``vmconfig_hotplug_pending`` for a running CT, as far as the lab can:
    fast-plug options, memory/swap/cpulimit/cpuunits (cgroup limits are not emulated, so
    the value is taken as PVE takes it after a successful hotplug) and ``netN`` (no veth
    here) apply at once; a new ``mpN``/``devN`` stays pending (the stand-in cannot
    hotplug a mount or a device node into a running container: PVE would) as does
    every other option, until the next start."""
    pending = conf.pending.options
    for opt in sorted(pending):
        if opt in selection and opt in LXC_FASTPLUG_OPTIONS:
            conf.main.options[opt] = pending.pop(opt)
    for opt in sorted(parse_pending_delete(pending.get("delete"))):
        if opt not in selection:
            continue
        hotpluggable = opt in LXC_FASTPLUG_OPTIONS or opt in ("swap", "cpulimit", "cpuunits")
        if not (hotpluggable or re.fullmatch(r"unused\d+|net\d", opt)):
            continue  # "skip non-hotpluggable opts"
        conf.main.options.pop(opt, None)
        remove_from_pending_delete(conf, opt)
    for opt in sorted(pending):
        if opt == "delete" or opt not in selection:
            continue
        if opt in ("cpulimit", "cpuunits", "memory", "swap") or re.fullmatch(r"net\d+", opt):
            conf.main.options[opt] = pending.pop(opt)


def _apply_pending(
    node: Node,
    conf: GuestConf,
    errors: dict[str, str],
    *,
    log: Log,
    selection: set[str] | None = None,
) -> None:
    """Config.pm ``vmconfig_apply_pending`` (a stopped CT, or at start)."""
    pending = conf.pending.options
    for opt in sorted(parse_pending_delete(pending.get("delete"))):
        if selection is not None and opt not in selection:
            continue
        try:
            if re.fullmatch(r"mp\d+", opt):
                mount = parse_volume(opt, conf.main.options[opt])
                if mount["type"] == "volume":
                    _add_unused_volume(conf, str(mount["volume"]))
            elif re.fullmatch(r"unused\d+", opt):
                path = node.volume_path(conf.main.options[opt])
                shutil.rmtree(path, ignore_errors=True)
        except (ConfError, SpecopsError, KeyError) as exc:
            message = f"unable to apply pending change {opt} : {exc}"
            errors[opt] = message
            log(message)
            continue
        conf.main.options.pop(opt, None)
        remove_from_pending_delete(conf, opt)
    cleanup_pending(conf)
    for opt in sorted(pending):
        if opt == "delete" or (selection is not None and opt not in selection):
            continue
        conf.main.options[opt] = pending.pop(opt)


def _add_unused_volume(conf: GuestConf, volid: str) -> None:
    """``PVE::AbstractConfig::add_unused_volume``."""
    key = None
    for index in range(255, -1, -1):
        existing = conf.main.options.get(f"unused{index}")
        if existing == volid:
            return
        if existing is None:
            key = f"unused{index}"
    if key is None:
        raise PveError("Too many unused volumes - please delete them first.")
    conf.main.options[key] = volid


def ct_resize(node: Node, vmid: int, disk: str, size: str, log: Log = _nolog) -> None:
    """``pct resize`` / ``PUT .../resize``: API2/LXC.pm ``resize_vm`` with the volume's
    current size taken from its ``size=`` (the lab's dir storage stands in for a storage
    that can grow a subvol, as ZFS does; see README)."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        _check_lock(conf)
        value = conf.get(disk)
        if value is None:
            raise PveError(f"parse_volume - unknown type: {disk}")
        mount = _parse_or_die(parse_volume, disk, value)
        ext = size.startswith("+")
        m = re.match(r"^(\d+(\.\d+)?)([KMGT](?:iB)?)?$", size.lstrip("+"))
        if not m:
            raise PveError("invalid size string")
        factor = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
        request = int(float(m.group(1)) * factor[(m.group(3) or "")[:1]])
        old = int(mount.get("size") or 0)
        new = int(old + request if ext else request)
        if new < old:
            raise PveError("unable to shrink disk size")
        if new == old:
            raise PveError("disk is already at specified size")
        mount["size"] = new
        conf.main.options[disk] = print_volume(disk, mount)
        _write_conf(node, vmid, conf)
        log(f"update CT {vmid}: resize --disk {disk} --size {size}")


def list_cts(node: Node) -> list[int]:
    if not node.lxc_conf_dir.is_dir():
        return []
    return sorted(int(p.stem) for p in node.lxc_conf_dir.glob("*.conf") if p.stem.isdigit())


def list_vms(node: Node) -> list[int]:
    if not node.qemu_conf_dir.is_dir():
        return []
    return sorted(int(p.stem) for p in node.qemu_conf_dir.glob("*.conf") if p.stem.isdigit())


def vm_running(node: Node, vmid: int) -> bool:
    """Lab VMs are a conf plus a running flag (``<root>/run/qemu-server/<vmid>.running``)."""
    return (node.qemu_run_dir / f"{vmid}.running").exists()


@contextlib.contextmanager
def _vm_lock(node: Node, vmid: int, timeout: float) -> Iterator[None]:
    """qemu-server's VM lock, as ``qm start``/``qm stop`` take it: ``vm_start`` runs in
    ``PVE::QemuConfig->lock_config`` = ``flock(LOCK_EX)`` on
    ``/var/lock/qemu-server/lock-<vmid>.conf`` for up to 10 s (PVE::Tools lock_file_full,
    whose words the error uses). The vfio release holds the same lock."""
    error = lambda p: PveError(f"can't lock file '{p}' - got timeout")  # noqa: E731
    with flock_within(vm_lock_file(node.root, vmid), timeout, poll=0.05, error=error):
        yield


def _vm_groups(node: Node, vmid: int) -> list[int]:
    """IOMMU groups of the cards the VM's config passes through (the node's GPU facts)."""
    facts = gather_facts(HostRoots.under(node.root), vm_running=lambda _vmid: False)
    return sorted(
        {
            c.iommu_group
            for c in facts.gpus
            if c.iommu_group is not None and any(h.vmid == vmid for h in c.holders)
        }
    )


def vm_set_running(node: Node, vmid: int, running: bool, *, lock_timeout: float = 10) -> None:
    """``qm start``/``qm stop`` of a lab VM (a conf plus run state), under PVE's VM lock.

    A running lab VM is what a real node shows: the stand-in's ``<vmid>.running`` flag,
    ``/run/qemu-server/<vmid>.pid`` naming a ``/proc/<pid>`` whose cmdline is that VM's
    QEMU and whose fds hold the vfio groups of its cards (what the GPU facts read).
    """
    if not node.vm_conf(vmid).exists():
        raise _conf_missing(node, vmid, "qemu-server")
    with _vm_lock(node, vmid, lock_timeout):
        node.qemu_run_dir.mkdir(parents=True, exist_ok=True)
        flag = node.qemu_run_dir / f"{vmid}.running"
        pidfile = node.qemu_run_dir / f"{vmid}.pid"
        old_pid = pidfile.read_text().strip() if pidfile.exists() else ""
        if not running:
            flag.unlink(missing_ok=True)
            pidfile.unlink(missing_ok=True)
            if old_pid.isdigit():
                shutil.rmtree(node.host_path(f"/proc/{old_pid}"), ignore_errors=True)
            return
        if flag.exists() and old_pid.isdigit():
            return  # already running
        pid = 10_000 + vmid
        proc = node.host_path(f"/proc/{pid}")
        shutil.rmtree(proc, ignore_errors=True)
        (proc / "fd").mkdir(parents=True)
        argv = ["/usr/bin/kvm", "-id", str(vmid), "-pidfile", f"/var/run/qemu-server/{vmid}.pid"]
        (proc / "cmdline").write_text("\0".join(argv) + "\0")
        targets = ["/dev/null"] * 3 + ["/dev/vfio/vfio"]
        targets += [f"/dev/vfio/{g}" for g in _vm_groups(node, vmid)]
        for number, target in enumerate(targets):
            (proc / "fd" / str(number)).symlink_to(target)
        pidfile.write_text(f"{pid}\n")
        flag.write_text(f"{int(time.time())}\n")


def load_vm_conf(node: Node, vmid: int) -> GuestConf:
    """qemu-server ``load_config`` with ``parse_vm_config``."""
    path = node.vm_conf(vmid)
    if not path.exists():
        raise _conf_missing(node, vmid, "qemu-server")
    return parse_vm_config(vmid, read_conf(path))


def vm_config_dict(node: Node, vmid: int, *, snapshot: str | None = None) -> dict[str, object]:
    """``GET .../qemu/{vmid}/config`` (qemu-server ``load_current_config`` /
    ``load_snapshot_config``)."""
    conf = load_vm_conf(node, vmid)
    if snapshot:
        if snapshot not in conf.snapshots:
            raise PveError(f"snapshot '{snapshot}' does not exist")
        out: dict[str, object] = dict(conf.snapshots[snapshot].options)
    else:
        out = dict(current_config(conf))
    out["digest"] = conf.digest
    return out


# --------------------------------------------------------------------------- create / destroy


def ct_create(
    cluster: Cluster | None,
    node: Node,
    vmid: int,
    *,
    ostemplate: str,
    options: dict[str, str],
    log: Log = _nolog,
    start: bool = False,
) -> None:
    """``pct create``: conf + rootfs (a ``subvol`` dir) from a local template tarball
    (API2/LXC.pm ``create_vm``: ``check_vmid_unused``, the ``create`` lock while the
    archive is extracted, then the conf)."""
    where = cluster.find_guest(vmid) if cluster else None
    if node.ct_conf(vmid).exists() or node.vm_conf(vmid).exists() or where:
        raise PveError(
            f"CT {vmid} already exists on node '{where[0].name if where else node.name}'"
        )
    template = node.volume_path(ostemplate)
    if not template.is_file():
        raise PveError(f"volume '{ostemplate}' does not exist")
    storage_opt = options.pop("storage", "local")
    rootfs_opt = options.pop("rootfs", f"{storage_opt}:0")
    rootfs = _parse_or_die(parse_volume, "rootfs", rootfs_opt)
    sid, _, size = str(rootfs["volume"]).partition(":")
    st = node.storage(sid)
    if "rootdir" not in st.content:
        raise PveError(f"storage '{sid}' does not support container directories")
    volname = f"{vmid}/subvol-{vmid}-disk-0.subvol"
    rootfs_dir = node.volume_path(f"{sid}:{volname}")
    conf = _new_conf(vmid, f"{sid}:{volname},size={size or 0}G", options)
    with ct_lock(node, vmid):
        rootfs_dir.mkdir(parents=True, exist_ok=False)
        try:
            log(f"extracting archive '{template}'")
            _run(
                ["tar", "-xpf", str(template), "--numeric-owner", "-C", str(rootfs_dir)],
                timeout=600,
            )
            hostname = options.get("hostname", f"CT{vmid}")
            (rootfs_dir / "etc").mkdir(exist_ok=True)
            (rootfs_dir / "etc" / "hostname").write_text(f"{hostname}\n")
            _write_conf(node, vmid, conf)
        except BaseException:
            shutil.rmtree(rootfs_dir, ignore_errors=True)
            raise
        log(f"CT {vmid} created on node '{node.name}'")
    if start:
        ct_start(node, vmid, log)


def _new_conf(vmid: int, rootfs: str, options: dict[str, str]) -> GuestConf:
    """The conf ``create_vm`` writes: the given options (checked like a conf value) plus
    ``arch`` and ``ostype`` (which PVE detects from the template; the lab's template is
    Debian amd64), ``rootfs``; memory/swap defaults (512) written as the lab always did."""
    items = {
        "arch": "amd64",
        "ostype": "debian",
        "memory": "512",
        "swap": "512",
        "hostname": f"CT{vmid}",
        **options,
        "rootfs": rootfs,
    }
    conf = GuestConf(Section(), Section(), {}, "")
    for key, value in items.items():
        if key == "description":
            conf.main.options[key] = value
            continue
        try:
            conf.main.options[key] = conf_check_type("lxc", key, value)
        except ConfError as exc:
            raise PveError(f"unable to parse value of '{key}' - {exc}".rstrip("\n"), 400) from None
    return conf


def ct_destroy(node: Node, vmid: int, log: Log = _nolog, *, force: bool = False) -> None:
    """``pct destroy`` / ``DELETE .../lxc/{vmid}``: API2/LXC.pm ``destroy_vm``
    (``check_protection``, ``check_lock``, a running CT only with ``force``) then
    LXC.pm ``destroy_lxc_container``: conf, rootfs volume(s) and the LXC side."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        _check_lock(conf)
        _check_protection(conf, f"can't remove CT {vmid}")
        if _running(node, vmid):
            if not force:
                raise PveError(f"unable to destroy CT {vmid} - container is running")
            log(f"forced to stop CT {vmid} before destroying!")
            _run(["lxc-stop", *_lxc_args(node, vmid), "--kill"], timeout=60)
        rootfs = _rootfs_path(node, conf)
        node.ct_conf(vmid).unlink()
        shutil.rmtree(rootfs, ignore_errors=True)
        with contextlib.suppress(OSError):
            rootfs.parent.rmdir()  # images/<vmid>/ when now empty
        shutil.rmtree(node.lxcpath / node.lxc_name(vmid), ignore_errors=True)
        log(f"CT {vmid} destroyed")
