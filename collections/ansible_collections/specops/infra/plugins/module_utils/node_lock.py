"""The node lock: one specops run at a time changes a node or its serving containers.

Two runs on one node fight: two profile changes restart the same server at once and
both fail, a rollout restarts what a deploy is gating, a reboot lands in a readiness
gate. Every playbook that changes a node (host, container, serve, speculative-apply,
rollout, migrate, router, the sweep) holds the node's lock for its span. The lock is a
record on the node itself (:data:`LOCK_PATH` under the node's root), readable by an
operator with ``cat``::

    {"held": true,
     "holder": {"id": "ctl-1:4242:1733480000", "controller": "ctl-1", "user": "ops",
                "pid": 4242, "playbook": "rollout.yml", "run_started_at": "..."},
     "since": "...", "renewed_at": "...", "expires_at": "...", "lease_s": 300,
     "previous": {... the holder before, and how it ended ...}}

It is a **lease**: the holder's run renews it while it runs (the controller's action
plugin, ``plugins/action/node_lock.py``); a controller that dies stops renewing, the
lease runs out and the next run takes the lock over, saying from whom. A run from the
same controller host need not wait for that: the controller can see that the holder's
process is gone, and takes it over at once (``take_over_from``, checked by the action).
Every decision is :func:`decide`'s, a pure function of the record, the asking holder
and the node's clock (the node's clock alone: the controller's may differ), so that it
is tested without a node. Reading and writing the record happen under an exclusive
``flock`` of ``<record>.flock`` (:func:`file_lock.flock_within`), so two runs asking at
the same instant get one answer each, never both the lock.

Stdlib only (it runs on the node).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.file_lock import flock_within

__all__ = [
    "LOCK_PATH",
    "STATES",
    "Decision",
    "LockError",
    "Outcome",
    "acquire",
    "decide",
    "describe",
    "lock_path",
    "query",
    "read_record",
    "release",
    "renew",
]

# Where the record lives on the node (under its root): persistent across the node's
# reboots (host.yml reboots a node while it holds the lock), never under /run.
LOCK_PATH = "var/lib/specops/lock/node.json"
STATES = ("acquired", "renewed", "released", "query")
RECORD_MODE = 0o644  # holder names and times only; an operator reads it
FLOCK_TIMEOUT_S = 30.0  # the record's read-modify-write is milliseconds


class LockError(RuntimeError):
    """The lock could not be had, or is no longer this holder's; the message names the
    holder and what to do."""

    def __init__(self, message: str, record: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = dict(record or {})


def lock_path(root: str = "/") -> str:
    """The record's path under the node's root (``/`` in production, the node tree in
    the lab)."""
    return os.path.join(root or "/", LOCK_PATH)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _num(value: object, default: float = 0.0) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def describe(holder: Mapping[str, Any]) -> str:
    """One line naming a holder: ``ops@ctl-1 (rollout.yml, pid 4242)``."""
    who = f"{holder.get('user') or '?'}@{holder.get('controller') or '?'}"
    what = holder.get("playbook") or "?"
    return f"{who} ({what}, pid {holder.get('pid') or '?'})"


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` makes of a request for the lock."""

    take: bool  # the asker holds the lock after this (new, renewed or taken over)
    new: bool  # it did not hold it before (a renewer is started for it)
    taken_over: dict[str, Any] | None = None  # the previous holder, when taken over
    why: str = ""  # how it went: "free", "held by this run", "lease expired ...", ...


def _held(record: Mapping[str, Any]) -> bool:
    return bool(record.get("held")) and isinstance(record.get("holder"), Mapping)


def decide(
    record: Mapping[str, Any],
    holder: Mapping[str, Any],
    now: float,
    *,
    take_over_from: str | None = None,
) -> Decision:
    """Whether ``holder`` gets the lock that ``record`` describes, at the node's ``now``.

    Free (no record, or released): taken. Held by the same holder id: renewed (a run
    takes it at every play; a nested run of the sweep shares the sweep's id). Held by
    another whose lease ran out (``expires_at`` past): taken over. Held by another whose
    id is ``take_over_from``: taken over (the controller saw that holder's process gone).
    Otherwise not taken.
    """
    if not _held(record):
        return Decision(take=True, new=True, why="free")
    current = dict(record["holder"])
    if current.get("id") == holder.get("id"):
        return Decision(take=True, new=False, why="held by this run")
    expires = _num(record.get("expires_at"))
    if expires <= now:
        late = now - expires
        return Decision(
            take=True, new=True, taken_over=current,
            why=f"its lease expired {late:.0f} s ago ({_iso(expires)}): its run stopped"
            " renewing it",
        )  # fmt: skip
    if take_over_from and current.get("id") == take_over_from:
        return Decision(
            take=True, new=True, taken_over=current,
            why=f"its run (pid {current.get('pid')}) is gone from {current.get('controller')}",
        )  # fmt: skip
    return Decision(take=False, new=False, why=f"held by {describe(current)}")


