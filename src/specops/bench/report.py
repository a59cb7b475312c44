"""Markdown report, CSV files and PNG plots, all read from a results document.

``write_report`` takes :class:`~specops.bench.results.Results` (as loaded from JSON)
and never talks to a server: every number shown is a field of the results or a
function of them (the roofline line).
"""

from __future__ import annotations

from pathlib import Path

from specops.bench.results import Results, cells_csv, requests_csv
from specops.bench.roofline import roofline_rows
from specops.plots import pyplot

__all__ = ["fmt", "render_markdown", "write_report"]


def fmt(value: float | int | None, digits: int = 1) -> str:
    """How every number appears in the report (tests re-derive with this)."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _temperature(plan: dict[str, object]) -> str:
    value = plan.get("temperature")
    return "server default" if value is None else str(value)


def _cells_table(results: Results) -> list[str]:
    lines = [
        "| C | context | status | ok | failed | out tok/s | req/s | goodput req/s "
        "| TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p90 | TPOT p99 "
        "| ITL p50 | ITL p90 | ITL p99 | E2E p50 | E2E p99 | decode tok/s p50 | accept len |",
        "|" + "---|" * 21,
    ]
    for cell in results.cells:
        s = cell.stats
        lines.append(
            "| "
            + " | ".join(
                [
                    str(cell.concurrency),
                    str(cell.context_tokens),
                    cell.status,
                    str(s.completed),
                    str(s.failed),
                    fmt(s.output_tok_s),
                    fmt(s.request_rate, 2),
                    fmt(s.goodput_req_s, 2),
                    fmt(s.ttft_ms.p50),
                    fmt(s.ttft_ms.p90),
                    fmt(s.ttft_ms.p99),
                    fmt(s.tpot_ms.p50, 2),
                    fmt(s.tpot_ms.p90, 2),
                    fmt(s.tpot_ms.p99, 2),
                    fmt(s.itl_ms.p50, 2),
                    fmt(s.itl_ms.p90, 2),
                    fmt(s.itl_ms.p99, 2),
                    fmt(s.e2e_ms.p50),
                    fmt(s.e2e_ms.p99),
                    fmt(s.decode_tok_s.p50),
                    fmt(cell.acceptance.mean_acceptance_length, 3),
                ]
            )
            + " |"
        )
    return lines


def _acceptance_table(results: Results) -> list[str]:
    rows = [c for c in results.cells if c.acceptance.mean_acceptance_length is not None]
    if not rows:
        return ["No acceptance data (no speculative counters or meta_info).", ""]
    width = max(len(c.acceptance.per_position) for c in rows)
    head = "| C | context | source | accept len | draft accept rate | drafts | accepted |"
    head += "".join(f" pos {i} |" for i in range(width))
    lines = [head, "|" + "---|" * (7 + width)]
    for c in rows:
        a = c.acceptance
        cols = [
            str(c.concurrency),
            str(c.context_tokens),
            a.source,
            fmt(a.mean_acceptance_length, 3),
            fmt(a.draft_acceptance_rate, 3),
            fmt(a.drafts, 0),
            fmt(a.accepted, 0),
        ] + [fmt(a.per_position[i], 3) if i < len(a.per_position) else "-" for i in range(width)]
        lines.append("| " + " | ".join(cols) + " |")
    return [*lines, ""]


def render_markdown(
    results: Results,
    plots: list[str],
    bandwidth_gb_s: float | None = None,
    bytes_per_token: float | None = None,
) -> str:
    srv = results.server
    plan = results.plan
    out = [
        f"# Benchmark {results.run_id}",
        "",
        f"- Server: {srv.base_url}, engine {srv.engine} {srv.engine_version or '?'}, "
        f"model `{srv.model}`, max_model_len {fmt(srv.max_model_len)}",
        f"- Speculative config: {srv.speculative if srv.speculative else 'not read back'} "
        f"(source: {srv.speculative_source})",
        f"- API {plan['api']}, output_len {plan['output_len']}, "
        f"{plan['requests_per_cell']} requests per cell after {plan['warmup_per_cell']} "
        f"warm-up, temperature {_temperature(plan)}, "
        f"ignore_eos {plan['ignore_eos']}",
        f"- Host {results.host.get('hostname', '?')}, started {results.created_at}, "
        f"finished {results.finished_at or '?'}, schema {results.schema_version}",
        "",
    ]
    if results.notes:
        out += ["## Notes", "", *[f"- {n}" for n in results.notes], ""]
    out += [
        "## Cells",
        "",
        "Latencies in ms; throughput over the measured wall time (warm-up excluded).",
        "",
        *_cells_table(results),
        "",
    ]
    failing = [c for c in results.cells if c.stats.failure_reasons or c.notes]
    if failing:
        out += ["## Failures", ""]
        for c in failing:
            for reason, count in sorted(c.stats.failure_reasons.items()):
                out.append(f"- c{c.concurrency}-ctx{c.context_tokens}: {count} x {reason}")
            for note in c.notes:
                out.append(f"- c{c.concurrency}-ctx{c.context_tokens}: {note}")
        out.append("")
    out += ["## Acceptance by position", "", *_acceptance_table(results)]
    if bandwidth_gb_s and bytes_per_token:
        out += [
            "## Roofline (single stream)",
            "",
            f"Bandwidth {fmt(bandwidth_gb_s)} GB/s, {fmt(bytes_per_token, 0)} bytes per token.",
            "",
            "| context | decode tok/s p50 (C=1) | accept len | roofline tok/s "
            "| roofline x accept | % of bound |",
            "|---|---|---|---|---|---|",
        ]
        for r in roofline_rows(results, bandwidth_gb_s, bytes_per_token):
            out.append(
                f"| {r.context_tokens} | {fmt(r.achieved_tok_s)} | {fmt(r.acceptance_length, 3)}"
                f" | {fmt(r.roofline_tok_s)} | {fmt(r.bound_tok_s)} | {fmt(r.percent_of_bound)} |"
            )
        out.append("")
    if results.correctness:
        cor = results.correctness
        out += [
            "## Correctness",
            "",
            f"HumanEval: {cor['passed']}/{cor['problems']} passed, pass@1 "
            f"{fmt(float(cor['pass_at_1']), 3)} (temperature {cor['temperature']}).",
            "",
        ]
    if plots:
        out += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(out)


def _plot_throughput(results: Results, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ctx in sorted({c.context_tokens for c in results.cells}):
        cells = sorted(
            (c for c in results.cells if c.context_tokens == ctx), key=lambda c: c.concurrency
        )
        ax.plot(
            [c.concurrency for c in cells],
            [c.stats.output_tok_s for c in cells],
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


def _plot_percentiles(results: Results, path: Path, attr: str, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ctx in sorted({c.context_tokens for c in results.cells}):
        cells = sorted(
            (c for c in results.cells if c.context_tokens == ctx), key=lambda c: c.concurrency
        )
        for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            xs = [c.concurrency for c in cells if getattr(getattr(c.stats, attr), q) is not None]
            ys = [getattr(getattr(c.stats, attr), q) for c in cells]
            ys = [y for y in ys if y is not None]
            ax.plot(xs, ys, linestyle=style, marker=".", label=f"{ctx} in, {q}")
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
) -> Path:
    """Write report.md, cells.csv, requests.csv and the PNG plots; return report.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    roof = results.plan.get("roofline") or {}
    bandwidth_gb_s = bandwidth_gb_s or roof.get("bandwidth_gb_s")
    bytes_per_token = bytes_per_token or roof.get("bytes_per_token")
    (out_dir / "cells.csv").write_text(cells_csv(results), encoding="utf-8")
    (out_dir / "requests.csv").write_text(requests_csv(results), encoding="utf-8")
    plots: list[str] = []
    if results.cells:
        _plot_throughput(results, out_dir / "throughput.png")
        _plot_percentiles(results, out_dir / "ttft.png", "ttft_ms", "TTFT percentiles")
        _plot_percentiles(results, out_dir / "itl.png", "itl_ms", "ITL percentiles")
        plots += ["throughput.png", "ttft.png", "itl.png"]
        if _plot_acceptance(results, out_dir / "acceptance.png"):
            plots.append("acceptance.png")
    report = out_dir / "report.md"
    report.write_text(
        render_markdown(results, plots, bandwidth_gb_s, bytes_per_token), encoding="utf-8"
    )
    return report
