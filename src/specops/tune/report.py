"""Sweep outputs: leaderboard (Markdown, CSV), objective plot (PNG), inventory snippet.

Read from the outcome, the ledger and the runs' results; nothing here measures. The
text is ``templates/sweep/leaderboard.md.j2`` and ``templates/sweep/chosen-profile.yml.j2``;
this module hands them keyed rows (:data:`COLUMNS`, :data:`specops.tune.board.CELL_COLUMNS`)
and numbers. The leaderboard decides: per candidate its score and interval, the
first-vs-second-run ratio (warm-up), restarts, HumanEval, KV capacity and where it stops
paying over no speculation; per cell the figures with their intervals
(:mod:`specops.tune.board`); per load the profile to roll out.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import statistics
from pathlib import Path
from typing import Any

import yaml

from specops.bench.intervals import Estimate
from specops.bench.report import roofline_context
from specops.bench.results import Column, load_results
from specops.errors import ValidationError
from specops.plots import pyplot
from specops.templating import render
from specops.tune.board import (
    CELL_COLUMNS,
    CandidateRuns,
    by_load,
    cell_rows,
    gather,
    model_replay,
)
from specops.tune.config import SweepConfig
from specops.tune.ledger import Ledger
from specops.tune.search import Outcome, Standing, standings

__all__ = [
    "COLUMNS",
    "cells_csv",
    "leaderboard_csv",
    "leaderboard_md",
    "model_context",
    "rows",
    "snippet",
    "write_outputs",
]

COLUMNS: tuple[Column, ...] = (
    Column("rank", "rank", 0),
    Column("candidate", "candidate"),
    Column("median", "median", 1, "median objective over the runs (its unit: the objective's)"),
    Column("low", "interval low", 1, "median - z standard errors"),
    Column("high", "interval high", 1, "median + z standard errors"),
    Column("runs", "runs", 0),
    Column("single_stream", "single-stream tok/s", 1),
    Column("vs_plain", "x plain", 2, "median over no speculation's median (none: 1.00)"),
    Column("first_second", "run 1 / run 2", 2, "first run after the restart over the next"),
    Column("warmup", "warm-up", 0, "whether run 1 and run 2 differ beyond noise"),
    Column("restarts", "restarts", 0),
    Column("humaneval", "HumanEval", 0, "passed / problems of its latest run with one"),
    Column("capacity", "KV capacity", 0, "what the server reported it can hold"),
    Column("stops_paying", "stops paying", 0, "where it no longer beats none beyond noise"),
    Column("status", "status"),
    Column("profile", "profile"),
)


def _summary(outcome: Outcome, st: Standing | None) -> dict[str, Any] | None:
    if st is None:
        return None
    low, high = outcome.interval(st) or (None, None)
    return {"key": st.candidate.key, "median": st.median, "low": low, "high": high,
            "runs": len(st.runs), "profile": st.candidate.profile}  # fmt: skip


def rows(outcome: Outcome, views: dict[str, CandidateRuns] | None = None) -> list[dict[str, Any]]:
    """One keyed row per candidate (:data:`COLUMNS`), best median first; ``views``
    (:func:`specops.tune.board.gather`) fill the columns beyond the scores."""
    views = views or {}
    out = []
    rank = 0
    plain = outcome.plain.median if outcome.plain is not None and outcome.plain.usable else None
    for st in standings(outcome):
        if st.usable:
            rank += 1
        status = st.rejected or ("pick" if outcome.pick is st else "ok")
        if outcome.best is st and outcome.pick is not st:
            status = (
                "best median (no speculation is picked)"
                if outcome.pick is not None and outcome.pick.candidate.plain
                else "best median (a cheaper one is within tolerance)"
            )
        elif outcome.runner_up is st:
            status = "runner-up"
        if st.candidate.plain and status == "ok":
            status = "no speculation"
        summary = _summary(outcome, st) if st.runs else None
        view = views.get(st.candidate.key)
        check = view.warmup if view is not None else None
        out.append(
            {
                "first_second": check.ratio if check is not None else None,
                "warmup": check.text if check is not None else None,
                "restarts": view.restarts if view is not None else None,
                "humaneval": view.humaneval if view is not None else None,
                "capacity": view.capacity if view is not None else None,
                "stops_paying": view.stops_paying if view is not None else None,
                "rank": rank if st.usable else None,
                "candidate": st.candidate.key,
                "median": st.median,
                "low": summary["low"] if summary and st.usable else None,
                "high": summary["high"] if summary and st.usable else None,
                "runs": len(st.runs),
                "single_stream": st.tiebreak,
                "vs_plain": st.median / plain if plain and st.median is not None else None,
                "status": status,
                "profile": yaml.safe_dump(st.candidate.profile, default_flow_style=True).strip(),
            }
        )
    return out


def leaderboard_csv(outcome: Outcome, views: dict[str, CandidateRuns] | None = None) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c.key for c in COLUMNS], lineterminator="\n")
    writer.writeheader()
    for row in rows(outcome, views):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def cells_csv(views: dict[str, CandidateRuns], plain_key: str | None) -> str:
    """The per-cell table (:data:`~specops.tune.board.CELL_COLUMNS`): an estimate is four
    columns, ``<key>``, ``<key>_low``, ``<key>_high`` and ``<key>_short`` (why it is
    not shown: too few requests for the percentile); rates by position ``;``-joined."""
    fields: list[str] = []
    for c in CELL_COLUMNS:
        fields.append(c.key)
        if c.key in _ESTIMATE_KEYS:
            fields += [f"{c.key}_low", f"{c.key}_high", f"{c.key}_short"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in cell_rows(views, plain_key):
        flat: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, Estimate):
                flat[key], flat[f"{key}_low"] = value.value, value.low
                flat[f"{key}_high"], flat[f"{key}_short"] = value.high, value.short
            elif key == "per_position":
                flat[key] = ";".join(f"{v:.4f}" for v in value)
            else:
                flat[key] = value
        writer.writerow({k: "" if v is None else v for k, v in flat.items()})
    return out.getvalue()


_ESTIMATE_KEYS = frozenset(
    {"output_tok_s", "speedup", "tpot_ms_p50", "tpot_ms_p90", "ttft_ms_p50", "ttft_ms_p90"}
)


def _warm_ranking(outcome: Outcome, views: dict[str, CandidateRuns]) -> list[dict[str, Any]]:
    """When warm-up flagged a candidate: every usable candidate ranked by the median of
    its runs after the first (the server warm), else its only runs."""
    if not any(v.warmup is not None and v.warmup.flagged for v in views.values()):
        return []
    ranked = []
    for st in outcome.standings.values():
        if not st.usable:
            continue
        view = views.get(st.candidate.key)
        later = [r.measurement.objective for r in (view.records if view else []) if r.repeat > 0]
        values = later or st.values
        ranked.append({"key": st.candidate.key, "median": statistics.median(values),
                       "runs": len(values), "later": bool(later)})  # fmt: skip
    return sorted(ranked, key=lambda r: -float(r["median"]))


def _restarts(ledger: Ledger) -> int:
    return sum(
        1 for e in ledger.events
        if e.get("kind") == "run" and (e.get("restart") or {}).get("restarted")
    )  # fmt: skip


def _pick_roofline(outcome: Outcome, ledger: Ledger, out: Path) -> dict[str, Any]:
    """The roofline of the pick's latest good run, or why there is none."""
    pick = outcome.pick
    if pick is None:
        return {"roofline_of": None, "roofline_reason": "no pick"}
    runs = [r for (key, _), r in sorted(ledger.runs.items()) if key == pick.candidate.key]
    good = [r for r in runs if r.measurement.ok and r.results]
    if not good:
        return {"roofline_of": None, "roofline_reason": "the pick has no results file"}
    path = out / str(good[-1].results)
    try:
        results = load_results(path)
    except ValidationError as exc:
        return {"roofline_of": None, "roofline_reason": f"cannot read {path}: {exc}"}
    return {"roofline_of": str(good[-1].results), **roofline_context(results)}


