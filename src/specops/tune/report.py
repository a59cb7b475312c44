"""Sweep outputs: leaderboard (Markdown, CSV), objective plot (PNG), inventory snippet.

Read from the outcome and the ledger; nothing here measures.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from specops.plots import pyplot
from specops.tune.ledger import Ledger
from specops.tune.search import Outcome, Standing, standings

if TYPE_CHECKING:
    from specops.tune.sweep import SweepConfig

__all__ = ["leaderboard_csv", "leaderboard_md", "snippet", "write_outputs"]

_COLUMNS = ("rank", "candidate", "score", "median", "single_stream", "runs", "status", "profile")


def _rows(outcome: Outcome, k: float) -> list[dict[str, str]]:
    rows = []
    rank = 0
    for st in standings(outcome, k):
        score = st.score(k)
        if score is not None:
            rank += 1
        status = st.rejected or ("pick" if outcome.pick is st else "ok")
        if outcome.best is st and outcome.pick is not st:
            status = "best score (a cheaper one is within tolerance)"
        rows.append(
            {
                "rank": str(rank) if score is not None else "-",
                "candidate": st.candidate.key,
                "score": f"{score:.1f}" if score is not None else "",
                "median": f"{st.median:.1f}" if st.median is not None else "",
                "single_stream": f"{st.tiebreak:.1f}" if st.tiebreak is not None else "",
                "runs": str(len(st.runs)),
                "status": status,
                "profile": yaml.safe_dump(st.candidate.profile, default_flow_style=True).strip(),
            }
        )
    return rows


def leaderboard_csv(outcome: Outcome, k: float) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_rows(outcome, k))
    return out.getvalue()


def leaderboard_md(cfg: SweepConfig, outcome: Outcome, ledger: Ledger) -> str:
    k = cfg.scoring.k
    restarts = sum(
        1 for e in ledger.events
        if e.get("kind") == "run" and (e.get("restart") or {}).get("restarted")
    )  # fmt: skip
    lines = [
        f"# Sweep on {cfg.canary} ({cfg.mode})",
        "",
        f"Objective: mean output tok/s over the plan's cells (tie-break: single-stream tok/s);"
        f" score = median - {k} x 1.4826 x MAD; pick = cheapest within"
        f" {cfg.scoring.tolerance:.0%} of the best score. {len(outcome.standings)} candidates"
        f" visited of {cfg.space.size()}, {restarts} restarts.",
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for row in _rows(outcome, k):
        lines.append("| " + " | ".join(row[c].replace("|", "/") for c in _COLUMNS) + " |")
    lines += ["", "## Decisions", ""] + [f"- {s}" for s in outcome.steps]
    return "\n".join(lines) + "\n"


def snippet(cfg: SweepConfig, pick: Standing | None) -> str:
    if pick is None:
        return "# specops sweep: no usable candidate; nothing to commit\n"
    score = pick.score(cfg.scoring.k)
    head = (
        f"# Chosen by specops sweep on {cfg.canary}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC:"
        f" {pick.candidate.key}, score {score:.1f} tok/s over {len(pick.runs)} runs.\n"
        f"# Put it in {cfg.inventory}/host_vars/{cfg.canary}.yml, or in group_vars/<group>/ and\n"
        "# roll it out with playbooks/rollout.yml.\n"
    )
    body = yaml.safe_dump(
        {"inference_service_speculative": pick.candidate.profile}, sort_keys=False
    )
    return "---\n" + head + body


def _plot(outcome: Outcome, k: float, path: Path) -> None:
    keys = outcome.order
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(keys)), 4.0))
    for x, key in enumerate(keys):
        st = outcome.standings[key]
        if st.runs:
            ax.scatter([x] * len(st.runs), st.values, color="tab:blue", s=12, alpha=0.6)
        score = st.score(k)
        if score is not None:
            ax.scatter([x], [score], marker="_", s=400, color="tab:orange")
        elif st.candidate.invalid or st.rejected:
            ax.annotate("x", (x, 0), ha="center", color="tab:red")
    if outcome.pick is not None:
        x = keys.index(outcome.pick.candidate.key)
        ax.axvline(x, color="tab:green", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(keys)), [k_.replace(",", "\n") for k_ in keys], rotation=0, fontsize=7)
    ax.set_ylabel("objective: output tok/s (dots: runs, bar: robust score)")
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
    files["leaderboard_md"].write_text(leaderboard_md(cfg, outcome, ledger), encoding="utf-8")
    files["leaderboard_csv"].write_text(leaderboard_csv(outcome, cfg.scoring.k), encoding="utf-8")
    files["snippet"].write_text(snippet(cfg, outcome.pick), encoding="utf-8")
    _plot(outcome, cfg.scoring.k, files["plot"])
    return files
