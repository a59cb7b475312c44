"""Migration of a container between lab nodes, as pve-container migrates (restart mode).

pve-guest-common ``src/PVE/AbstractMigrate.pm`` ``migrate`` drives pve-container
``src/PVE/LXC/Migrate.pm`` ``prepare``/``phase1``/``phase3``/``final_cleanup``
(commits in :data:`specops_lab.pve_schema.UPSTREAM`); see :func:`ct_migrate`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from specops.errors import SpecopsError
from specops_lab.pve.conf import (
    GuestConf,
    parse_volume,
)
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.pct import (
    Log,
    PveError,
    _check_lock,
    _nolog,
    _parse_or_die,
    _running,
    _shutdown_locked,
    _start_locked,
    _write_conf,
    ct_lock,
    ct_start,
    load_ct_conf,
)

__all__ = ["ct_migrate"]


def _migration_volumes(
    source: Node, dest: Node, conf: GuestConf, running: bool, restart: bool
) -> list[tuple[str, str]]:
    """Migrate.pm ``prepare``: every mount point of ``foreach_volume_full``
    (``include_unused``); a bind/device one needs ``shared``; volumes on local storages
    move, the storage must allow ``rootdir`` on both nodes."""
    keys = ["rootfs", *[f"mp{n}" for n in conf.indexed("mp")]]
    keys += [f"unused{n}" for n in conf.indexed("unused")]
    out: list[tuple[str, str]] = []
    for key in keys:
        value = conf.get(key)
        if value is None:
            continue
        mount = _parse_or_die(parse_volume, key, value)
        if mount["type"] != "volume":
            if mount.get("shared"):
                continue
            raise PveError(f"cannot migrate local {mount['type']} mount point '{key}'")
        volid = str(mount.get("volume") or "")
        if not volid:
            raise PveError(f"missing volume for mount point '{key}'")
        sid = volid.split(":", 1)[0]
        if "rootdir" not in source.storage(sid).content:
            raise PveError(f"content type 'rootdir' is not available on storage '{sid}'")
        if source.storage(sid).shared:
            continue
        if running and not restart:
            raise PveError(f"unable to migrate local mount point '{volid}' while CT is running")
        if "rootdir" not in dest.storage(sid).content:
            raise PveError(f"{volid}: content type 'rootdir' is not available on storage '{sid}'")
        out.append((key, volid))
    return out


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
    """Restart-mode migration to another node (pve-guest-common AbstractMigrate.pm
    ``migrate`` with pve-container Migrate.pm ``prepare``/``phase1``/``phase3``/
    ``final_cleanup``): under the CT lock, ``check_lock``; a running CT needs ``restart``
    and is shut down (no kill: "container did not stop" when it will not); ``lock:
    migrate`` is written; local volumes and the conf move to the target's root; then
    ``pct unlock`` and, if it ran, ``pct start`` on the target. A failure before the conf
    moved: the lock is removed, the CT restarted on the source, the task fails with
    "migration aborted". A failure after (e.g. the start on the target): "migration
    problems", the CT stays on the target."""
    dest = cluster.node(target)
    started = time.monotonic()

    def duration() -> str:
        secs = int(time.monotonic() - started)
        return f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"

    conf_migrated = was_running = False
    problems = False
    with ct_lock(source, vmid):
        moved: list[tuple[Path, Path]] = []
        try:
            conf, _ = load_ct_conf(source, vmid)  # prepare
            _check_lock(conf)
            was_running = _running(source, vmid)
            if was_running and online:
                raise PveError("lxc live migration is currently not implemented")
            if was_running and not restart:
                raise PveError("running container can only be migrated in restart mode")
            if dest.ct_conf(vmid).exists() or dest.vm_conf(vmid).exists():
                raise PveError(f"guest {vmid} already exists on node '{dest.name}'")
            volumes = _migration_volumes(source, dest, conf, was_running, restart)
            if was_running:
                log(f"shutdown CT {vmid}")
                _shutdown_locked(source, vmid, log, timeout=timeout, force_stop=False)
            log(f"starting migration of CT {vmid} to node '{dest.name}' (127.0.0.1)")  # phase1
            conf.main.options["lock"] = "migrate"
            _write_conf(source, vmid, conf)
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
            os.replace(source.ct_conf(vmid), dest.ct_conf(vmid))  # move_config_to_node
            conf_migrated = True
        except SpecopsError as exc:
            log(f"ERROR: {exc}")
            if moved or source.ct_conf(vmid).exists():
                log("aborting phase 1 - cleanup resources")
            for src, dst in reversed(moved):
                shutil.move(dst, src)
            if source.ct_conf(vmid).exists():  # final_cleanup before the conf moved
                log("start final cleanup")
                with contextlib.suppress(SpecopsError):
                    current, _ = load_ct_conf(source, vmid)
                    if current.get("lock") == "migrate":
                        current.main.options.pop("lock")
                        _write_conf(source, vmid, current)
                if restart and was_running:
                    log("start container on source node")
                    _start_locked(source, vmid, log, timeout=30, skiplock=True)
            log(f"ERROR: migration aborted (duration {duration()}): {exc}")
            raise PveError("migration aborted") from exc
        shutil.rmtree(source.lxcpath / source.lxc_name(vmid), ignore_errors=True)
    assert conf_migrated
    log("start final cleanup")
    with ct_lock(dest, vmid):  # pct unlock on the target
        moved_conf, _ = load_ct_conf(dest, vmid)
        moved_conf.main.options.pop("lock", None)
        _write_conf(dest, vmid, moved_conf)
    if restart and was_running:
        log("start container on target node")
        try:
            ct_start(dest, vmid, log)
        except SpecopsError as exc:
            log(f"ERROR: {exc}")
            problems = True
    if problems:
        log(f"ERROR: migration finished with problems (duration {duration()})")
        raise PveError("migration problems")
    log(f"migration finished successfully (duration {duration()})")