def leaderboard_md(
    cfg: SweepConfig,
    outcome: Outcome,
    ledger: Ledger,
    out: Path,
    views: dict[str, CandidateRuns] | None = None,
) -> str:
    if views is None:
        views = gather(outcome, ledger, out, cfg.objective, cfg.scoring)
    plain_key = outcome.plain.candidate.key if outcome.plain is not None else None
    pick_view = views.get(outcome.pick.candidate.key) if outcome.pick is not None else None
    return render(
        "sweep/leaderboard.md.j2",
        cfg=cfg,
        **model_context(cfg, outcome, views),
        objective=cfg.objective,
        cell_columns=CELL_COLUMNS,
        cells=cell_rows(views, plain_key),
        by_load=by_load(views, cfg.space, plain_key),
        warm_ranking=_warm_ranking(outcome, views),
        flagged=[v.key for v in views.values() if v.warmup is not None and v.warmup.flagged],
        missing={v.key: v.missing for v in views.values() if v.missing},
        pick_stops_paying=pick_view.stops_paying if pick_view is not None else None,
        z=cfg.scoring.z,
        spread=outcome.spread,
        visited=sum(1 for st in outcome.standings.values() if not st.candidate.plain),
        restarts=_restarts(ledger),
        pick=_summary(outcome, outcome.pick),
        runner_up=_summary(outcome, outcome.runner_up),
        plain=_summary(outcome, outcome.plain) if outcome.plain is not None else None,
        plain_verdict=outcome.plain_verdict,
        columns=COLUMNS,
        rows=rows(outcome, views),
        steps=outcome.steps,
        **_pick_roofline(outcome, ledger, out),
    )


