"""Markdown report, CSV files and PNG plots, all read from a results document.

``write_report`` takes :class:`~specops.bench.results.Results` (as loaded from JSON)
and never talks to a server: every number shown is a field of the results or a
function of them (the roofline). The text is ``templates/bench/report.md.j2``; this
module hands it keyed rows (:data:`REPORT_COLUMNS`, :func:`~specops.bench.results.cell_row`).
Given the results of a plain baseline (the same plan on the same server without
speculation, ``specops bench report --plain``), the report adds the speed-up over it per
cell (:func:`~specops.bench.compare.speedup_rows`) and ``speedup.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specops.bench.compare import SPEEDUP_COLUMNS, speedup_rows
from specops.bench.delta import cell_boots, crossover
from specops.bench.results import (
    CELL_COLUMNS,
    SERVER_KEYS,
    Column,
    Results,
    cell_row,
    cells_csv,
    columns_csv,
    requests_csv,
)
from specops.bench.roofline import Hardware, resolve, roofline_rows
from specops.plots import pyplot
from specops.templating import fmt, render

__all__ = [
    "REPORT_COLUMNS",
    "SERVER_COLUMNS",
    "fmt",
    "render_markdown",
    "report_context",
    "roofline_context",
    "write_report",
]

_REPORT_KEYS = (
    "concurrency", "context_tokens", "status", "completed", "failed", "concurrency_max",
    "concurrency_mean", "output_tok_s", "steady_output_tok_s", "request_rate",
    "goodput_req_s", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p50",
    "tpot_ms_p90", "tpot_ms_p99", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "e2e_ms_p50",
    "e2e_ms_p99", "decode_tok_s_p50", "mean_acceptance_length",
)  # fmt: skip
_BY_KEY = {c.key: c for c in CELL_COLUMNS}
# The report's server's-view table: these columns of CELL_COLUMNS (Cell.server), by key.
SERVER_COLUMNS: tuple[Column, ...] = (
    _BY_KEY["concurrency"], _BY_KEY["context_tokens"],
    *(_BY_KEY[k] for k in SERVER_KEYS),
)  # fmt: skip
# The report's cells table: these columns of CELL_COLUMNS, by key.
REPORT_COLUMNS: tuple[Column, ...] = tuple(_BY_KEY[k] for k in _REPORT_KEYS)


def _hardware(
    results: Results, bandwidth_gb_s: float | None, bytes_per_token: float | None
) -> Hardware | str:
    if bandwidth_gb_s and bytes_per_token:
        return Hardware(bandwidth_gb_s, bytes_per_token, "given (--gpu-bandwidth-gbs)",
                        "given (--model-bytes-per-token)")  # fmt: skip
    return resolve(results.plan.get("roofline"))


def roofline_context(
    results: Results, bandwidth_gb_s: float | None = None, bytes_per_token: float | None = None
) -> dict[str, Any]:
    """The roofline part of a report: hardware and rows, or the reason there is none.

    Also what the sweep's and the rollout's reports show (``templates/roofline.md.j2``).
    """
    hardware = _hardware(results, bandwidth_gb_s, bytes_per_token)
    rows = (
        roofline_rows(results, hardware.bandwidth_gb_s, hardware.bytes_per_token)
        if isinstance(hardware, Hardware)
        else []
    )
    return {
        "hardware": hardware if isinstance(hardware, Hardware) else None,
        "roofline_reason": hardware if isinstance(hardware, str) else None,
        "roofline": rows,
    }


def report_context(
    results: Results,
    plots: list[str],
    bandwidth_gb_s: float | None = None,
    bytes_per_token: float | None = None,
    plain: Results | None = None,
) -> dict[str, Any]:
    """Everything the report template shows, as numbers and keyed rows (``plain``: the
    plain baseline's results, for the speed-up table)."""
    rows = [cell_row(c) for c in results.cells]
    failures: list[dict[str, Any]] = []
    for c in results.cells:
        for reason, count in sorted(c.stats.failure_reasons.items()):
            failures.append({"concurrency": c.concurrency, "context_tokens": c.context_tokens,
                             "count": count, "text": reason})  # fmt: skip
        for note in c.notes:
            failures.append({"concurrency": c.concurrency, "context_tokens": c.context_tokens,
                             "count": None, "text": note})  # fmt: skip
    accepted = [c for c in results.cells if c.acceptance.mean_acceptance_length is not None]
    acceptance = [
        {"concurrency": c.concurrency, "context_tokens": c.context_tokens,
         **c.acceptance.to_dict()}
        for c in accepted
    ]  # fmt: skip
    return {
        **roofline_context(results, bandwidth_gb_s, bytes_per_token),
        "run": results,
        "server": results.server,
        "plan": results.plan,
        "cells": results.cells,
        "columns": REPORT_COLUMNS,
        "rows": rows,
        "short_cells": [
            r
            for r in rows
            if r["concurrency_max"] is not None and r["concurrency_max"] < r["concurrency"]
        ],
        "failures": failures,
        "acceptance": acceptance,
        "positions": max((len(a["per_position"]) for a in acceptance), default=0),
        "no_drafts": sum(
            1
            for c in results.cells
            if c.acceptance.source == "vllm-metrics" and not c.acceptance.drafts
        ),
        "correctness": results.correctness,
        "plots": plots,
        "plain": plain,
        "speedup_columns": SPEEDUP_COLUMNS,
        "speedup": speedup_rows(plain, results) if plain is not None else [],
        "server_columns": SERVER_COLUMNS,
        "server_rows": [r for r in rows if any(r[k] is not None for k in SERVER_KEYS)],
        "capacity": results.server.capacity,
        "stops_paying": (
            [x.text for x in crossover(cell_boots([results]), cell_boots([plain]))]
            if plain is not None
            else []
        ),
    }


def render_markdown(
    results: Results,
    plots: list[str],
    bandwidth_gb_s: float | None = None,
    bytes_per_token: float | None = None,
    plain: Results | None = None,
) -> str:
    return render(
        "bench/report.md.j2",
        **report_context(results, plots, bandwidth_gb_s, bytes_per_token, plain),
    )


def _plot_throughput(results: Results, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ctx in sorted({c.context_tokens for c in results.cells}):
        cells = sorted(
            (c for c in results.cells if c.context_tokens == ctx), key=lambda c: c.concurrency
        )
        rows = [cell_row(c) for c in cells]
        ax.plot(
            [r["concurrency"] for r in rows],
            [r["output_tok_s"] for r in rows],
            marker="o",
            label=f"{ctx} tokens in",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.set_title("Output throughput vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_percentiles(results: Results, path: Path, name: str, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ctx in sorted({c.context_tokens for c in results.cells}):
        rows = sorted(
            (cell_row(c) for c in results.cells if c.context_tokens == ctx),
            key=lambda r: r["concurrency"],
        )
        for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            points = [(r["concurrency"], r[f"{name}_{q}"]) for r in rows]
            points = [(x, y) for x, y in points if y is not None]
            ax.plot(
                [x for x, _ in points],
                [y for _, y in points],
                linestyle=style,
                marker=".",
                label=f"{ctx} in, {q}",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("ms")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_acceptance(results: Results, path: Path) -> bool:
    cells = [c for c in results.cells if c.acceptance.per_position]
    if not cells:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in cells:
        ax.plot(
            range(len(c.acceptance.per_position)),
            c.acceptance.per_position,
            marker="o",
            label=f"C={c.concurrency}, {c.context_tokens} in",
        )
    ax.set_xticks(range(max(len(c.acceptance.per_position) for c in cells)))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Acceptance by position")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_report(
    results: Results,
    out_dir: Path,
    bandwidth_gb_s: float | None = None,
    bytes_per_token: float | None = None,
    plain: Results | None = None,
) -> Path:
    """Write report.md, cells.csv, requests.csv and the PNG plots; return report.md.

    The roofline comes from the plan's ``roofline`` inputs unless both numbers are given.
    With ``plain`` (the plain baseline's results) also speedup.csv and its table.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cells.csv").write_text(cells_csv(results), encoding="utf-8")
    (out_dir / "requests.csv").write_text(requests_csv(results), encoding="utf-8")
    if plain is not None:
        (out_dir / "speedup.csv").write_text(
            columns_csv(SPEEDUP_COLUMNS, speedup_rows(plain, results)), encoding="utf-8"
        )
    plots: list[str] = []
    if results.cells:
        _plot_throughput(results, out_dir / "throughput.png")
        _plot_percentiles(results, out_dir / "ttft.png", "ttft_ms", "TTFT percentiles")
        _plot_percentiles(results, out_dir / "itl.png", "itl_ms", "ITL percentiles")
        plots += ["throughput.png", "ttft.png", "itl.png"]
        if _plot_acceptance(results, out_dir / "acceptance.png"):
            plots.append("acceptance.png")
    # report.md last and whole (a temporary name, then renamed): its presence says the
    # report is complete (`bench run --reuse` writes a missing one from the results).
    report = out_dir / "report.md"
    partial = out_dir / ".report.md.partial"
    partial.write_text(
        render_markdown(results, plots, bandwidth_gb_s, bytes_per_token, plain), encoding="utf-8"
    )
    partial.replace(report)
    return report
