"""A recorded run that stands for a new one: the same plan, the same server process.

A deploy re-run on a converged fleet restarts no server, so its smoke benchmark would
measure again what is already recorded (design: nothing re-measures what is recorded).
``specops bench run --reuse --server-instance ID`` asks first whether a run under
``--out`` already measured this plan against this very server process; when one did,
that run's results stand and nothing is sent to the server.

The server instance is an identity of the serving process that the caller knows and a
restart changes: the benchmark role passes the systemd ``InvocationID`` that the
service step has just read (a new one for every start, crash restarts included). A run
stands only when all of these hold, each refusal naming why:

- it recorded the same server instance (a run without one never stands);
- it finished (not interrupted) with every cell ``ok``, and with a HumanEval result
  when the plan asks for one;
- its plan is the plan given now, completed as the runner completes it (the model the
  server listed when the plan names none, context lengths clipped to the recorded
  ``max_model_len``).

The newest runs are read first (run ids sort by time), at most :data:`MAX_RUNS_READ`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from specops.bench.plan import Plan, changed_fields, complete
from specops.bench.results import Results, RunStore, load_results
from specops.errors import ValidationError

__all__ = ["MAX_RUNS_READ", "Standing", "find_standing", "last_run", "why_not"]

MAX_RUNS_READ = 20


@dataclass(frozen=True)
class Standing:
    """The answer of :func:`find_standing`: the run that stands (or None) and why not."""

    store: RunStore | None
    reason: str  # why the newest run does not stand ('' when one does)


def why_not(recorded: Results, plan: Plan, server_instance: str) -> str | None:
    """None when ``recorded`` stands for a run of ``plan`` against ``server_instance``;
    else the first reason it does not, in words."""
    return next(_refusals(recorded, plan, server_instance), None)


def _refusals(recorded: Results, plan: Plan, server_instance: str) -> Iterator[str]:
    name = recorded.run_id
    if not server_instance:
        yield "no server instance given"
    if recorded.server_instance != server_instance:
        was = recorded.server_instance or "none recorded"
        yield f"{name} measured server instance {was}, not {server_instance}"
    if recorded.finished_at is None or recorded.interrupted:
        yield f"{name} did not finish"
    if recorded.failed_cells:
        yield f"{name} has {len(recorded.failed_cells)} cell(s) with failures"
    if plan.humaneval.enabled and recorded.correctness is None:
        yield f"{name} has no HumanEval result and the plan asks for one"
    # The plan as the runner completed it against the recorded server (plan.complete).
    try:
        completed, _ = complete(plan, recorded.server.model, recorded.server.max_model_len)
    except ValidationError as exc:
        yield f"{name}'s server cannot take the plan: {exc}"
        return
    changed = changed_fields(recorded.plan, completed)
    if changed:
        yield f"{name} measured another plan (changed: {', '.join(changed)})"


def _header(run_dir: Path) -> Results | None:
    """The run's header (no cells), or None for a directory that is not a readable run."""
    try:
        data = orjson.loads((run_dir / "run.json").read_bytes())
        return Results.from_dict({**data, "cells": []})
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, ValidationError):
        return None


def find_standing(out: Path, plan: Plan, server_instance: str) -> Standing:
    """The newest run under ``out`` that stands for ``plan`` against ``server_instance``."""
    if not server_instance:
        raise ValidationError("--server-instance", "is required with --reuse")
    runs = sorted((d for d in out.iterdir() if d.is_dir()), reverse=True) if out.is_dir() else []
    first_reason = ""
    for run_dir in runs[:MAX_RUNS_READ]:
        store = RunStore(run_dir)
        header = _header(run_dir)
        if header is None or not store.results_path.is_file():
            continue
        # The header settles instance, plan and whether it finished; then the cells.
        reason = why_not(header, plan, server_instance)
        if reason is None:
            try:
                reason = why_not(load_results(store.results_path), plan, server_instance)
            except ValidationError as exc:
                reason = f"{run_dir.name}: {exc}"
        if reason is None:
            return Standing(store, "")
        first_reason = first_reason or reason
    return Standing(None, first_reason or f"no finished run under {out}")


def last_run(out: Path, base_url: str, model: str | None = None) -> Results | None:
    """The newest finished run under ``out`` of the server at ``base_url`` (serving
    ``model`` when given) with at least one ``ok`` cell: what a plan's time estimate
    reads (:mod:`specops.bench.price`). At most :data:`MAX_RUNS_READ` are read."""
    runs = sorted((d for d in out.iterdir() if d.is_dir()), reverse=True) if out.is_dir() else []
    for run_dir in runs[:MAX_RUNS_READ]:
        header = _header(run_dir)
        store = RunStore(run_dir)
        if header is None or not store.results_path.is_file():
            continue
        if header.server.base_url != base_url or (model and header.server.model != model):
            continue
        try:
            results = load_results(store.results_path)
        except ValidationError:
            continue
        if any(c.status == "ok" for c in results.cells):
            return results
    return None
