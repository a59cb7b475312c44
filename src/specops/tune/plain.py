"""No speculation as a candidate: the plain profile, and when a recorded plain run stands.

Speculation can lose: on one H200, vLLM 0.20.1 served a 1B model at 507 output tok/s
at C=1 without speculation, 234 with ngram (k=4) and 136 with a draft model (k=3)
(``../shared/gpu-device``, 2026-12-02; vLLM turns async scheduling off with them). So
the sweep measures method ``none`` beside its candidates and the rollout compares a new
profile with the node's plain baseline as well as with its previous profile.

A plain measurement costs a restart onto the plain server. Nothing re-measures what is
recorded (:mod:`specops.bench.reuse` for the same rule within one server process): a
recorded ``specops bench`` results document stands for the plain server when all of
these hold, each refusal naming why (:func:`why_not_plain`):

- it finished (not interrupted) with every cell ``ok``;
- it measured the plan given now (the same fields, as the runner completed them against
  the recorded server; aside the ``roofline`` inputs, which only the report reads, and
  ``humaneval``, whose pass runs after the cells and changes none of their numbers);
- it measured the same served model and, when both are known, the same engine version
  (a local build suffix such as ``+cpu`` aside);
- it is recent: created at most ``max_age_days`` ago (a driver, engine or kernel update
  moves the plain speed as much as a speculative setting does);
- it shows no speculation: no cell accepted a drafted token (a server that exports
  speculative counters but drafts nothing reports acceptance length 1.0) and the
  server's speculative config, when it was read back, is empty.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from specops.bench.plan import Plan, changed_fields, complete
from specops.bench.results import Results, load_results
from specops.errors import ValidationError

__all__ = [
    "DEFAULT_MAX_AGE_DAYS",
    "PLAIN_KEY",
    "PLAIN_PROFILE",
    "is_plain",
    "standing_plain",
    "why_not_plain",
]

PLAIN_KEY: Final = "none"
PLAIN_PROFILE: Final[Mapping[str, Any]] = {"method": "none"}
DEFAULT_MAX_AGE_DAYS: Final = 7.0
# Plan fields that change nothing the cells measure: the report's roofline inputs, and
# the HumanEval pass (run after the cells).
_REPORT_ONLY: Final = frozenset({"roofline", "humaneval"})


def is_plain(profile: Mapping[str, Any] | None) -> bool:
    """A profile without speculation (``None``, ``{}`` or ``method: none``)."""
    return not profile or str(profile.get("method") or "none") == "none"


def _same_version(recorded: str | None, wanted: str | None) -> bool:
    """Unknown on either side counts as the same; a local build suffix (``+cpu``) and a
    shorter pin (``0.32`` for ``0.32.0``) too."""
    if not recorded or not wanted:
        return True
    a, b = recorded.split("+")[0], wanted.split("+")[0]
    return a.startswith(b) or b.startswith(a)


def _created(recorded: Results) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(recorded.created_at)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _refusals(
    recorded: Results,
    plan: Plan,
    *,
    max_age_days: float,
    engine_version: str | None,
    now: dt.datetime,
) -> Iterator[str]:
    name = recorded.run_id
    if recorded.finished_at is None or recorded.interrupted:
        yield f"{name} did not finish"
    if not recorded.cells:
        yield f"{name} has no cells"
    if recorded.failed_cells:
        yield f"{name} has {len(recorded.failed_cells)} cell(s) with failures"
    try:
        completed, _ = complete(plan, recorded.server.model, recorded.server.max_model_len)
    except ValidationError as exc:
        yield f"{name}'s server cannot take the plan: {exc}"
        return
    changed = [f for f in changed_fields(recorded.plan, completed) if f not in _REPORT_ONLY]
    if changed:
        yield f"{name} measured another plan (changed: {', '.join(changed)})"
    if plan.model and recorded.server.model != plan.model:
        yield f"{name} measured model {recorded.server.model!r}, not {plan.model!r}"
    if not _same_version(recorded.server.engine_version, engine_version):
        yield f"{name} measured engine {recorded.server.engine_version}, not {engine_version}"
    created = _created(recorded)
    if created is None:
        yield f"{name} has no readable created_at ({recorded.created_at!r})"
    elif (now - created).total_seconds() > max_age_days * 86400:
        age = (now - created).total_seconds() / 86400
        yield f"{name} is {age:.1f} days old (max_age_days {max_age_days:g})"
    if recorded.server.speculative:
        yield f"{name} measured a speculative server ({recorded.server.speculative})"
    accepted = [c for c in recorded.cells if c.acceptance.accepted > 0]
    if accepted:
        yield f"{name} accepted drafted tokens in {len(accepted)} cell(s): the server speculated"


def why_not_plain(
    recorded: Results,
    plan: Plan,
    *,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    engine_version: str | None = None,
    now: dt.datetime | None = None,
) -> str | None:
    """None when ``recorded`` stands for a plain run of ``plan``; else the first reason
    it does not, in words (see the module docstring)."""
    if max_age_days <= 0:
        raise ValidationError("max_age_days", f"must be > 0 (got {max_age_days})")
    when = now or dt.datetime.now(dt.UTC)
    return next(
        _refusals(
            recorded, plan, max_age_days=max_age_days, engine_version=engine_version, now=when
        ),
        None,
    )


def standing_plain(
    paths: list[str] | list[Path],
    plan: Plan,
    *,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    engine_version: str | None = None,
    now: dt.datetime | None = None,
) -> tuple[list[tuple[Path, Results]], list[str]]:
    """The recorded plain runs among ``paths`` that stand (path, results), and why each
    other one does not (a missing or unreadable file is a reason, not an error)."""
    stand: list[tuple[Path, Results]] = []
    refused: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            refused.append(f"{path}: no such file")
            continue
        try:
            results = load_results(path)
        except ValidationError as exc:
            refused.append(f"{path}: {exc}")
            continue
        why = why_not_plain(
            results, plan, max_age_days=max_age_days, engine_version=engine_version, now=now
        )
        if why is None:
            stand.append((path, results))
        else:
            refused.append(f"{path}: {why}")
    return stand, refused