@dataclass
class Outcome:
    """What a call did; ``record`` is the record after it (as on the node)."""

    held: bool  # the asker holds the lock after this call
    acquired_now: bool = False  # it did not hold it before this call
    taken_over: dict[str, Any] | None = None
    message: str = ""
    record: dict[str, Any] = field(default_factory=dict)
    waited_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_record(path: str) -> dict[str, Any]:
    """The record at ``path``; {} when there is none (never an error for a bad file:
    an unreadable record counts as free and is replaced, and the outcome says so)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {"unreadable": True}
    return data if isinstance(data, dict) else {"unreadable": True}


def _write(path: str, record: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", RECORD_MODE)


def _ending(record: Mapping[str, Any], how: str, now: float) -> dict[str, Any]:
    """The record's holder as the next record's ``previous``."""
    return {
        "holder": dict(record.get("holder") or {}),
        "since": record.get("since"),
        "ended": how,
        "ended_at": _iso(now),
    }


def _granted(
    record: Mapping[str, Any], holder: Mapping[str, Any], decision: Decision, lease: float,
    now: float,
) -> dict[str, Any]:  # fmt: skip
    if decision.new:
        how = "taken over: " + decision.why if decision.taken_over else "released"
        previous = _ending(record, how, now) if _held(record) else record.get("previous")
        return {
            "held": True,
            "holder": dict(holder),
            "since": _iso(now),
            "since_epoch": now,
            "renewed_at": _iso(now),
            "expires_at": now + lease,
            "expires": _iso(now + lease),
            "lease_s": lease,
            "previous": previous,
        }
    out = dict(record)
    out.update(
        renewed_at=_iso(now), expires_at=now + lease, expires=_iso(now + lease), lease_s=lease
    )
    return out


def _check_holder(holder: Mapping[str, Any]) -> None:
    if not str(holder.get("id") or ""):
        raise ValueError("holder.id: must name the run (controller:pid:start)")


def acquire(
    path: str,
    holder: Mapping[str, Any],
    *,
    lease: float,
    wait: float = 0.0,
    poll: float = 1.0,
    take_over_from: str | None = None,
    check_mode: bool = False,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Take (or renew) the lock for ``holder``, waiting up to ``wait`` seconds while
    another holds it; :class:`LockError` naming the holder after that. In check mode
    nothing is written and nothing waited for: the outcome says whether the lock would
    be had now (``held``) and, when not, who holds it (``message``)."""
    _check_holder(holder)
    if lease <= 0:
        raise ValueError(f"lease: must be > 0 seconds (got {lease:g})")
    start = clock()
    while True:
        with flock_within(path + ".flock", FLOCK_TIMEOUT_S):
            record = read_record(path)
            now = clock()
            decision = decide(record, holder, now, take_over_from=take_over_from)
            if check_mode:  # nothing written, nothing waited for: would it be had now?
                return Outcome(
                    held=decision.take, acquired_now=decision.take and decision.new,
                    taken_over=decision.taken_over,
                    message=_take_message(decision) if decision.take
                    else _busy_message(record, now),
                    record=record,
                )  # fmt: skip
            if decision.take:
                new = _granted(record, holder, decision, lease, now)
                _write(path, new)
                return Outcome(
                    held=True, acquired_now=decision.new, taken_over=decision.taken_over,
                    message=_take_message(decision), record=dict(new),
                    waited_s=round(now - start, 1),
                )  # fmt: skip
        waited = clock() - start
        if waited >= wait:
            raise LockError(_busy_message(record, now), record)
        sleep(min(poll, max(wait - waited, 0.0)))


def _take_message(decision: Decision) -> str:
    if decision.taken_over is not None:
        return f"took the lock over from {describe(decision.taken_over)}: {decision.why}"
    return "held by this run already" if not decision.new else "free: taken"


def _busy_message(record: Mapping[str, Any], now: float) -> str:
    holder = dict(record.get("holder") or {})
    left = _num(record.get("expires_at")) - now
    return (
        f"held by {describe(holder)} since {record.get('since')}; its lease runs"
        f" {left:.0f} s more unless its run renews it"
    )


def renew(
    path: str, holder_id: str, *, lease: float, clock: Callable[[], float] = time.time
) -> Outcome:
    """Extend the lease of ``holder_id``'s lock; :class:`LockError` when the lock is no
    longer its (released, or taken over after its lease ran out)."""
    with flock_within(path + ".flock", FLOCK_TIMEOUT_S):
        record = read_record(path)
        now = clock()
        holder = dict(record.get("holder") or {})
        if not _held(record) or holder.get("id") != holder_id:
            who = describe(holder) if _held(record) else "nobody (released)"
            raise LockError(f"the lock is no longer this run's: now held by {who}", record)
        new = _granted(record, holder, Decision(take=True, new=False), lease, now)
        _write(path, new)
        return Outcome(held=True, message="lease renewed", record=new)


def release(
    path: str,
    holder_id: str,
    *,
    check_mode: bool = False,
    clock: Callable[[], float] = time.time,
) -> Outcome:
    """Release ``holder_id``'s lock (the record stays, ``held: false``, naming who held
    it last). A lock that is not its is left as it is and the outcome says so."""
    with flock_within(path + ".flock", FLOCK_TIMEOUT_S):
        record = read_record(path)
        holder = dict(record.get("holder") or {})
        if not _held(record) or holder.get("id") != holder_id:
            who = describe(holder) if _held(record) else "nobody"
            message = f"not this run's lock (held by {who})"
            return Outcome(held=False, message=message, record=record)
        now = clock()
        new = {
            "held": False,
            "previous": _ending(record, "released", now),
        }
        if not check_mode:
            _write(path, new)
        return Outcome(held=False, message="released", record=new)


def query(path: str, *, clock: Callable[[], float] = time.time) -> Outcome:
    """Who holds the lock, read only. ``message`` says it in one line ('' when free)."""
    record = read_record(path)
    if not _held(record):
        return Outcome(held=False, record=record)
    now = clock()
    holder = dict(record["holder"])
    left = _num(record.get("expires_at")) - now
    state = (
        f"its lease runs {left:.0f} s more" if left > 0
        else f"its lease expired {-left:.0f} s ago (a run that died: the next run takes it over)"
    )  # fmt: skip
    return Outcome(
        held=left > 0,
        message=f"locked by {describe(holder)} since {record.get('since')}; {state}",
        record=record,
    )
