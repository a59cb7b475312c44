"""A refresh a host owes for files already changed: a marker written before the change,
removed after the refresh.

Ansible's handlers live in the controller's memory. A controller lost between the task
that changed ``/etc/modprobe.d`` and the handler that runs ``update-initramfs`` leaves the
change written but not applied (the next boot would not pin a VM's card to vfio-pci),
and the re-run finds every file as wanted and notifies nothing. The crash campaign found
exactly that (issue 31, host points 165 and 166). The marker closes the gap: a role
writes it (:func:`owe`) before the files whose refresh it records, every run reads it
(:func:`query`), and the handler removes it (:func:`settle`) once the refresh ran; a run
that finds one left by an earlier run does the refresh. A role that does not know
whether its files will change names them with their wanted text (``files``): the
refresh is owed only when one does not hold it yet (:func:`holds`). Stdlib only (it
runs on the managed host).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic

__all__ = ["STATES", "Outcome", "apply", "holds", "owe", "query", "settle"]

STATES = ("owed", "query", "settled")
MARKER_MODE = 0o644


@dataclass(frozen=True)
class Outcome:
    changed: bool  # the marker was written or removed (or would be, in check mode)
    owed: bool  # the refresh is owed after this step
    was_owed: bool  # the marker was there before: a run stopped before its refresh


def query(path: str) -> Outcome:
    """Whether the refresh behind ``path`` is owed; changes nothing."""
    there = os.path.lexists(path)
    return Outcome(changed=False, owed=there, was_owed=there)


def holds(files: Mapping[str, str]) -> bool:
    """Whether every file holds its wanted text already (a missing or unreadable one does
    not): then writing them changes nothing, and no refresh is owed for them."""
    for name, text in files.items():
        try:
            with open(name, encoding="utf-8", newline="") as fh:
                if fh.read() != text:
                    return False
        except (OSError, UnicodeDecodeError):
            return False
    return True


def owe(path: str, reason: str, *, check_mode: bool = False) -> Outcome:
    """Record the refresh as owed before its files change (its folder made as needed).

    A marker already there is left as it is: its text names the run that first owed it.
    """
    if not reason.strip():
        raise ValueError("reason: say which files change and which command is owed")
    before = query(path)
    if before.owed:
        return before
    if not check_mode:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        write_atomic(path, reason.rstrip("\n") + "\n", MARKER_MODE)
    return Outcome(changed=True, owed=True, was_owed=False)


def settle(path: str, *, check_mode: bool = False) -> Outcome:
    """The refresh ran: remove the marker (absent already: nothing to do)."""
    before = query(path)
    if before.owed and not check_mode:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return Outcome(changed=before.owed, owed=False, was_owed=before.was_owed)


def apply(
    path: str,
    state: str,
    reason: str = "",
    *,
    files: Mapping[str, str] | None = None,
    check_mode: bool = False,
) -> Outcome:
    """The module's step: ``state`` is one of :data:`STATES`; with ``files`` (path: wanted
    text), ``owed`` owes the refresh only when one of them does not hold its text yet."""
    for name in [path, *(files or {})]:
        if not os.path.isabs(name):
            raise ValueError(f"path, files: absolute paths are needed, not {name!r}")
    if state == "owed" and files is not None and holds(files):
        return query(path)
    if state == "owed":
        return owe(path, reason, check_mode=check_mode)
    if state == "settled":
        return settle(path, check_mode=check_mode)
    if state == "query":
        return query(path)
    raise ValueError(f"state: one of {', '.join(STATES)}, not {state!r}")