def model_context(
    cfg: SweepConfig, outcome: Outcome, views: dict[str, CandidateRuns]
) -> dict[str, Any]:
    """What ``templates/sweep/predict.md.j2`` shows: the depth model replayed on the
    sweep's runs (:func:`specops.tune.board.model_replay`), or why it does not apply."""
    replay = model_replay(views, cfg.objective, cfg.scoring, outcome.spread)
    if isinstance(replay, str):
        return {
            "model_reason": replay,
            "replay": None,
            "model_rows": [],
            "unit": cfg.objective.unit,
        }
    return {"model_reason": None, "replay": replay, "model_rows": replay.ranking(),
            "unit": cfg.objective.unit}  # fmt: skip


def snippet(
    cfg: SweepConfig, outcome: Outcome, views: dict[str, CandidateRuns] | None = None
) -> str:
    pick = _summary(outcome, outcome.pick)
    pick_view = (views or {}).get(outcome.pick.candidate.key) if outcome.pick else None
    chosen: dict[str, Any] = {"inference_service_speculative": pick["profile"]} if pick else {}
    if pick and not cfg.objective.is_default and pick["profile"].get("method") != "none":
        # the rollout's gate plain judges on what the profile was chosen for
        chosen["speculative_rollout_objective"] = cfg.objective.to_mapping()
    body = yaml.safe_dump(chosen, sort_keys=False) if chosen else ""
    return render(
        "sweep/chosen-profile.yml.j2",
        cfg=cfg,
        now=f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}",
        pick=pick,
        runner_up=_summary(outcome, outcome.runner_up),
        plain_verdict=outcome.plain_verdict,
        profile_yaml=body.rstrip(),
        objective=cfg.objective,
        stops_paying=pick_view.stops_paying if pick_view is not None else None,
    )


def _plot(outcome: Outcome, path: Path) -> None:
    keys = outcome.order
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(keys)), 4.0))
    for x, key in enumerate(keys):
        st = outcome.standings[key]
        if st.runs:
            ax.scatter([x] * len(st.runs), st.values, color="tab:blue", s=12, alpha=0.6)
        band = outcome.interval(st) if st.usable else None
        if band is not None:
            med = st.median or 0.0
            ax.errorbar([x], [med], yerr=[[med - band[0]], [band[1] - med]],
                        color="tab:orange", capsize=6, marker="_", markersize=18)  # fmt: skip
        elif st.candidate.invalid or st.rejected:
            ax.annotate("x", (x, 0), ha="center", color="tab:red")
    if outcome.pick is not None:
        x = keys.index(outcome.pick.candidate.key)
        ax.axvline(x, color="tab:green", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(keys)), [k_.replace(",", "\n") for k_ in keys], rotation=0, fontsize=7)
    ax.set_ylabel("objective: output tok/s (dots: runs, bar: median and interval)")
    ax.set_title("sweep: candidates in visit order (dashed: pick)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(cfg: SweepConfig, outcome: Outcome, ledger: Ledger, out: Path) -> dict[str, Path]:
    files = {
        "leaderboard_md": out / "leaderboard.md",
        "leaderboard_csv": out / "leaderboard.csv",
        "plot": out / "objective.png",
        "snippet": out / "chosen-profile.yml",
    }
    views = gather(outcome, ledger, out, cfg.objective, cfg.scoring)
    plain_key = outcome.plain.candidate.key if outcome.plain is not None else None
    files["cells_csv"] = out / "leaderboard-cells.csv"
    files["leaderboard_md"].write_text(
        leaderboard_md(cfg, outcome, ledger, out, views), encoding="utf-8"
    )
    files["leaderboard_csv"].write_text(leaderboard_csv(outcome, views), encoding="utf-8")
    files["cells_csv"].write_text(cells_csv(views, plain_key), encoding="utf-8")
    files["snippet"].write_text(snippet(cfg, outcome, views), encoding="utf-8")
    _plot(outcome, files["plot"])
    return files
