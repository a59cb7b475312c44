"""A rolled-out node's verdict: which gate failed, what the rescue did, the node's record.

The role ``speculative_rollout`` runs the steps on the node and calls these through the
collection's filters (``specops.infra.rollout_failure``, ``rollout_restore``,
``rollout_record``); its Jinja keeps only text. Inputs are the role's registered
results as Ansible has them (a missing step is ``None``):

- :func:`failure`: in the rescue, the first step without a good result names the gate
  (``plain-baseline``: putting the node on no speculation or measuring it there, when
  the rollout measures the node's plain baseline; ``restart-readiness`` or
  ``output-gate``: the ``service_unit`` step with the new profile failed;
  ``smoke-benchmark``; ``re-enable``: the hook), with the message to
  keep (the smoke gate's own verdict when that gate failed) and whether the previous
  unit still has to be put back (a failed start was already undone by the step).
- :func:`restore`: after the rescue's restore step, the node's outcome (``restored``
  or ``restore-failed``), the record's message and the play's stop message.
- :func:`resume`: in the preflight, whether the node is done (its unit already renders
  the new profile, it answers, and the controller's record says it passed this
  profile's gates) and which unit a failure puts back: a rollout killed after it
  wrote the new unit and before the gates passed left the node on the new unit with
  no passing record; the re-run gates it, and the unit it ran before that change
  (``<unit>.previous``, kept by ``service_unit``) is what a failure restores.
- :func:`node_record`: the JSON record per node (``<report_dir>/<node>.json``) that
  ``specops rollout report`` and ``scripts/experiments/bench-rollout-overhead.py`` read
  (:func:`specops.tune.rollout.load_records`).

Stdlib only: the filters load in every Ansible process that templates them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "GATES",
    "OUTCOMES",
    "PASSED",
    "Failure",
    "Restore",
    "Resume",
    "failure",
    "node_record",
    "restore",
    "resume",
    "truncate",
]

# Outcomes of a node that passed every gate (its record names no failed gate).
PASSED = ("changed", "already-on-profile")
OUTCOMES = (*PASSED, "restored", "restore-failed")
# In the order the node meets them; "preflight" fails the play before anything changes.
GATES = (
    "preflight", "plain-baseline", "restart-readiness", "output-gate", "smoke-benchmark",
    "re-enable",
)  # fmt: skip
FAILURE_CHARS = 600  # the failure kept in the record and the stop message
RESTORE_CHARS = 400  # the restore step's own error, appended when it failed too


def truncate(text: str, length: int, *, end: str = "...", leeway: int = 5) -> str:
    """Jinja's ``truncate`` (word boundary, default leeway): what the records always had."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _plain(value: Any) -> Any:
    """Plain dicts and lists all the way down (Ansible hands in its own container types,
    which cannot be constructed directly, as :func:`dataclasses.asdict` would)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _json_out(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """A controller step's JSON verdict on stdout; {} for none (skipped, crashed, absent)."""
    out = _mapping(result).get("stdout") or ""
    if not isinstance(out, str) or not out.startswith("{"):
        return {}
    try:
        data = json.loads(out)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Failure:
    gate: str
    message: str
    # The service_unit result the record reads: the failed step's own for the
    # restart-readiness and output gates, else the change that succeeded.
    change: dict[str, Any]
    # The previous unit still has to be put back (service_unit had not already done it).
    restore_needed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _plain_failed(plain_needed: bool, plain: Mapping[str, Any] | None) -> bool:
    """The plain-baseline phase was needed and has no good result (its apply or its
    ``specops rollout plain`` step failed)."""
    if not plain_needed:
        return False
    if plain is None or plain.get("skipped"):
        return True
    return bool(plain.get("failed")) or plain.get("rc", 0) != 0


