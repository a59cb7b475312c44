"""Container operations of the lab PVE stand-in: what ``pct`` and the API both call.

Every operation works on one lab node (:class:`~specops.lab.pve.layout.Node`), takes the
per-CT lock ``<root>/run/lock/lxc/pve-config-<vmid>.lock`` like PVE, and drives a real
LXC container named ``<node>-<vmid>`` in the node's lxcpath with ``lxc-start``,
``lxc-stop``, ``lxc-info`` and ``lxc-attach``. Errors use PVE's wording where PVE has
one. ``log`` callbacks receive the lines a PVE task log would show.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specops.errors import SpecopsError, ValidationError
from specops.lab.pve.conf import PveConf, PveConfError, config_lock, parse, parse_property_string
from specops.lab.pve.layout import Cluster, Node
from specops.lab.pve.lxcconf import StartError, build_lxc_config

__all__ = [
    "CtStatus",
    "PveError",
    "ct_config_dict",
    "ct_create",
    "ct_destroy",
    "ct_exec",
    "ct_lock",
    "ct_migrate",
    "ct_push",
    "ct_reboot",
    "ct_resize",
    "ct_restore",
    "ct_shutdown",
    "ct_start",
    "ct_status",
    "ct_stop",
    "ct_update_config",
    "ct_vzdump",
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
    """An operation PVE would refuse; ``status`` is the HTTP code the API answers with."""

    def __init__(self, message: str, status: int = 500) -> None:
        self.status = status
        super().__init__(message)


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
    """PVE's per-guest config lock (a flock on ``pve-config-<vmid>.lock``), the same
    lock the conf-editing modules take."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(config_lock(str(node.root), vmid, timeout))
        except PveConfError as exc:  # only the lock's own timeout
            raise PveError(exc.problem) from None
        yield


def _conf_missing(node: Node, vmid: int, kind: str = "lxc") -> PveError:
    return PveError(f"Configuration file 'nodes/{node.name}/{kind}/{vmid}.conf' does not exist")


def load_ct_conf(node: Node, vmid: int) -> tuple[PveConf, str]:
    """The parsed conf and its raw text; PVE's error when there is none."""
    path = node.ct_conf(vmid)
    if not path.exists():
        raise _conf_missing(node, vmid)
    text = path.read_text()
    return parse(text), text


def _write_conf(node: Node, vmid: int, text: str, directory: Path | None = None) -> None:
    path = (directory or node.lxc_conf_dir) / f"{vmid}.conf"
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _lxc_args(node: Node, vmid: int) -> list[str]:
    return ["-n", node.lxc_name(vmid), "-P", str(node.lxcpath)]


@dataclass(frozen=True)
class CtStatus:
    status: str  # running | stopped
    pid: int | None


def ct_status(node: Node, vmid: int) -> CtStatus:
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


def _rootfs_path(node: Node, conf: PveConf) -> Path:
    rootfs = conf.get("rootfs")
    if rootfs is None:
        raise StartError("missing 'rootfs' configuration")
    volume = parse_property_string(rootfs, default_key="volume").get("volume", "")
    return node.volume_path(volume)


def ct_start(node: Node, vmid: int, log: Log = _nolog, *, timeout: float = 30) -> None:
    """``pct start``: translate the conf (PVE semantics), then start the LXC container."""
    with ct_lock(node, vmid):
        _start_locked(node, vmid, log, timeout=timeout)


