"""Runs side by side (``specops bench compare RUN...``): a delta table with intervals
and overlay plots, for any number of runs or sweep candidates.

A *run set* is what one RUN argument names: a ``results.json``, a run directory (its
``results.json``), or a directory of results files (a sweep candidate's
``runs/<key>/``: its runs pooled). The first is the baseline. Per other set and cell
(matched on concurrency and context, never by position): output tok/s and TPOT p50 of
both with their 95 % intervals (:mod:`specops.bench.intervals`), the ratio with its
interval and a verdict (beyond noise when the ratio's interval excludes 1), and the
acceptance lengths. The gate (exit 1 on a regression) is :func:`specops.bench.compare.compare`,
the same comparison the rollout's smoke gate runs, on each set's latest run against the
baseline's.

``write_comparison`` writes ``compare.md`` (``templates/bench/compare.md.j2``),
``compare.csv`` (keyed: :data:`DELTA_COLUMNS`) and the overlays: ``throughput.png`` and
``tpot.png`` (against concurrency, one line per set and context, bars: the intervals)
and ``acceptance.png`` (rates by draft position, drafts-weighted over each set's cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.delta import CellKey, cell_boots
from specops.bench.intervals import CellBoot, Estimate, ratio_estimate
from specops.bench.results import Column, Results, columns_csv, load_results
from specops.errors import ValidationError
from specops.plots import pyplot
from specops.templating import render

__all__ = [
    "DELTA_COLUMNS",
    "RunSet",
    "delta_rows",
    "load_run_set",
    "run_set_files",
    "write_comparison",
]


@dataclass
class RunSet:
    label: str
    runs: list[Results]
    paths: list[str] = field(default_factory=list)
    boots: dict[CellKey, CellBoot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.boots = cell_boots(self.runs)

    @property
    def latest(self) -> Results:
        return max(self.runs, key=lambda r: r.created_at)

    def acceptance(self) -> tuple[float | None, list[float]]:
        """Acceptance length and per-position rates over every cell, drafts-weighted."""
        cells = [c.acceptance for r in self.runs for c in r.cells if c.acceptance.drafts > 0]
        drafts = sum(a.drafts for a in cells)
        if drafts <= 0:
            return None, []
        length = sum(a.drafts * (a.mean_acceptance_length or 0.0) for a in cells) / drafts
        width = max(len(a.per_position) for a in cells)
        rates = [
            sum(a.drafts * (a.per_position[i] if i < len(a.per_position) else 0.0) for a in cells)
            / drafts
            for i in range(width)
        ]
        return length, rates


def run_set_files(spec: str, where: str) -> tuple[str, list[Path]]:
    """The label and the results files a RUN argument names (see the module docstring);
    ValidationError naming ``where`` when it names none. Nothing is read yet."""
    path = Path(spec)
    if path.is_file():
        return (path.parent.name if path.name == "results.json" else path.stem), [path]
    if path.is_dir() and (path / "results.json").is_file():
        return path.name, [path / "results.json"]
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise ValidationError(
                where, f"{spec}: no results.json and no results files (*.json) in it"
            )
        return path.name, files
    raise ValidationError(where, f"{spec}: no such file or directory")


def load_run_set(spec: str, where: str) -> RunSet:
    """The run set a RUN argument names, its results read."""
    label, files = run_set_files(spec, where)
    return RunSet(label, [load_results(f) for f in files], [str(f) for f in files])


DELTA_COLUMNS: tuple[Column, ...] = (
    Column("run", "run"),
    Column("concurrency", "C", 0),
    Column("context_tokens", "context", 0),
    Column("output_tok_s", "out tok/s", 1, "with its 95 % interval"),
    Column("baseline_output_tok_s", "baseline out tok/s", 1),
    Column("output_ratio", "x baseline", 3, "out tok/s over the baseline's, with its interval"),
    Column("tpot_ms_p50", "TPOT p50 ms", 2),
    Column("baseline_tpot_ms_p50", "baseline TPOT p50 ms", 2),
    Column("tpot_ratio", "TPOT x baseline", 3, "TPOT p50 over the baseline's"),
    Column("mean_acceptance_length", "accept len", 3),
    Column("baseline_mean_acceptance_length", "baseline accept len", 3),
    Column("verdict", "verdict", 0, "faster / slower beyond noise, or within noise"),
)
_ESTIMATES = (
    "output_tok_s", "baseline_output_tok_s", "output_ratio", "tpot_ms_p50",
    "baseline_tpot_ms_p50", "tpot_ratio",
)  # fmt: skip


def _length(runs: Sequence[Results], key: CellKey) -> float | None:
    cells = [
        c.acceptance
        for r in runs
        for c in r.cells
        if (c.concurrency, c.context_tokens) == key and c.acceptance.mean_acceptance_length
    ]
    drafts = sum(a.drafts for a in cells)
    if not cells or drafts <= 0:
        return None
    return sum(a.drafts * (a.mean_acceptance_length or 0.0) for a in cells) / drafts


def _verdict(ratio: Estimate) -> str:
    if not ratio.shown or ratio.low is None or ratio.high is None:
        return "not compared"
    if ratio.low > 1.0:
        return "faster beyond noise"
    if ratio.high < 1.0:
        return "slower beyond noise"
    return "within noise"


def delta_rows(baseline: RunSet, other: RunSet) -> list[dict[str, Any]]:
    """One keyed row (:data:`DELTA_COLUMNS`) per cell of ``other``; estimates as
    :class:`~specops.bench.intervals.Estimate`."""
    rows = []
    for key, boot in other.boots.items():
        base = baseline.boots.get(key)
        missing = Estimate(None, short="not in the baseline")
        ratio = ratio_estimate(boot, base, "output_tok_s") if base is not None else missing
        rows.append({
            "run": other.label, "concurrency": key[0], "context_tokens": key[1],
            "output_tok_s": boot.estimate("output_tok_s"),
            "baseline_output_tok_s": base.estimate("output_tok_s") if base else missing,
            "output_ratio": ratio,
            "tpot_ms_p50": boot.estimate("tpot_ms_p50"),
            "baseline_tpot_ms_p50": base.estimate("tpot_ms_p50") if base else missing,
            "tpot_ratio": ratio_estimate(boot, base, "tpot_ms_p50") if base else missing,
            "mean_acceptance_length": _length(other.runs, key),
            "baseline_mean_acceptance_length": _length(baseline.runs, key),
            "verdict": _verdict(ratio) if base is not None else "not in the baseline",
        })  # fmt: skip
    return rows


def _flat(rows: list[dict[str, Any]]) -> tuple[tuple[Column, ...], list[dict[str, Any]]]:
    """CSV columns: an estimate is ``<key>``, ``<key>_low``, ``<key>_high``, ``<key>_short``."""
    columns: list[Column] = []
    for c in DELTA_COLUMNS:
        columns.append(c)
        if c.key in _ESTIMATES:
            columns += [Column(f"{c.key}_{s}", f"{c.header} {s}") for s in ("low", "high", "short")]
    flat = []
    for row in rows:
        out: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, Estimate):
                out[key], out[f"{key}_low"] = value.value, value.low
                out[f"{key}_high"], out[f"{key}_short"] = value.high, value.short
            else:
                out[key] = value
        flat.append(out)
    return tuple(columns), flat


def _plot_metric(sets: Sequence[RunSet], metric: str, label: str, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in sets:
        for ctx in sorted({k[1] for k in s.boots}):
            keys = sorted(k for k in s.boots if k[1] == ctx)
            points = [(k[0], s.boots[k].estimate(metric)) for k in keys]
            points = [(c, e) for c, e in points if e.shown and e.value is not None]
            if not points:
                continue
            xs = [c for c, _ in points]
            ys = [float(e.value or 0.0) for _, e in points]
            lows = [
                y - float(e.low if e.low is not None else y)
                for y, (_, e) in zip(ys, points, strict=True)
            ]
            highs = [
                float(e.high if e.high is not None else y) - y
                for y, (_, e) in zip(ys, points, strict=True)
            ]
            ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3,
                        label=f"{s.label}, {ctx} in")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(label)
    ax.set_title(f"{label} vs concurrency (bars: 95 % intervals)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_acceptance(sets: Sequence[RunSet], path: Path) -> bool:
    drawn = [(s, s.acceptance()[1]) for s in sets]
    drawn = [(s, r) for s, r in drawn if r]
    if not drawn:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s, rates in drawn:
        ax.plot(range(len(rates)), rates, marker="o", label=s.label)
    ax.set_xticks(range(max(len(r) for _, r in drawn)))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance by position (drafts-weighted over the cells)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_comparison(sets: Sequence[RunSet], out_dir: Path, findings: dict[str, list[Any]]) -> Path:
    """compare.md, compare.csv and the overlay plots of ``sets`` (the first the baseline)
    in ``out_dir``; ``findings``: the gate's, by set label. Returns compare.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    baseline, others = sets[0], sets[1:]
    rows = [row for s in others for row in delta_rows(baseline, s)]
    columns, flat = _flat(rows)
    (out_dir / "compare.csv").write_text(columns_csv(columns, flat), encoding="utf-8")
    _plot_metric(sets, "output_tok_s", "output tok/s", out_dir / "throughput.png")
    _plot_metric(sets, "tpot_ms_p50", "TPOT p50 (ms)", out_dir / "tpot.png")
    plots = ["throughput.png", "tpot.png"]
    if _plot_acceptance(sets, out_dir / "acceptance.png"):
        plots.append("acceptance.png")
    report = out_dir / "compare.md"
    acceptance = {s.label: s.acceptance() for s in sets}
    report.write_text(
        render(
            "bench/compare.md.j2",
            baseline=baseline,
            others=others,
            rows=rows,
            plots=plots,
            findings=findings,
            acceptance=acceptance,
        ),
        encoding="utf-8",
    )
    return report
