"""The move: restart-mode migration within a cluster, vzdump + restore across clusters.

Resumable: the task's UPID is in the state file before the wait starts, so a re-run
after an interruption waits for that task instead of starting another; a CT already on
the target is not moved again. If the move fails, the CT is on the source and running
again when it ran before (PVE restarts it; if it did not, this starts it), and the error
says so with the task's log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from specops.errors import SpecopsError
from specops.migrate.client import PveClient, TaskResult
from specops.migrate.preflight import PreflightResult, ct_gpu_lines
from specops.migrate.spec import MigrationSpec
from specops.migrate.state import MigrationState

__all__ = ["MoveFailed", "MoveOutcome", "move"]

_ARCHIVE_RE = re.compile(r"creating vzdump archive '([^']+)'")


class MoveFailed(SpecopsError):
    """The move failed; ``where`` says where the CT is now and in which state."""

    def __init__(self, message: str, where: str, log: list[str]) -> None:
        self.where = where
        self.log = log
        tail = "\n".join(f"  {line}" for line in log[-40:])
        super().__init__(f"{message}; {where}" + (f"\ntask log:\n{tail}" if log else ""))


@dataclass
class MoveOutcome:
    action: str  # migrated | restored | recreate (by the next phase) | skipped
    message: str
    upid: str = ""
    target_start_failed: bool = False
    notes: list[str] = field(default_factory=list)


def _start_task(state: MigrationState, client: PveClient, node: str, upid: str, kind: str) -> None:
    entry = state.phase("move")
    entry["task"] = {
        "node": node,
        "upid": upid,
        "kind": kind,
        "api": "target" if kind == "restore" else "source",
    }
    state.save()


def _wait(
    spec: MigrationSpec, client: PveClient, node: str, upid: str, *, want_log: bool = False
) -> TaskResult:
    return client.wait_task(node, upid, timeout=spec.task_timeout, want_log=want_log)


def _shutdown(spec: MigrationSpec, client: PveClient, node: str) -> TaskResult:
    """Shut the CT down on ``node`` (forced after ``shutdown_timeout``) and wait for it."""
    upid = client.call(
        "POST",
        "/nodes/{node}/lxc/{vmid}/status/shutdown",
        {"node": node, "vmid": spec.vmid},
        timeout=spec.shutdown_timeout,
        forceStop=1,
    )
    return _wait(spec, client, node, str(upid))


def _restore(
    spec: MigrationSpec, tclient: PveClient, state: MigrationState, archive: str, storage: str
) -> tuple[str, TaskResult]:
    """Restore ``archive`` as the CT on the target (the task recorded first) and wait."""
    upid = str(
        tclient.call(
            "POST",
            "/nodes/{node}/lxc",
            {"node": spec.target},
            vmid=spec.vmid,
            ostemplate=archive,
            restore=1,
            storage=storage,
        )
    )
    _start_task(state, tclient, spec.target, upid, "restore")
    return upid, _wait(spec, tclient, spec.target, upid)


def _ensure_running_on_source(
    client: PveClient, spec: MigrationSpec, node: str, was_running: bool
) -> str:
    where = client.where_is(spec.vmid)
    if where is None:
        return f"CT {spec.vmid} is in no node of the cluster"
    now, status = where
    if now != node:
        return f"CT {spec.vmid} is on {now} ({status})"
    if status == "running" or not was_running:
        return f"CT {spec.vmid} stays on {node} ({status})"
    upid = client.call(
        "POST", "/nodes/{node}/lxc/{vmid}/status/start", {"node": node, "vmid": spec.vmid}
    )
    res = _wait(spec, client, node, str(upid))
    if res.ok:
        return f"CT {spec.vmid} stays on {node}, started again by specops"
    return f"CT {spec.vmid} stays on {node} but did NOT start again: {res.exitstatus}"


def _remove_recreated_mounts(
    spec: MigrationSpec, client: PveClient, state: MigrationState, node: str, pre: PreflightResult
) -> None:
    entry = state.phase("move")
    if not pre.recreate or entry.get("mounts_removed"):
        return
    where = client.where_is(spec.vmid)
    if where and where[1] == "running":
        res = _shutdown(spec, client, node)
        if not res.ok:
            raise MoveFailed(
                "shutdown before removing the mount points failed",
                f"CT {spec.vmid} on {node}",
                res.log,
            )
        entry["was_running"] = True
    entry["mounts_removed"] = dict(pre.recreate)
    state.save()
    client.call(
        "PUT",
        "/nodes/{node}/lxc/{vmid}/config",
        {"node": node, "vmid": spec.vmid},
        delete=",".join(pre.recreate),
    )


def _readd_mounts(spec: MigrationSpec, client: PveClient, state: MigrationState) -> list[str]:
    entry = state.phase("move")
    mounts: dict[str, str] = entry.get("mounts_removed") or {}
    if not mounts or entry.get("mounts_readded"):
        return []
    client.call(
        "PUT", "/nodes/{node}/lxc/{vmid}/config", {"node": spec.target, "vmid": spec.vmid}, **mounts
    )
    entry["mounts_readded"] = True
    state.save()
    return [f"re-added {', '.join(mounts)} on {spec.target}"]


def _migrate(
    spec: MigrationSpec, client: PveClient, state: MigrationState, pre: PreflightResult
) -> MoveOutcome:
    entry = state.phase("move")
    task = entry.get("task")
    where = client.where_is(spec.vmid)
    if where is None:
        raise MoveFailed(
            "the container vanished", f"CT {spec.vmid} is in no node of the cluster", []
        )
    source, status = where
    if task and source != spec.target:  # a previous run started a task: wait for it
        res = _wait(spec, client, task["node"], task["upid"])
        entry.pop("task", None)
        state.save()
        where = client.where_is(spec.vmid) or where
        source, status = where
    if source == spec.target:
        notes = _readd_mounts(spec, client, state)
        return MoveOutcome(
            "skipped", f"CT {spec.vmid} is already on {spec.target} ({status})", notes=notes
        )
    was_running = bool(entry.get("was_running")) or status == "running"
    entry["was_running"] = was_running
    entry["source"] = source
    state.save()
    _remove_recreated_mounts(spec, client, state, source, pre)
    status = (client.where_is(spec.vmid) or where)[1]
    params: dict[str, Any] = {"target": spec.target}
    if status == "running":
        params.update(restart=1, timeout=spec.shutdown_timeout)
    if spec.target_storage:
        params["target-storage"] = spec.target_storage
    upid = str(
        client.call(
            "POST",
            "/nodes/{node}/lxc/{vmid}/migrate",
            {"node": source, "vmid": spec.vmid},
            **params,
        )
    )
    _start_task(state, client, source, upid, "migrate")
    res = _wait(spec, client, source, upid)
    entry.pop("task", None)
    entry["upid"] = upid
    state.save()
    now = client.where_is(spec.vmid)
    if now is not None and now[0] == spec.target:
        notes = _readd_mounts(spec, client, state)
        start_failed = not res.ok or (was_running and now[1] != "running")
        if start_failed:
            notes.append(
                f"moved, but the start on {spec.target} failed ({res.exitstatus}): "
                "expected when the "
                "target lacks the source's GPU device nodes; the GPU config is regenerated next"
            )
        return MoveOutcome(
            "migrated", f"CT {spec.vmid} moved {source} -> {spec.target}", upid, start_failed, notes
        )
    where_now = _ensure_running_on_source(client, spec, source, was_running)
    if entry.get("mounts_removed") and not entry.get("mounts_readded"):
        client.call(
            "PUT",
            "/nodes/{node}/lxc/{vmid}/config",
            {"node": source, "vmid": spec.vmid},
            **entry["mounts_removed"],
        )
        entry.pop("mounts_removed")
        state.save()
        where_now += "; its mount points are back"
    raise MoveFailed(f"migrate task {upid} failed: {res.exitstatus}", where_now, res.log)


def _backup_restore(
    spec: MigrationSpec,
    client: PveClient,
    tclient: PveClient,
    state: MigrationState,
    pre: PreflightResult,
) -> MoveOutcome:
    entry = state.phase("move")
    if tclient.where_is(spec.vmid) is not None and entry.get("restored"):
        return MoveOutcome("skipped", f"CT {spec.vmid} is already restored on {spec.target}")
    where = client.where_is(spec.vmid)
    if where is None:
        raise MoveFailed(
            "the container vanished", f"CT {spec.vmid} is not in the source cluster", []
        )
    source, status = where
    entry["source"] = source
    entry["was_running"] = bool(entry.get("was_running")) or status == "running"
    state.save()
    if not entry.get("archive"):
        if status == "running":  # stopped before the dump and kept stopped: one copy serves
            res = _shutdown(spec, client, source)
            if not res.ok:
                raise MoveFailed(
                    "shutdown before the backup failed",
                    _ensure_running_on_source(client, spec, source, True),
                    res.log,
                )
        upid = str(
            client.call(
                "POST",
                "/nodes/{node}/vzdump",
                {"node": source},
                vmid=str(spec.vmid),
                storage=spec.backup_storage,
                mode="stop",
                compress="zstd",
            )
        )
        _start_task(state, client, source, upid, "vzdump")
        res = _wait(spec, client, source, upid, want_log=True)
        archive = next(
            (m.group(1) for line in res.log for m in [_ARCHIVE_RE.search(line)] if m), ""
        )
        if not res.ok or not archive:
            where_now = _ensure_running_on_source(client, spec, source, bool(entry["was_running"]))
            raise MoveFailed(f"vzdump task {upid} failed: {res.exitstatus}", where_now, res.log)
        entry["archive"] = f"{spec.backup_storage}:backup/{archive.rsplit('/', 1)[-1]}"
        state.save()
    storage = spec.target_storage or pre.rootfs.split(":", 1)[0] or "local"
    upid, res = _restore(spec, tclient, state, entry["archive"], storage)
    if not res.ok:
        where_now = _ensure_running_on_source(client, spec, source, bool(entry["was_running"]))
        raise MoveFailed(f"restore task {upid} failed: {res.exitstatus}", where_now, res.log)
    entry["restored"] = True
    state.save()
    return MoveOutcome(
        "restored",
        f"CT {spec.vmid} restored on {spec.target} from {entry['archive']}; "
        f"the source copy on {source} is kept, stopped",
        upid,
    )


def _restore_from_backup(
    spec: MigrationSpec, tclient: PveClient, state: MigrationState, pre: PreflightResult
) -> MoveOutcome:
    """The source node is gone: restore its latest backup on the target
    (``POST /nodes/{target}/lxc`` with ``restore=1``). Resumable: a restore task of an
    interrupted run is waited for, not started again."""
    entry = state.phase("move")
    task = entry.get("task")
    res: TaskResult | None = None
    upid = str(entry.get("upid", ""))
    if task and task.get("kind") == "restore":
        res = _wait(spec, tclient, task["node"], task["upid"])
        upid = str(task["upid"])
    if tclient.where_is(spec.vmid) is None or (res is not None and not res.ok):
        upid, res = _restore(spec, tclient, state, pre.archive, pre.restore_storage)
        if not res.ok:
            raise MoveFailed(
                f"restore task {upid} failed: {res.exitstatus}",
                f"CT {spec.vmid} is not on {spec.target}; the backup {pre.archive} is unchanged",
                res.log,
            )
    entry.pop("task", None)
    entry.update(restored=True, archive=pre.archive, source=pre.source)
    config = tclient.ct_config(spec.target, spec.vmid)
    # The backup's GPU lines are the dead source's: the GPU phase cleans them up.
    entry["source_gpu_lines"] = ct_gpu_lines(config)
    # ... also for a re-run, whose preflight keeps the first one's findings
    state.phase("preflight")["source_gpu_lines"] = entry["source_gpu_lines"]
    notes = [
        f"{key} ({config[key]}): a local bind mount of {pre.source}, not in the backup"
        for key in sorted(config, key=lambda k: (len(k), k))
        if re.fullmatch(r"mp\d+", key)
        and str(config[key]).startswith("/")
        and "shared=1" not in str(config[key])
    ]
    entry["lost"] = notes
    state.save()
    return MoveOutcome(
        "restored",
        f"CT {spec.vmid} restored on {spec.target} from {pre.archive} ({pre.source} is gone)",
        upid,
        notes=notes,
    )


def move(
    spec: MigrationSpec,
    client: PveClient,
    state: MigrationState,
    pre: PreflightResult,
    *,
    target_client: PveClient | None = None,
) -> MoveOutcome:
    earlier = dict(state.phase("move"))
    with state.timed("move") as entry:
        if pre.recovery == "restore" and not pre.already_on_target:
            outcome = _restore_from_backup(spec, target_client or client, state, pre)
        elif pre.recovery == "recreate" and not pre.already_on_target:
            outcome = MoveOutcome(
                "recreate",
                f"CT {spec.vmid} is re-created on {spec.target} from the inventory "
                f"({spec.inventory_host}) by the next phase ({pre.source} is gone)",
            )
        elif pre.already_on_target and pre.recovery:
            outcome = MoveOutcome("skipped", f"CT {spec.vmid} is already on {spec.target}")
        elif spec.mode == "migrate":
            outcome = _migrate(spec, client, state, pre)
        else:
            outcome = _backup_restore(spec, client, target_client or client, state, pre)
        entry.update(
            action=outcome.action,
            message=outcome.message,
            notes=outcome.notes,
            target_start_failed=outcome.target_start_failed,
        )
    if outcome.action == "skipped" and earlier.get("action") in (
        "migrated",
        "restored",
        "recreate",
    ):
        # A re-run after the move: the report keeps the run that moved the CT.
        keep = ("seconds", "action", "message", "upid", "target_start_failed")
        entry.update({k: earlier[k] for k in keep if k in earlier})
        entry["notes"] = [*earlier.get("notes", []), f"re-run: {outcome.message}"]
        state.save()
    return outcome