def _start_locked(node: Node, vmid: int, log: Log, *, timeout: float) -> None:
    conf, _ = load_ct_conf(node, vmid)
    if ct_status(node, vmid).status == "running":
        raise PveError(f"CT {vmid} already running")
    if conf.get("lock"):
        raise PveError(f"CT is locked ({conf.get('lock')})")
    lxc_dir = node.lxcpath / node.lxc_name(vmid)
    rootfs = _rootfs_path(node, conf)
    if not rootfs.is_dir():
        raise StartError(f"rootfs of CT {vmid} ({conf.get('rootfs')}) is missing: {rootfs}")
    plan = build_lxc_config(
        conf, vmid=vmid, node=node, rootfs=rootfs, passthrough_dir=lxc_dir / "passthrough"
    )
    for warning in plan.warnings:
        log(f"WARN: {warning}")
    # Nothing changed so far; now the guest's files and the LXC side.
    _setup_guest(rootfs, conf, vmid)
    lxc_dir.mkdir(parents=True, exist_ok=True)
    passthrough = lxc_dir / "passthrough"
    if passthrough.exists():
        shutil.rmtree(passthrough)
    for dev in plan.devices:
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
            errors = [
                ln for ln in logfile.read_text(errors="replace").splitlines() if " ERROR " in ln
            ]
            detail = "\n".join(errors[-5:])
        raise PveError(f"startup for container '{vmid}' failed" + (f"\n{detail}" if detail else ""))
    log(f"CT {vmid} started on node '{node.name}'")


def ct_stop(node: Node, vmid: int, log: Log = _nolog) -> None:
    """``pct stop``: immediate stop (no clean shutdown)."""
    with ct_lock(node, vmid):
        if ct_status(node, vmid).status != "running":
            raise PveError(f"CT {vmid} not running")
        _run(["lxc-stop", *_lxc_args(node, vmid), "-k"], timeout=60)
        log(f"CT {vmid} stopped")


def ct_shutdown(
    node: Node, vmid: int, log: Log = _nolog, *, timeout: int = 60, force_stop: bool = False
) -> None:
    """``pct shutdown``: clean shutdown within ``timeout``; ``force_stop`` kills after it."""
    with ct_lock(node, vmid):
        _shutdown_locked(node, vmid, log, timeout=timeout, force_stop=force_stop)


def _shutdown_locked(node: Node, vmid: int, log: Log, *, timeout: int, force_stop: bool) -> None:
    if ct_status(node, vmid).status != "running":
        raise PveError(f"CT {vmid} not running")
    proc = _run(
        ["lxc-stop", *_lxc_args(node, vmid), "-t", str(timeout)], check=False, timeout=timeout + 30
    )
    if proc.returncode != 0 and ct_status(node, vmid).status == "running":
        if not force_stop:
            raise PveError(f"CT {vmid}: shutdown timeout (use forceStop to kill it)")
        _run(["lxc-stop", *_lxc_args(node, vmid), "-k"], timeout=60)
    log(f"CT {vmid} shut down")


def ct_reboot(node: Node, vmid: int, log: Log = _nolog, *, timeout: int = 60) -> None:
    """``pct reboot``: shutdown then start, so config changes apply (as PVE does)."""
    with ct_lock(node, vmid):
        _shutdown_locked(node, vmid, log, timeout=timeout, force_stop=True)
        _start_locked(node, vmid, log, timeout=30)


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
    if ct_status(node, vmid).status != "running":
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


def ct_config_dict(
    node: Node, vmid: int, *, snapshot: str | None = None, current: bool = False
) -> dict[str, object]:
    """What ``GET .../lxc/{vmid}/config`` answers: options, ``lxc`` pairs, ``digest``."""
    conf, text = load_ct_conf(node, vmid)
    if snapshot is not None:
        if snapshot not in conf.snapshot_names():
            raise PveError(f"snapshot '{snapshot}' does not exist")
        section = conf.section(snapshot)
        out: dict[str, object] = dict(section.items())
        pairs = section.lxc()
    else:
        out = dict(conf.items())
        pairs = conf.lxc()
        if not current and "pve:pending" in [s.name for s in conf.sections]:
            pending = conf.section("pve:pending").items()
            for key in pending.get("delete", "").split(","):
                out.pop(key.strip(), None)
            out.update({k: v for k, v in pending.items() if k != "delete"})
        if conf.description is not None:
            out["description"] = conf.description + "\n"
    if pairs:
        out["lxc"] = [[k, v] for k, v in pairs]
    out["digest"] = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
    return out


