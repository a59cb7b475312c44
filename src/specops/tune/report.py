"""Sweep outputs: leaderboard (Markdown, CSV), objective plot (PNG), inventory snippet.

Read from the outcome, the ledger and the runs' results; nothing here measures. The
text is ``templates/sweep/leaderboard.md.j2`` and ``templates/sweep/chosen-profile.yml.j2``;
this module hands them keyed rows (:data:`COLUMNS`) and numbers.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path
from typing import Any

import yaml

from specops.bench.report import roofline_context
from specops.bench.results import Column, load_results
from specops.errors import ValidationError
from specops.plots import pyplot
from specops.templating import render
from specops.tune.config import SweepConfig
from specops.tune.ledger import Ledger
from specops.tune.search import Outcome, Standing, standings

__all__ = ["COLUMNS", "leaderboard_csv", "leaderboard_md", "rows", "snippet", "write_outputs"]

COLUMNS: tuple[Column, ...] = (
    Column("rank", "rank", 0),
    Column("candidate", "candidate"),
    Column("median", "median tok/s", 1, "median objective over the runs"),
    Column("low", "interval low", 1, "median - z standard errors"),
    Column("high", "interval high", 1, "median + z standard errors"),
    Column("runs", "runs", 0),
    Column("single_stream", "single-stream tok/s", 1),
    Column("vs_plain", "x plain", 2, "median over no speculation's median (none: 1.00)"),
    Column("status", "status"),
    Column("profile", "profile"),
)


def _summary(outcome: Outcome, st: Standing | None) -> dict[str, Any] | None:
    if st is None:
        return None
    low, high = outcome.interval(st) or (None, None)
    return {"key": st.candidate.key, "median": st.median, "low": low, "high": high,
            "runs": len(st.runs), "profile": st.candidate.profile}  # fmt: skip


def rows(outcome: Outcome) -> list[dict[str, Any]]:
    """One keyed row per candidate (:data:`COLUMNS`), best median first."""
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
        out.append(
            {
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


def leaderboard_csv(outcome: Outcome) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c.key for c in COLUMNS], lineterminator="\n")
    writer.writeheader()
    for row in rows(outcome):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


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


def leaderboard_md(cfg: SweepConfig, outcome: Outcome, ledger: Ledger, out: Path) -> str:
    return render(
        "sweep/leaderboard.md.j2",
        cfg=cfg,
        z=cfg.scoring.z,
        spread=outcome.spread,
        visited=sum(1 for st in outcome.standings.values() if not st.candidate.plain),
        restarts=_restarts(ledger),
        pick=_summary(outcome, outcome.pick),
        runner_up=_summary(outcome, outcome.runner_up),
        plain=_summary(outcome, outcome.plain) if outcome.plain is not None else None,
        plain_verdict=outcome.plain_verdict,
        columns=COLUMNS,
        rows=rows(outcome),
        steps=outcome.steps,
        **_pick_roofline(outcome, ledger, out),
    )


def snippet(cfg: SweepConfig, outcome: Outcome) -> str:
    pick = _summary(outcome, outcome.pick)
    body = (
        yaml.safe_dump({"inference_service_speculative": pick["profile"]}, sort_keys=False)
        if pick
        else ""
    )
    return render(
        "sweep/chosen-profile.yml.j2",
        cfg=cfg,
        now=f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}",
        pick=pick,
        runner_up=_summary(outcome, outcome.runner_up),
        plain_verdict=outcome.plain_verdict,
        profile_yaml=body.rstrip(),
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
    files["leaderboard_md"].write_text(leaderboard_md(cfg, outcome, ledger, out), encoding="utf-8")
    files["leaderboard_csv"].write_text(leaderboard_csv(outcome), encoding="utf-8")
    files["snippet"].write_text(snippet(cfg, outcome), encoding="utf-8")
    _plot(outcome, files["plot"])
    return files
