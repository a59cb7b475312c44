"""A sweep's price before it runs: candidates with their engine flags, restarts, runs,
and each run's price (:mod:`specops.bench.price`), with a time estimate.

Nothing here restarts or measures. The candidates are the space's, rendered by the
translator for the engine build (an invalid one is listed with the translator's reason
and never started); the search measures at most ``candidates_bound`` of them (every one
in a grid), each ``min_repeats`` runs and up to ``max_repeats`` while racing, beside no
speculation (``min_repeats`` runs, none when recorded plain results stand). Restarts:
one per candidate measured, one for no speculation unless recorded runs stand for it,
and one to leave the canary on the pick (or the base profile).

Time: the runs' (the bench price of one run, from the last run of that server, else the
roofline) plus the restarts' (the mean start seconds a previous sweep of that canary
recorded in its ledger, else not known).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.price import PlanPrice, price
from specops.bench.results import Results, load_results
from specops.errors import ValidationError
from specops.tune.config import SweepConfig
from specops.tune.plain import standing_plain

__all__ = ["SweepPrice", "last_sweep_run", "restart_seconds", "sweep_price"]


@dataclass
class SweepPrice:
    mode: str
    space: int  # candidates in the space
    measured_bound: int  # the most candidates the search measures (each a restart)
    max_progress_lines: int
    candidates: list[dict[str, Any]]  # key, profile, flags, invalid
    plain_recorded: int  # recorded plain runs that stand (no restart for no speculation)
    plain_runs: int
    min_repeats: int
    max_repeats: int
    run: PlanPrice  # one benchmark run
    restart_s: float | None  # seconds one restart takes, when a previous sweep says
    restart_basis: str
    notes: list[str] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        """At most: each candidate measured, no speculation (unless recorded), the end."""
        return self.measured_bound + (0 if self.plain_recorded else 1) + 1

    @property
    def runs_min(self) -> int:
        return self.measured_bound * self.min_repeats + self.plain_runs

    @property
    def runs_max(self) -> int:
        return self.measured_bound * self.max_repeats + self.plain_runs

    def run_seconds(self, runs: int) -> float | None:
        """The benchmark runs' time alone (recorded plain runs cost none)."""
        one = self.run.seconds
        return None if one is None else (runs - self.plain_recorded) * one

    def seconds(self, runs: int) -> float | None:
        """The runs' and the restarts' time; None when either is not known."""
        measured = self.run_seconds(runs)
        if measured is None or self.restart_s is None:
            return None
        return measured + self.restarts * self.restart_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "candidates": self.measured_bound,
            "space": self.space,
            "max_progress_lines": self.max_progress_lines,
            "candidate_flags": self.candidates,
            "restarts": self.restarts,
            "runs": [self.runs_min, self.runs_max],
            "plain_recorded": self.plain_recorded,
            "run": self.run.to_dict(),
            "restart_seconds": self.restart_s,
            "restart_basis": self.restart_basis,
            "seconds": [self.seconds(self.runs_min), self.seconds(self.runs_max)],
            "notes": self.notes,
        }


def restart_seconds(out: Path | None) -> tuple[float | None, str]:
    """The mean seconds of the restarts a previous sweep in ``out`` recorded."""
    ledger = out / "sweep.jsonl" if out is not None else None
    if ledger is None or not ledger.is_file():
        return None, "not known: no previous sweep's ledger (--out) to read restarts from"
    seconds = []
    for line in ledger.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        restart = event.get("restart") or {}
        if event.get("kind") == "run" and restart.get("restarted") and restart.get("seconds"):
            seconds.append(float(restart["seconds"]))
    if not seconds:
        return None, f"not known: {ledger} records no restart"
    return statistics.fmean(seconds), f"mean of {len(seconds)} restart(s) in {ledger}"


def last_sweep_run(out: Path | None) -> Results | None:
    """The newest results file under ``out/runs`` (a previous sweep's last run)."""
    if out is None or not (out / "runs").is_dir():
        return None
    files = sorted((out / "runs").glob("*/*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(files):
        try:
            return load_results(path)
        except ValidationError:
            continue
    return None


def sweep_price(
    cfg: SweepConfig,
    *,
    max_model_len: int | None = None,
    history: Results | None = None,
    out: Path | None = None,
) -> SweepPrice:
    """The sweep's price (see the module docstring); ValidationError naming the context
    length that does not fit ``max_model_len`` when the plan refuses it."""
    plan = cfg.bench_plan()
    history = history or last_sweep_run(out)
    limit = max_model_len or (history.server.max_model_len if history is not None else None)
    try:
        run = price(plan, max_model_len=limit, history=history)
    except ValidationError as exc:  # the sweep's plan section: say so
        raise ValidationError(f"plan.{exc.field}", exc.problem) from None
    candidates = []
    for assignment in cfg.space.grid():
        cand = cfg.space.candidate(assignment)
        candidates.append({"key": cand.key, "profile": cand.profile,
                           "flags": list(cand.argv), "invalid": cand.invalid})  # fmt: skip
    stand, refused = (
        standing_plain(
            list(cfg.plain.results), plan, max_age_days=cfg.plain.max_age_days,
            engine_version=cfg.space.engine.version,
        )
        if cfg.plain.results
        else ([], [])
    )  # fmt: skip
    notes = [f"plain.results: not used: {why}" for why in refused]
    if cfg.mode != "grid":
        notes.append(
            "ascent: the walk decides which candidates it measures; the counts are the most"
            f" it can (max_candidates {cfg.max_candidates or 'none: the whole space'})"
        )
    restart_s, restart_basis = restart_seconds(out)
    return SweepPrice(
        mode=cfg.mode,
        space=cfg.space.size(),
        measured_bound=cfg.candidates_bound(),
        max_progress_lines=cfg.progress_bound(),
        candidates=candidates,
        plain_recorded=len(stand),
        plain_runs=len(stand) or cfg.scoring.min_repeats,
        min_repeats=cfg.scoring.min_repeats,
        max_repeats=cfg.scoring.max_repeats,
        run=run,
        restart_s=restart_s,
        restart_basis=restart_basis,
        notes=notes,
    )