def ct_update_config(
    node: Node,
    vmid: int,
    changes: dict[str, str],
    delete: Sequence[str] = (),
    digest: str | None = None,
) -> None:
    """``PUT .../config``: set and delete main-section options; snapshots stay byte-identical."""
    with ct_lock(node, vmid):
        conf, text = load_ct_conf(node, vmid)
        if digest and digest != hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest():
            raise PveError(
                "detected modified configuration - file changed by other user? Try again."
            )
        for key in delete:
            if key in changes:
                raise PveError(f"unable to delete '{key}' - option is also set", 400)
        for key, value in changes.items():
            if key == "description":
                conf.set_description(value.rstrip("\n"))
            else:
                conf.set(key, value)
        for key in delete:
            if key == "description":
                conf.set_description(None)
            else:
                conf.delete(key)
        _write_conf(node, vmid, conf.render())


def _gib(size: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", size.strip())
    if not m:
        raise PveError(f"unable to parse size '{size}'", 400)
    factor = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "": 1 / 1024**3}[m.group(2)]
    return float(m.group(1)) * factor


def ct_resize(node: Node, vmid: int, disk: str, size: str, log: Log = _nolog) -> None:
    """``pct resize``: grow a volume (``size`` absolute or ``+N``); shrinking is refused as
    on PVE. A lab ``subvol`` directory has no real size, so only ``size=`` in the conf moves."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        value = conf.get(disk)
        if value is None:
            raise PveError(f"no such disk '{disk}'", 400)
        props = parse_property_string(value, default_key="volume")
        old = _gib(props.get("size", "0"))
        new = old + _gib(size[1:]) if size.startswith("+") else _gib(size)
        if new < old:
            raise PveError("unable to shrink disk size")
        props["size"] = f"{new:g}G"
        volume = props.pop("volume")
        conf.set(disk, ",".join([volume, *(f"{k}={v}" for k, v in props.items())]))
        _write_conf(node, vmid, conf.render())
        log(f"resized {disk} of CT {vmid} from {old:g}G to {new:g}G")


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


def vm_set_running(node: Node, vmid: int, running: bool) -> None:
    if not node.vm_conf(vmid).exists():
        raise _conf_missing(node, vmid, "qemu-server")
    node.qemu_run_dir.mkdir(parents=True, exist_ok=True)
    flag = node.qemu_run_dir / f"{vmid}.running"
    if running:
        flag.write_text(f"{int(time.time())}\n")
    else:
        flag.unlink(missing_ok=True)


def vm_config_dict(node: Node, vmid: int, *, snapshot: str | None = None) -> dict[str, object]:
    path = node.vm_conf(vmid)
    if not path.exists():
        raise _conf_missing(node, vmid, "qemu-server")
    text = path.read_text()
    conf = parse(text)
    section = conf.section(snapshot) if snapshot else conf.main
    out: dict[str, object] = dict(section.items())
    if snapshot is None and conf.description is not None:
        out["description"] = conf.description + "\n"
    out["digest"] = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
    return out


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
    """``pct create``: conf + rootfs (a ``subvol`` dir) from a local template tarball."""
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
    props = parse_property_string(rootfs_opt, default_key="volume")
    sid, _, size = props["volume"].partition(":")
    st = node.storage(sid)
    if "rootdir" not in st.content:
        raise PveError(f"storage '{sid}' does not support container directories")
    volname = f"{vmid}/subvol-{vmid}-disk-0.subvol"
    rootfs_dir = node.volume_path(f"{sid}:{volname}")
    conf_text = _new_conf_text(vmid, f"{sid}:{volname},size={size or 0}G", options)
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
            _write_conf(node, vmid, conf_text)
        except BaseException:
            shutil.rmtree(rootfs_dir, ignore_errors=True)
            raise
        log(f"CT {vmid} created on node '{node.name}'")
    if start:
        ct_start(node, vmid, log)


def _setup_guest(rootfs_dir: Path, conf: PveConf, vmid: int) -> None:
    """What PVE's setup writes into the CT at each start: hostname, /etc/hosts, DNS."""
    etc = rootfs_dir / "etc"
    etc.mkdir(exist_ok=True)
    hostname = conf.get("hostname") or f"CT{vmid}"
    (etc / "hostname").write_text(f"{hostname}\n")
    _ensure_etc_hosts(rootfs_dir, hostname)
    resolv = etc / "resolv.conf"
    if resolv.is_symlink():  # managed inside the CT (systemd-resolved): left alone
        return
    servers, search = (conf.get("nameserver") or "").split(), conf.get("searchdomain") or ""
    if servers or search:
        text = (f"search {search}\n" if search else "") + "".join(
            f"nameserver {ns}\n" for ns in servers
        )
    else:  # PVE's default: the host's own DNS settings
        text = Path("/etc/resolv.conf").read_text() if Path("/etc/resolv.conf").is_file() else ""
    resolv.write_text(text)


