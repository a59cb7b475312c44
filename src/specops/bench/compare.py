"""Compare a candidate's results with a baseline's; findings decide a gate.

Cells are matched by (concurrency, context length). A regression is a relative change
past a threshold in the bad direction: output tok/s down, TTFT p50 or TPOT p50 up,
mean acceptance length down, any new failures, or HumanEval passing fewer problems
than the baseline by more than ``max_pass_drop``. A threshold of ``None`` ("off" on the
command line) keeps the metric's finding, measured and reported, but never a regression:
for a comparison whose timings say nothing (a busy test machine), failures and
correctness still gate.

:func:`speedup_rows` puts a speculative run beside a run of the same plan on the same
server without speculation (its *plain baseline*): per cell, keyed by (concurrency,
context length) and never by position, the output tok/s and TPOT p50 of both and their
ratios (:data:`SPEEDUP_COLUMNS`), the speed-up's 95 % interval from the bootstrap over
both cells' requests. A cell the plain run lacks, or a metric either run
does not have (older results, a failed cell), has ``None`` there and a note; nothing
is re-measured.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from specops.bench.intervals import CellBoot, ratio_estimate
from specops.bench.results import Cell, Column, Results

__all__ = [
    "SPEEDUP_COLUMNS",
    "Finding",
    "Thresholds",
    "compare",
    "count_arg",
    "speedup_rows",
    "threshold_arg",
]


@dataclass(frozen=True)
class Thresholds:
    throughput_drop: float | None = 0.05  # relative; None: not gated
    latency_rise: float | None = 0.10  # relative, TTFT p50 and TPOT p50; None: not gated
    acceptance_drop: float | None = 0.05  # relative; None: not gated
    max_pass_drop: int = 2  # HumanEval problems


def threshold_arg(text: str) -> float | None:
    """A relative threshold from the command line: a number >= 0, or ``off``."""
    if text.strip().lower() in ("off", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction such as 0.1, or off (got {text!r})"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, or off (got {text!r})")
    return value


def count_arg(text: str) -> int:
    """A count from the command line (``--max-pass-drop``): an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (got {text!r})") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (got {value})")
    return value


@dataclass(frozen=True)
class Finding:
    where: str  # "c8-ctx1024" or "humaneval"
    metric: str
    baseline: float | None
    candidate: float | None
    change: float | None  # relative (0.1 = +10 %), or absolute for counts
    regression: bool
    note: str = ""


def _rel(base: float | None, cand: float | None) -> float | None:
    if base is None or cand is None or base == 0:
        return None
    return (cand - base) / base