def failure(
    failed_result: Mapping[str, Any] | None,
    *,
    change: Mapping[str, Any] | None,
    smoke: Mapping[str, Any] | None,
    plain: Mapping[str, Any] | None = None,
    plain_needed: bool = False,
) -> Failure:
    """The rescue's verdict.

    ``failed_result``: ``ansible_failed_result``; ``change``: the ``service_unit`` result
    kept after the change step (None when that step failed); ``smoke``: the registered
    ``specops rollout smoke`` step (None when it never ran); ``plain``: the registered
    ``specops rollout plain`` step of a plain baseline measured in the rollout (None when
    it never ran), ``plain_needed``: whether the rollout measures one on the node.
    """
    failed = _mapping(failed_result)
    if change is None and _plain_failed(plain_needed, plain):
        message = str(_json_out(plain).get("message") or failed.get("msg", "failed"))
        return Failure(
            gate="plain-baseline",
            message=truncate(message, FAILURE_CHARS),
            change=_plain(failed),
            # a start that never got ready was undone by service_unit (restored)
            restore_needed=not failed.get("restored", False),
        )
    if change is None:
        gate_ok = _mapping(failed.get("output_gate")).get("ok", True)
        gate = "output-gate" if gate_ok is False else "restart-readiness"
    elif smoke is None or smoke.get("failed"):
        gate = "smoke-benchmark"
    else:
        gate = "re-enable"
    smoke_message = str(_json_out(smoke).get("message") or "")
    if gate == "smoke-benchmark" and smoke_message:
        message = smoke_message
    else:
        message = str(failed.get("msg", "failed"))
    kept = _plain(failed) if gate in ("restart-readiness", "output-gate") else _plain(change or {})
    return Failure(
        gate=gate,
        message=truncate(message, FAILURE_CHARS),
        change=kept,
        restore_needed=not failed.get("restored", False),
    )


@dataclass(frozen=True)
class Restore:
    ok: bool
    outcome: str  # "restored" or "restore-failed"
    message: str  # the record's
    stop_message: str  # the play's, when it stops the rollout
    restored: dict[str, Any]  # the result whose identity is the node's after the rescue

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def restore(
    restore_result: Mapping[str, Any],
    *,
    node: str,
    failure: Mapping[str, Any],
    record_path: str,
) -> Restore:
    """The node after the rescue's restore step (``restore_result``: its registered
    result, skipped when the failed start was already undone); ``failure``: what
    :func:`failure` returned (as a mapping)."""
    skipped = bool(restore_result.get("skipped"))
    ok = skipped or bool(restore_result.get("ready", False))
    kept = str(failure["message"])
    message = kept
    if not ok:
        why = truncate(str(restore_result.get("msg", "")), RESTORE_CHARS)
        message = f"{kept}; restoring the previous unit failed too: {why}"
    if ok:
        state = f"{node} runs its previous unit again and answers"
    else:
        state = (
            f"{node} could NOT be restored (its previous unit is in place but the"
            " server does not answer): it needs an operator"
        )
    stop = (
        f"rollout stopped at {node}: gate '{failure['gate']}' failed: {kept}. {state};"
        f" the nodes after it were not touched. Record: {record_path}"
    )
    return Restore(
        ok=ok,
        outcome="restored" if ok else "restore-failed",
        message=message,
        stop_message=stop,
        restored=_plain(failure["change"] if skipped else restore_result),
    )


@dataclass(frozen=True)
class Resume:
    done: bool  # on the new unit, answering, gated: recorded already-on-profile, skipped
    previous_text: str  # the unit a failure puts back
    message: str  # what the preflight says about the node ("" when nothing to say)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record(text: str | None) -> Mapping[str, Any]:
    try:
        found = json.loads(text or "null")
    except ValueError:
        return {}
    return found if isinstance(found, Mapping) else {}


def resume(
    probe: Mapping[str, Any],
    *,
    profile: Mapping[str, Any],
    record_text: str | None,
    kept_previous: str | None,
    record_path: str,
) -> Resume:
    """The node at the preflight of a rollout (see the module's doc).

    ``probe``: the check-mode ``service_unit`` result with the new profile (``written``:
    the unit's text would change; ``restarted``: the server would restart; ``stale``:
    the text stands but the server started before it was written; ``ready``;
    ``text_before``: the unit now); ``profile``: the validated new profile;
    ``record_text``: the node's record on the controller (None when it has none);
    ``kept_previous``: the node's ``<unit>.previous`` (None when absent).
    """
    now = str(probe.get("text_before") or "")
    on_text = not probe.get("written")
    stale = bool(probe.get("stale"))
    record = _record(record_text)
    gated = record.get("outcome") in PASSED and record.get("profile") == _plain(profile)
    if not on_text or (gated and not stale):
        # a change to make, or a node that passed this profile's gates before: done
        # when it runs this unit and answers; else its gates run again and a failure
        # puts back what it runs
        done = on_text and not probe.get("restarted") and bool(probe.get("ready"))
        return Resume(done, now, "")
    before = kept_previous if kept_previous and kept_previous != now else now
    kept = (
        "the unit it ran before (kept beside it as .previous)"
        if before != now
        else "its current unit (no earlier one is kept)"
    )
    why = (
        "its server started before that unit was written (a run stopped before the"
        " restart?): it is restarted onto it and gated"
        if stale
        else f"no record at {record_path} says it passed this profile's gates (a rollout"
        " stopped after writing the unit?): its gates run now"
    )
    return Resume(
        False, before, f"the unit already renders the new profile but {why}, and a failure"
        f" puts back {kept}",
    )  # fmt: skip


