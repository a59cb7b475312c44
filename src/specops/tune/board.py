"""The leaderboard's figures: per candidate and per cell, each with its interval.

Read from the search's outcome, the ledger and the runs' results files (``runs/`` under
the sweep's output); nothing here measures. Per candidate: its ledger runs, the results
files of its good runs (a file the ledger names but the directory lacks is listed as
missing, never guessed), its restarts, the warm-up check (:mod:`specops.tune.warmup`),
HumanEval, the KV capacity its server reported, and where it stops paying over no
speculation (:func:`specops.bench.delta.crossover`). Per cell (concurrency, context):
output tok/s, speed-up over no speculation, TPOT and TTFT p50/p90, each with its 95 %
bootstrap interval over the requests of the candidate's runs pooled
(:mod:`specops.bench.intervals`; a percentile with too few requests is marked), and the
acceptance length and per-position rates (drafts-weighted over the runs). And, per
cell, which candidate to roll out for that load: the cheapest within noise of the best.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.delta import CellKey, Crossover, cell_boots, crossover, speedup
from specops.bench.intervals import CellBoot, Estimate, ratio_estimate
from specops.bench.results import Column, Results, load_results
from specops.errors import ValidationError
from specops.tune.ledger import Ledger, RunRecord
from specops.tune.objective import Objective
from specops.tune.predict import Point, Replay, depth_of, replay
from specops.tune.score import Scoring
from specops.tune.search import Outcome, Standing
from specops.tune.space import SearchSpace
from specops.tune.warmup import WarmupCheck, warmup_check

__all__ = [
    "CELL_COLUMNS",
    "CandidateRuns",
    "by_load",
    "cell_rows",
    "gather",
    "model_replay",
]


@dataclass
class CandidateRuns:
    """What the leaderboard knows of one candidate beyond its scores."""

    standing: Standing
    records: list[RunRecord] = field(default_factory=list)
    results: list[Results] = field(default_factory=list)  # its good runs' results
    missing: list[str] = field(default_factory=list)  # results files not found
    restarts: int = 0
    warmup: WarmupCheck | None = None
    boots: dict[CellKey, CellBoot] = field(default_factory=dict)
    crossover: list[Crossover] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.standing.candidate.key

    @property
    def humaneval(self) -> str | None:
        for results in reversed(self.results):
            c = results.correctness
            if c:
                return f"{c['passed']}/{c['problems']}"
        return None

    @property
    def capacity(self) -> str | None:
        """The KV capacity the server reported (max running requests, KV tokens)."""
        for results in reversed(self.results):
            cap = results.server.capacity
            if cap:
                parts = []
                if cap.get("max_running_requests") is not None:
                    parts.append(f"{cap['max_running_requests']} running")
                if cap.get("max_total_tokens") is not None:
                    parts.append(f"{int(cap['max_total_tokens']):,} tokens")
                return ", ".join(parts) or None
        return None

    @property
    def stops_paying(self) -> str | None:
        return "; ".join(x.text for x in self.crossover) or None


def _results(out: Path, record: RunRecord) -> tuple[Results | None, str | None]:
    if not record.results:
        return None, None
    path = out / record.results
    if not path.is_file():
        # a recorded plain run stands by its absolute path
        path = Path(record.results)
    if not path.is_file():
        return None, record.results
    try:
        return load_results(path), None
    except ValidationError as exc:
        return None, f"{record.results} ({exc})"


def gather(
    outcome: Outcome, ledger: Ledger, out: Path, objective: Objective, scoring: Scoring
) -> dict[str, CandidateRuns]:
    """Every candidate of the outcome with its runs, results, checks and cell figures."""
    loaded: dict[tuple[str, int], Results | None] = {}
    views: dict[str, CandidateRuns] = {}
    for key, st in outcome.standings.items():
        view = CandidateRuns(st)
        view.records = sorted(
            (r for (k, _), r in ledger.runs.items() if k == key), key=lambda r: r.repeat
        )
        for record in view.records:
            results, missing = _results(out, record)
            loaded[(key, record.repeat)] = results
            if missing:
                view.missing.append(missing)
            if results is not None and record.measurement.ok:
                view.results.append(results)
            if (record.restart or {}).get("restarted"):
                view.restarts += 1
        view.warmup = warmup_check(
            key, view.records, lambda r: loaded.get((r.key, r.repeat)), objective, scoring
        )
        view.boots = cell_boots(view.results)
        views[key] = view
    plain = views.get(outcome.plain.candidate.key) if outcome.plain is not None else None
    if plain is not None and plain.boots:
        for view in views.values():
            if view is not plain and view.boots:
                view.crossover = crossover(view.boots, plain.boots)
    return views


def _acceptance(results: list[Results], key: CellKey) -> tuple[float | None, list[float]]:
    """Acceptance length and per-position rates of a cell over runs, drafts-weighted."""
    cells = [
        c.acceptance
        for r in results
        for c in r.cells
        if (c.concurrency, c.context_tokens) == key and c.acceptance.mean_acceptance_length
    ]
    drafts = sum(a.drafts for a in cells)
    if not cells or drafts <= 0:
        return None, []
    length = sum(a.drafts * (a.mean_acceptance_length or 0.0) for a in cells) / drafts
    width = max(len(a.per_position) for a in cells)
    rates = [
        sum(a.drafts * (a.per_position[i] if i < len(a.per_position) else 0.0) for a in cells)
        / drafts
        for i in range(width)
    ]
    return length, rates


CELL_COLUMNS: tuple[Column, ...] = (
    Column("candidate", "candidate"),
    Column("concurrency", "C", 0),
    Column("context_tokens", "context", 0),
    Column("runs", "runs", 0, "runs pooled"),
    Column("requests", "requests", 0, "measured requests pooled"),
    Column("output_tok_s", "out tok/s", 1, "with its 95 % interval"),
    Column("speedup", "x none", 2, "out tok/s over no speculation's, with its interval"),
    Column("tpot_ms_p50", "TPOT p50 ms", 2),
    Column("tpot_ms_p90", "TPOT p90 ms", 2),
    Column("ttft_ms_p50", "TTFT p50 ms", 1),
    Column("ttft_ms_p90", "TTFT p90 ms", 1),
    Column("mean_acceptance_length", "accept len", 3),
    Column("per_position", "accept by position", 2, "rate at draft position 0, 1, ..."),
)
_ESTIMATES = ("output_tok_s", "tpot_ms_p50", "tpot_ms_p90", "ttft_ms_p50", "ttft_ms_p90")


def cell_rows(views: Mapping[str, CandidateRuns], plain_key: str | None) -> list[dict[str, Any]]:
    """One keyed row (:data:`CELL_COLUMNS`) per candidate and cell; estimates as
    :class:`~specops.bench.intervals.Estimate`."""
    plain = views.get(plain_key) if plain_key else None
    rows = []
    for view in views.values():
        for key, boot in view.boots.items():
            row: dict[str, Any] = {
                "candidate": view.key, "concurrency": key[0], "context_tokens": key[1],
                "runs": len(boot.cells), "requests": boot.requests,
            }  # fmt: skip
            for metric in _ESTIMATES:
                row[metric] = boot.estimate(metric)
            base = plain.boots.get(key) if plain is not None and plain is not view else None
            row["speedup"] = (
                speedup(boot, base) if base is not None else Estimate(None, short="no baseline")
            )
            length, rates = _acceptance(view.results, key)
            row["mean_acceptance_length"] = length
            row["per_position"] = rates
            rows.append(row)
    return rows


def by_load(
    views: Mapping[str, CandidateRuns], space: SearchSpace, plain_key: str | None
) -> list[dict[str, Any]]:
    """Per cell, the candidate to roll out for that load: the cheapest (no speculation
    first, then the space's order) whose output tok/s is within noise of the best one's
    (the interval of its ratio to the best reaches 1), with the best beside it. Only the
    cells no speculation measured too (a cell without it decides nothing)."""
    plain = views.get(plain_key) if plain_key else None
    keys = sorted(plain.boots) if plain is not None else []
    rows = []
    for key in keys:
        have = [(v, v.boots[key]) for v in views.values() if key in v.boots]
        scored = [(v, b, b.estimate("output_tok_s")) for v, b in have]
        scored = [(v, b, e) for v, b, e in scored if e.shown and v.standing.usable]
        if not scored:
            continue
        best_view, best_boot, best_est = max(scored, key=lambda x: x[2].value or 0.0)
        near = [
            (v, e)
            for v, b, e in scored
            if v is best_view
            or (
                (r := ratio_estimate(b, best_boot, "output_tok_s")).high is not None
                and r.high >= 1.0
            )
        ]

        def cost(item: tuple[CandidateRuns, Estimate]) -> tuple[int, tuple[int, ...]]:
            st = item[0].standing
            return (0, ()) if st.candidate.plain else (1, space.cost(st.candidate.assignment))

        pick, pick_est = min(near, key=cost)
        rows.append({
            "concurrency": key[0], "context_tokens": key[1],
            "pick": pick.key, "pick_tok_s": pick_est.value,
            "best": best_view.key, "best_tok_s": best_est.value,
            "within_noise": [v.key for v, _ in near if v is not pick],
        })  # fmt: skip
    return rows


def _run_acceptance(results: list[Results]) -> tuple[float | None, list[float], float]:
    """Acceptance length and per-position rates over every cell of the runs
    (drafts-weighted), and the drafts they rest on."""
    cells = [c.acceptance for r in results for c in r.cells if c.acceptance.drafts > 0]
    drafts = sum(a.drafts for a in cells)
    if not cells or drafts <= 0:
        return None, [], 0.0
    with_length = [a for a in cells if a.mean_acceptance_length]
    length = (
        sum(a.drafts * (a.mean_acceptance_length or 0.0) for a in with_length)
        / sum(a.drafts for a in with_length)
        if with_length
        else None
    )
    width = max(len(a.per_position) for a in cells)
    rates = [
        sum(a.drafts * (a.per_position[i] if i < len(a.per_position) else 0.0) for a in cells)
        / drafts
        for i in range(width)
    ]
    return length, rates, drafts


def _warm_median(view: CandidateRuns) -> float | None:
    """The candidate's median objective over its good runs, a warm-up-flagged first run
    left out."""
    skip = 0 if view.warmup is None or not view.warmup.flagged else 1
    values = [
        r.measurement.objective for r in view.records if r.measurement.ok and r.repeat >= skip
    ]
    return statistics.median(values) if values else None


def model_replay(
    views: Mapping[str, CandidateRuns],
    objective: Objective,
    scoring: Scoring,
    spread: float | None,
) -> Replay | str:
    """The depth model replayed on the sweep's recorded candidates
    (:func:`specops.tune.predict.replay`), or why it does not apply. Measured: each
    candidate's median over its good runs (a warm-up-flagged first run left out); the
    rates: the deepest candidate with per-position rates; the noise: the bootstrap over
    that candidate's requests, else the search's pooled spread."""
    if objective.kind == "goodput":
        return (
            "the model predicts tok/s objectives; goodput (a rate under latency limits) is measured"
        )
    points: dict[str, Point] = {}
    reference: tuple[int, float, str, list[float]] | None = None
    for view in views.values():
        st = view.standing
        if st.candidate.plain or not st.usable:
            continue
        depth = depth_of(st.candidate.profile)
        value = _warm_median(view)
        if depth is None or value is None or value <= 0:
            return f"{st.candidate.key} has no chain depth the model reads (a tree, or no runs)"
        length, rates, drafts = _run_acceptance(view.results)
        points[view.key] = Point(view.key, depth, value, length)
        if rates and (reference is None or (len(rates), drafts) > reference[:2]):
            reference = (len(rates), drafts, view.key, rates)
    if len({p.depth for p in points.values()}) < 2:
        return "fewer than two depths measured"
    if reference is None:
        return "no candidate's results carry per-position acceptance rates"
    ref_key, rates = reference[2], reference[3]
    noise = spread if spread is not None else scoring.min_gain
    samples = [s for r in views[ref_key].results if (s := objective.samples(r)) is not None]
    if samples:
        logs = [[math.log(v) for v in run if v > 0] for run in samples]
        noise = statistics.fmean(statistics.stdev(x) for x in logs if len(x) >= 2)
    return replay(points, ref_key, rates, noise, scoring.z)