def _cell_findings(label: str, a: Cell, b: Cell, t: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    # (metric, baseline, candidate, threshold, a rise is bad)
    pairs: list[tuple[str, float | None, float | None, float | None, bool]] = [
        ("output_tok_s", a.stats.output_tok_s, b.stats.output_tok_s, t.throughput_drop, False),
        ("ttft_ms_p50", a.stats.ttft_ms.p50, b.stats.ttft_ms.p50, t.latency_rise, True),
        ("tpot_ms_p50", a.stats.tpot_ms.p50, b.stats.tpot_ms.p50, t.latency_rise, True),
        (
            "mean_acceptance_length",
            a.acceptance.mean_acceptance_length,
            b.acceptance.mean_acceptance_length,
            t.acceptance_drop,
            False,
        ),
    ]
    for metric, base, cand, limit, rise_is_bad in pairs:
        change = _rel(base, cand)
        if limit is None:
            out.append(Finding(label, metric, base, cand, change, False, "not gated"))
            continue
        bad = change is not None and (change > limit if rise_is_bad else change < -limit)
        out.append(Finding(label, metric, base, cand, change, bad))
    new_fail = b.stats.failed - a.stats.failed
    out.append(
        Finding(
            label,
            "failed_requests",
            float(a.stats.failed),
            float(b.stats.failed),
            float(new_fail),
            new_fail > 0,
        )
    )
    return out


def compare(baseline: Results, candidate: Results, t: Thresholds | None = None) -> list[Finding]:
    t = t or Thresholds()
    findings: list[Finding] = []
    base_cells = {(c.concurrency, c.context_tokens): c for c in baseline.cells}
    for cell in candidate.cells:
        key = (cell.concurrency, cell.context_tokens)
        label = f"c{key[0]}-ctx{key[1]}"
        if key not in base_cells:
            findings.append(Finding(label, "cell", None, None, None, False, "not in the baseline"))
            continue
        findings.extend(_cell_findings(label, base_cells[key], cell, t))
    for key in base_cells.keys() - {(c.concurrency, c.context_tokens) for c in candidate.cells}:
        findings.append(
            Finding(
                f"c{key[0]}-ctx{key[1]}", "cell", None, None, None, True, "missing in candidate"
            )
        )
    a, b = baseline.correctness, candidate.correctness
    if a and b:
        drop = int(a["passed"]) - int(b["passed"])
        findings.append(
            Finding(
                "humaneval",
                "passed",
                float(a["passed"]),
                float(b["passed"]),
                float(-drop),
                drop > t.max_pass_drop,
                f"pass@1 {a['pass_at_1']:.3f} -> {b['pass_at_1']:.3f}",
            )
        )
    elif a and not b:
        findings.append(
            Finding("humaneval", "passed", float(a["passed"]), None, None, True, "not run")
        )
    return findings


SPEEDUP_COLUMNS: tuple[Column, ...] = (
    Column("concurrency", "C", 0),
    Column("context_tokens", "context", 0),
    Column("output_tok_s", "out tok/s", 1),
    Column("plain_output_tok_s", "plain out tok/s", 1, "the same cell without speculation"),
    Column("speedup", "x plain", 2, "out tok/s over plain's: below 1.00 speculation loses"),
    Column("speedup_low", "x plain low", 2, "95 % interval (bootstrap over the requests)"),
    Column("speedup_high", "x plain high", 2),
    Column("tpot_ms_p50", "TPOT p50", 2),
    Column("plain_tpot_ms_p50", "plain TPOT p50", 2),
    Column("tpot_speedup", "TPOT x plain", 2, "plain's TPOT p50 over this one's"),
    Column("mean_acceptance_length", "accept len", 3),
    Column("note", "note"),
)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def speedup_rows(plain: Results, results: Results) -> list[dict[str, Any]]:
    """One keyed row (:data:`SPEEDUP_COLUMNS`) per cell of ``results``, beside the cell
    of the same concurrency and context length in ``plain``."""
    by_key = {(c.concurrency, c.context_tokens): c for c in plain.cells}
    rows = []
    for cell in results.cells:
        base = by_key.get((cell.concurrency, cell.context_tokens))
        band = (
            ratio_estimate(CellBoot([cell]), CellBoot([base]), "output_tok_s")
            if base is not None and cell.records and base.records
            else None
        )
        out, tpot = cell.stats.output_tok_s, cell.stats.tpot_ms.p50
        p_out = base.stats.output_tok_s if base is not None else None
        p_tpot = base.stats.tpot_ms.p50 if base is not None else None
        note = ""
        if base is None:
            note = "not in the plain baseline"
        elif base.status != "ok" or cell.status != "ok":
            note = f"cell status {cell.status}, plain {base.status}"
        speedup = _ratio(out, p_out)
        if speedup is not None and speedup < 1 and not note:
            note = "slower than no speculation"
        rows.append({
            "concurrency": cell.concurrency, "context_tokens": cell.context_tokens,
            "output_tok_s": out, "plain_output_tok_s": p_out, "speedup": speedup,
            "speedup_low": band.low if band else None, "speedup_high": band.high if band else None,
            "tpot_ms_p50": tpot, "plain_tpot_ms_p50": p_tpot, "tpot_speedup": _ratio(p_tpot, tpot),
            "mean_acceptance_length": cell.acceptance.mean_acceptance_length, "note": note,
        })  # fmt: skip
    return rows