def node_record(
    node: str,
    *,
    outcome: str,
    message: str,
    profile: Mapping[str, Any] | None,
    previous_profile: Mapping[str, Any] | None,
    started_at: str,
    t0: float | str,
    probe: Mapping[str, Any],
    change: Mapping[str, Any] | None = None,
    failure: Mapping[str, Any] | None = None,
    restore: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
    smoke: Mapping[str, Any] | None = None,
    plain: Mapping[str, Any] | None = None,
    plain_change: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The node's record (keys as :func:`specops.tune.rollout.load_records` reads them).

    ``t0``: when the node's rollout began (epoch seconds); ``probe``: the preflight's
    ``service_unit`` result (identity before); ``change``: the change's ``service_unit``
    result (engine times, identity after); ``failure`` and ``restore``: what
    :func:`failure` and :func:`restore` returned, in a rescue (then the failed gate,
    the failure's change result and the identity after the rescue count);
    ``baseline``, ``plain`` (the node's plain baseline: checked or measured, when not by
    the baseline step, whose answer then carries it as ``plain``) and ``smoke``: the
    registered controller steps (their JSON verdicts on stdout). A step that never ran
    is None. ``plain_change``: the ``service_unit`` result that put the
    node on no speculation for that measurement (None: not switched). ``plain_s`` is
    what the plain baseline cost in this rollout: the switch (stop, start to healthy,
    first generation, output gate) and the benchmark (0 when a recorded one stood);
    ``against_plain`` the smoke step's comparison with it (None: not compared).
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome: must be one of {', '.join(OUTCOMES)} (got {outcome!r})")
    gate = None
    if failure is not None:
        change, gate = _mapping(failure.get("change")), failure.get("gate")
    change_ = _mapping(change)
    final = _mapping(restore.get("restored")) if restore is not None else change_
    base = _json_out(baseline)
    smoke_ = _json_out(smoke)
    # measured or checked in the baseline step's process (auto), else its own step
    plain_ = _json_out(plain) or _mapping(base.get("plain"))
    switch = _mapping(plain_change)
    switch_s = sum(
        float(switch.get(k) or 0)
        for k in ("stop_seconds", "start_to_healthy_seconds", "ready_seconds")
    ) + float(_mapping(switch.get("output_gate")).get("seconds") or 0)
    elapsed = (time.time() if now is None else now) - float(t0)
    return {
        "node": node,
        "outcome": outcome,
        "failed_gate": None if outcome in PASSED else gate,
        "message": message,
        "profile": profile,
        "previous_profile": previous_profile,
        "started_at": started_at,
        "rollout_s": round(elapsed * 100, 0) / 100,
        "restarted": change_.get("restarted", False),
        "engine_stop_s": change_.get("stop_seconds"),
        "engine_start_to_healthy_s": change_.get("start_to_healthy_seconds"),
        "ready_s": change_.get("ready_seconds"),
        "output_gate_s": _mapping(change_.get("output_gate")).get("seconds"),
        "baseline_s": base.get("seconds", 0),
        "plain_s": round(float(plain_.get("seconds", 0)) + switch_s, 2),
        "plain_baseline": plain_.get("plain"),
        "against_plain": smoke_.get("plain"),
        "smoke_s": smoke_.get("seconds", 0),
        "smoke_results": smoke_.get("results"),
        "service_before": probe.get("before"),
        "service_after": final.get("after", probe.get("before")),
    }