def _ensure_etc_hosts(rootfs_dir: Path, hostname: str) -> None:
    """PVE's setup (``set_hostname``) keeps ``127.0.1.1 <hostname>`` in the CT's /etc/hosts."""
    hosts = rootfs_dir / "etc" / "hosts"
    lines = hosts.read_text().splitlines() if hosts.is_file() else []
    if not any(ln.split()[:1] == ["127.0.0.1"] for ln in lines):
        lines.insert(0, "127.0.0.1 localhost.localdomain localhost")
    lines = [ln for ln in lines if ln.split()[:1] != ["127.0.1.1"]]
    lines.append(f"127.0.1.1 {hostname}")
    hosts.write_text("".join(f"{ln}\n" for ln in lines))


def _new_conf_text(vmid: int, rootfs: str, options: dict[str, str]) -> str:
    conf = parse("")
    items = {
        "arch": "amd64",
        "ostype": "debian",
        "memory": "512",
        "swap": "512",
        "hostname": f"CT{vmid}",
        **options,
        "rootfs": rootfs,
    }
    description = items.pop("description", None)
    for key in sorted(items):
        conf.set(key, items[key])
    if description:
        conf.set_description(description.rstrip("\n"))
    return conf.render()


def ct_destroy(node: Node, vmid: int, log: Log = _nolog, *, force: bool = False) -> None:
    """``pct destroy``: remove conf, rootfs volume(s) and the LXC side."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        if ct_status(node, vmid).status == "running":
            if not force:
                raise PveError(f"CT {vmid} is running - destroy failed")
            _run(["lxc-stop", *_lxc_args(node, vmid), "-k"], timeout=60)
        rootfs = _rootfs_path(node, conf)
        node.ct_conf(vmid).unlink()
        shutil.rmtree(rootfs, ignore_errors=True)
        with contextlib.suppress(OSError):
            rootfs.parent.rmdir()  # images/<vmid>/ when now empty
        shutil.rmtree(node.lxcpath / node.lxc_name(vmid), ignore_errors=True)
        log(f"CT {vmid} destroyed")


def ct_migrate(  # noqa: PLR0912, PLR0915  (PVE's phases in order, with rollback)
    cluster: Cluster,
    source: Node,
    vmid: int,
    target: str,
    log: Log = _nolog,
    *,
    restart: bool = False,
    online: bool = False,
    timeout: int = 180,
) -> None:
    """Restart-mode migration to another node of the cluster (conf + local volumes move).

    As in pve-container: a running CT needs ``restart`` (``online`` is not implemented);
    local bind/device mount points without ``shared=1`` refuse; a failure before the conf
    moves leaves the CT on the source (restarted when it ran); a failed start on the
    target leaves it there, stopped, and the task fails with "migration problems".
    """
    dest = cluster.node(target)
    if dest.name == source.name:
        raise PveError(f"target is local node '{dest.name}'", 400)
    with ct_lock(source, vmid):
        conf, text = load_ct_conf(source, vmid)
        if conf.get("lock"):
            raise PveError(f"CT is locked ({conf.get('lock')})")
        running = ct_status(source, vmid).status == "running"
        if running and online:
            raise PveError("lxc live migration is currently not implemented")
        if running and not restart:
            raise PveError("can't migrate running container without --online or --restart")
        if dest.ct_conf(vmid).exists() or dest.vm_conf(vmid).exists():
            raise PveError(f"guest {vmid} already exists on node '{dest.name}'")
        volumes: list[tuple[str, str]] = []
        for key in ["rootfs", *[f"mp{n}" for n in conf.indexed("mp")]]:
            value = conf.get(key)
            if value is None:
                continue
            props = parse_property_string(value, default_key="volume")
            volid = props.get("volume", "")
            if volid.startswith("/"):
                if props.get("shared") == "1":
                    continue
                kind = "device" if volid.startswith("/dev/") else "bind"
                raise PveError(f"cannot migrate local {kind} mount point '{key}'")
            sid = volid.split(":", 1)[0]
            if source.storage(sid).shared:
                continue
            dest.storage(sid)  # must exist on the target too
            volumes.append((key, volid))
        log(f"starting migration of CT {vmid} to node '{dest.name}'")
        if running:
            log(f"shutdown CT {vmid}")
            _shutdown_locked(source, vmid, log, timeout=timeout, force_stop=True)
        moved: list[tuple[Path, Path]] = []
        try:
            for key, volid in volumes:
                src, dst = source.volume_path(volid), dest.volume_path(volid)
                log(f"found local volume '{volid}' (in current VM config)")
                if dst.exists():
                    raise PveError(f"volume '{volid}' already exists on node '{dest.name}'")
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(src, dst)
                moved.append((src, dst))
                log(f"volume '{volid}' is '{volid}' on the target ({key})")
            dest.lxc_conf_dir.mkdir(parents=True, exist_ok=True)
            _write_conf(dest, vmid, text)
            source.ct_conf(vmid).unlink()
        except BaseException as exc:
            log(f"ERROR: migration aborted: {exc}")
            for src, dst in reversed(moved):
                shutil.move(dst, src)
            dest.ct_conf(vmid).unlink(missing_ok=True)
            if running:
                log(f"restarting CT {vmid} on node '{source.name}'")
                _start_locked(source, vmid, log, timeout=30)
            raise
        shutil.rmtree(source.lxcpath / source.lxc_name(vmid), ignore_errors=True)
    if running:
        log("start container on target node")
        try:
            ct_start(dest, vmid, log)
        except SpecopsError as exc:
            log(f"ERROR: {exc}")
            raise PveError("migration problems") from exc
    log("migration finished successfully")


_COMPRESS: dict[str, tuple[str, list[str]]] = {
    "0": ("", []),
    "gzip": (".gz", ["gzip", "-q"]),
    "1": (".gz", ["gzip", "-q"]),
    "zstd": (".zst", ["zstd", "-q", "--rm", "-T0"]),
}


def ct_vzdump(
    node: Node,
    vmid: int,
    log: Log = _nolog,
    *,
    storage: str = "local",
    mode: str = "snapshot",
    compress: str = "0",
) -> str:
    """``vzdump`` of one CT to a dir storage; returns the backup's volume id.

    The archive is the rootfs plus ``./etc/vzdump/pct.conf`` (the main section of the
    conf, no snapshots), named ``vzdump-lxc-<vmid>-<YYYY_MM_DD-HH_MM_SS>.tar[.gz|.zst]``.
    ``stop`` mode shuts a running CT down and starts it again; ``snapshot`` (unsupported
    by dir storages, as on PVE) and ``suspend`` archive the running rootfs as is.
    """
    if compress not in _COMPRESS:
        raise PveError(f"compression '{compress}' is not emulated (use 0, gzip or zstd)", 400)
    suffix, compressor = _COMPRESS[compress]
    st = node.storage(storage)
    if "backup" not in st.content:
        raise PveError(f"storage '{storage}' does not support backups")
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        rootfs = _rootfs_path(node, conf)
        running = ct_status(node, vmid).status == "running"
        stamp = time.strftime("%Y_%m_%d-%H_%M_%S")
        volname = f"vzdump-lxc-{vmid}-{stamp}.tar{suffix}"
        volid = f"{storage}:backup/{volname}"
        target = node.volume_path(volid)
        target.parent.mkdir(parents=True, exist_ok=True)
        log(f"Starting Backup of VM {vmid} (lxc)")
        log(f"CT Name: {conf.get('hostname', f'CT{vmid}')}")
        if mode == "snapshot":
            log("mode failure - some volumes do not support snapshots")
            log("trying 'suspend' mode instead")
            mode = "suspend"
        log(f"Backup started at {time.strftime('%Y-%m-%d %H:%M:%S')}")
        main = parse("".join(ln.raw for ln in conf.main.lines))
        main.delete("lock")
        meta = node.lxcpath / node.lxc_name(vmid) / "vzdump"
        shutil.rmtree(meta, ignore_errors=True)
        (meta / "etc" / "vzdump").mkdir(parents=True)
        (meta / "etc" / "vzdump" / "pct.conf").write_text(main.render())
        stopped = False
        try:
            if running and mode == "stop":
                log("stopping virtual guest")
                _shutdown_locked(node, vmid, log, timeout=60, force_stop=True)
                stopped = True
            tmp = target.with_name(f".{target.name}.tmp.tar")
            _run(
                [
                    "tar",
                    "-cpf",
                    str(tmp),
                    "--numeric-owner",
                    "--one-file-system",
                    "--exclude=./etc/vzdump",
                    "-C",
                    str(rootfs),
                    ".",
                ],
                timeout=900,
            )
            _run(
                [
                    "tar",
                    "-rpf",
                    str(tmp),
                    "--numeric-owner",
                    "-C",
                    str(meta),
                    "./etc/vzdump/pct.conf",
                ],
                timeout=60,
            )
            if compressor:
                _run([*compressor, str(tmp)], timeout=900)
                tmp = tmp.with_name(tmp.name + suffix)
            tmp.replace(target)
        finally:
            shutil.rmtree(meta, ignore_errors=True)
            if stopped:
                log("restarting virtual guest")
                _start_locked(node, vmid, log, timeout=30)
        log(f"creating vzdump archive '{target}'")
        log(f"Finished Backup of VM {vmid}")
    return volid


def ct_restore(
    node: Node,
    vmid: int,
    archive: str,
    options: dict[str, str],
    log: Log = _nolog,
    *,
    force: bool = False,
    cluster: Cluster | None = None,
) -> None:
    """``pct restore`` / create with ``restore=1``: a new rootfs and conf from a backup."""
    source = node.volume_path(archive)
    if not source.is_file():
        raise PveError(f"volume '{archive}' does not exist")
    where = cluster.find_guest(vmid) if cluster else None
    if where and where[0].name != node.name:
        raise PveError(f"CT {vmid} already exists on node '{where[0].name}'")
    if node.ct_conf(vmid).exists():
        if not force:
            raise PveError(f"unable to restore CT {vmid} - CT {vmid} already exists")
        if ct_status(node, vmid).status == "running":
            raise PveError(f"unable to restore CT {vmid} - CT is running")
        ct_destroy(node, vmid, log)
    storage_opt = options.pop("storage", "local")
    sid = parse_property_string(options.pop("rootfs", f"{storage_opt}:0"), "volume")[
        "volume"
    ].split(":", 1)[0]
    if "rootdir" not in node.storage(sid).content:
        raise PveError(f"storage '{sid}' does not support container directories")
    rootfs_dir = node.volume_path(f"{sid}:{vmid}/subvol-{vmid}-disk-0.subvol")
    with ct_lock(node, vmid):
        rootfs_dir.mkdir(parents=True, exist_ok=False)
        try:
            log(f"restoring '{archive}' now..")
            _run(
                ["tar", "-xpf", str(source), "--numeric-owner", "-C", str(rootfs_dir)], timeout=900
            )
            saved = rootfs_dir / "etc" / "vzdump" / "pct.conf"
            if not saved.is_file():
                raise PveError(f"unable to restore CT {vmid} - archive has no etc/vzdump/pct.conf")
            conf = parse(saved.read_text())
            shutil.rmtree(rootfs_dir / "etc" / "vzdump")
            old = parse_property_string(conf.get("rootfs") or "", "volume")
            conf.set(
                "rootfs", f"{sid}:{vmid}/subvol-{vmid}-disk-0.subvol,size={old.get('size', '0G')}"
            )
            for key, value in options.items():
                conf.set(key, value)
            _write_conf(node, vmid, conf.render())
        except BaseException:
            shutil.rmtree(rootfs_dir, ignore_errors=True)
            raise
        log(f"CT {vmid} restored on node '{node.name}'")
