"""vzdump and restore of a lab container (pve-container ``src/PVE/VZDump/LXC.pm``,
pve-manager ``PVE/VZDump.pm``, API2/LXC.pm ``create_vm`` with ``restore``; commits in
:data:`specops_lab.pve_schema.UPSTREAM`)."""

from __future__ import annotations

import shutil
import time

from specops_lab.pve.conf import (
    GuestConf,
    Section,
    parse_pct_config,
    parse_volume,
    print_volume,
    read_conf,
    write_pct_config,
)
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.pct import (
    Log,
    PveError,
    _check_lock,
    _nolog,
    _parse_or_die,
    _rootfs_path,
    _run,
    _running,
    _shutdown_locked,
    _start_locked,
    _write_conf,
    ct_destroy,
    ct_lock,
    load_ct_conf,
)

__all__ = ["ct_restore", "ct_vzdump"]


_PCT_CONF = "./etc/vzdump/pct.conf"
_COMPRESS: dict[str, tuple[str, list[str]]] = {
    "0": ("", []),
    "gzip": (".gz", ["gzip", "-q"]),
    "1": (".gz", ["gzip", "-q"]),
    "zstd": (".zst", ["zstd", "-q", "--rm", "-T0"]),
}


def _set_lock(node: Node, vmid: int, lock: str) -> GuestConf:
    """``PVE::AbstractConfig::set_lock`` (under the CT lock; ``check_lock`` first)."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        _check_lock(conf)
        conf.main.options["lock"] = lock
        _write_conf(node, vmid, conf)
        return conf


def _remove_lock(node: Node, vmid: int, lock: str) -> None:
    """``PVE::AbstractConfig::remove_lock``."""
    with ct_lock(node, vmid):
        conf, _ = load_ct_conf(node, vmid)
        if not conf.get("lock"):
            raise PveError(f"no lock found trying to remove '{lock}' lock")
        if conf.get("lock") != lock:
            raise PveError(f"found lock '{conf.get('lock')}' trying to remove '{lock}' lock")
        conf.main.options.pop("lock")
        _write_conf(node, vmid, conf)


def ct_vzdump(  # noqa: PLR0915  (VZDump/LXC.pm's steps in order)
    node: Node,
    vmid: int,
    log: Log = _nolog,
    *,
    storage: str = "local",
    mode: str = "snapshot",
    compress: str = "0",
) -> str:
    """``vzdump`` of one CT to a dir storage (pve-container VZDump/LXC.pm): the CT is
    locked ``backup`` (``set_lock``) while it runs; ``snapshot`` mode fails on a dir
    storage ("mode failure - some volumes do not support snapshots") and PVE::VZDump
    falls back to ``suspend``; ``stop`` mode shuts a running CT down and starts it again.
    The archive is the rootfs plus ``./etc/vzdump/pct.conf`` (``write_pct_config`` of the
    conf without ``lock``, snapshots and pending), named
    ``vzdump-lxc-<vmid>-<YYYY_MM_DD-HH_MM_SS>.tar[.gz|.zst]``. Returns the volume id."""
    if compress not in _COMPRESS:
        raise PveError(f"compression '{compress}' is not emulated (use 0, gzip or zstd)", 400)
    suffix, compressor = _COMPRESS[compress]
    st = node.storage(storage)
    if "backup" not in st.content:
        raise PveError(f"storage '{storage}' does not support backups")
    conf = _set_lock(node, vmid, "backup")
    try:
        rootfs = _rootfs_path(node, conf)
        running = _running(node, vmid)
        stamp = time.strftime("%Y_%m_%d-%H_%M_%S")
        volname = f"vzdump-lxc-{vmid}-{stamp}.tar{suffix}"
        volid = f"{storage}:backup/{volname}"
        target = node.volume_path(volid)
        target.parent.mkdir(parents=True, exist_ok=True)
        log(f"Starting Backup of VM {vmid} (lxc)")
        log(f"CT Name: {conf.get('hostname') or f'CT{vmid}'}")
        if mode == "snapshot":
            log("mode failure - some volumes do not support snapshots")
            log("trying 'suspend' mode instead")
            mode = "suspend"
        log(f"Backup started at {time.strftime('%Y-%m-%d %H:%M:%S')}")
        saved = GuestConf(
            Section({k: v for k, v in conf.main.options.items() if k != "lock"}, conf.main.lxc),
            Section(),
            {},
            "",
        )
        meta = node.lxcpath / node.lxc_name(vmid) / "vzdump"
        shutil.rmtree(meta, ignore_errors=True)
        (meta / "etc" / "vzdump").mkdir(parents=True)
        (meta / "etc" / "vzdump" / "pct.conf").write_text(write_pct_config(saved))
        stopped = False
        try:
            if running and mode == "stop":
                log("stopping virtual guest")
                with ct_lock(node, vmid):
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
                ["tar", "-rpf", str(tmp), "--numeric-owner", "-C", str(meta), _PCT_CONF],
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
                with ct_lock(node, vmid):
                    _start_locked(node, vmid, log, timeout=30, skiplock=True)
        log(f"creating vzdump archive '{target}'")
        log(f"Finished Backup of VM {vmid}")
    finally:
        _remove_lock(node, vmid, "backup")
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
    """``pct restore`` / create with ``restore=1`` (API2/LXC.pm ``create_vm``,
    LXC/Create.pm ``recover_config``/``restore_configuration``): a new rootfs and the
    conf from the archive's ``etc/vzdump/pct.conf``, the given options over it."""
    source = node.volume_path(archive)
    if not source.is_file():
        raise PveError(f"volume '{archive}' does not exist")
    where = cluster.find_guest(vmid) if cluster else None
    if where and where[0].name != node.name:
        raise PveError(f"CT {vmid} already exists on node '{where[0].name}'")
    if node.ct_conf(vmid).exists():
        if not force:
            raise PveError(f"unable to restore CT {vmid} - CT {vmid} already exists")
        if _running(node, vmid):
            raise PveError("can't overwrite running container")
        ct_destroy(node, vmid, log)
    storage_opt = options.pop("storage", "local")
    rootfs_opt = options.pop("rootfs", f"{storage_opt}:0")
    sid = str(_parse_or_die(parse_volume, "rootfs", rootfs_opt)["volume"]).split(":", 1)[0]
    if "rootdir" not in node.storage(sid).content:
        raise PveError(f"storage '{sid}' does not support container directories")
    rootfs_dir = node.volume_path(f"{sid}:{vmid}/subvol-{vmid}-disk-0.subvol")
    with ct_lock(node, vmid):
        rootfs_dir.mkdir(parents=True, exist_ok=False)
        try:
            log(f"recovering backed-up configuration from '{archive}'")
            _run(
                ["tar", "-xpf", str(source), "--numeric-owner", "-C", str(rootfs_dir)], timeout=900
            )
            saved = rootfs_dir / "etc" / "vzdump" / "pct.conf"
            if not saved.is_file():
                raise PveError(f"unable to restore CT {vmid} - archive has no etc/vzdump/pct.conf")
            conf = parse_pct_config(vmid, read_conf(saved))
            shutil.rmtree(rootfs_dir / "etc" / "vzdump")
            old = _parse_or_die(parse_volume, "rootfs", conf.get("rootfs") or "none:0")
            size = int(old.get("size") or 0)
            conf.main.options["rootfs"] = print_volume(
                "rootfs", {"volume": f"{sid}:{vmid}/subvol-{vmid}-disk-0.subvol", "size": size}
            )
            for key, value in options.items():
                conf.main.options[key] = value
            conf.pending, conf.snapshots = Section(), {}
            _write_conf(node, vmid, conf)
        except BaseException:
            shutil.rmtree(rootfs_dir, ignore_errors=True)
            raise
        log(f"CT {vmid} restored on node '{node.name}'")
