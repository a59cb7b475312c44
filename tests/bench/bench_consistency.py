"""Re-derive every number of a report from the raw per-request records.

Independent of ``specops.bench.stats``: numpy percentiles, its own ITL split. Used by
the unit tests (synthetic server) and the end-to-end test (real vLLM).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from specops.bench.results import load_results
from specops.templating import fmt


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    arr = np.array(values, dtype=float)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(arr.mean()),
    }


def _in_flight(recs) -> tuple[int, float]:
    """Max and time-weighted mean in flight, by sampling every event boundary."""
    spans = [(r.t_sent, r.t_sent + (r.done_s or 0.0)) for r in recs]
    edges = sorted({t for span in spans for t in span})
    peak = 0
    area = 0.0
    for a, b in itertools.pairwise(edges):
        mid = (a + b) / 2
        level = sum(1 for s, e in spans if s <= mid < e)
        peak = max(peak, level)
        area += level * (b - a)
    total = edges[-1] - edges[0]
    return peak, (area / total if total > 0 else float(peak))


def _steady(recs, concurrency: int) -> float | None:
    sends = sorted(r.t_sent for r in recs)
    if len(sends) <= concurrency:
        return None
    begin, end = sends[concurrency - 1], sends[-1]
    tokens = 0.0
    for r in recs:
        if r.error is not None:
            continue
        for i, at in enumerate(r.chunk_times):
            n = r.chunk_tokens[i]
            if n is None:
                n = (r.output_tokens or 0) / len(r.chunk_times)
            if begin <= r.t_sent + at < end:
                tokens += n
    return tokens / (end - begin) if end > begin else None


def expected_rows(results_path: Path) -> dict[tuple[int, int], dict[str, str]]:
    """The report's cells-table row each cell must have (by column header), computed
    from the records."""
    res = load_results(results_path)
    rows: dict[tuple[int, int], dict[str, str]] = {}
    for cell in res.cells:
        recs = cell.records
        ok = [r for r in recs if r.error is None]
        start = min(r.t_sent for r in recs)
        end = max(r.t_sent + (r.done_s or 0.0) for r in recs)
        duration = end - start
        out = sum(r.output_tokens or 0 for r in ok)
        ttft = [r.ttft_s * 1000 for r in ok]
        e2e = [r.e2e_s * 1000 for r in ok]
        tpot = [
            (r.e2e_s - r.ttft_s) * 1000 / (r.output_tokens - 1)
            for r in ok
            if r.output_tokens and r.output_tokens > 1
        ]
        decode = [
            (r.output_tokens - 1) / (r.e2e_s - r.ttft_s)
            for r in ok
            if r.output_tokens and r.output_tokens > 1 and r.e2e_s > r.ttft_s
        ]
        itl: list[float] = []
        for r in ok:
            for i in range(1, len(r.chunk_times)):
                gap = (r.chunk_times[i] - r.chunk_times[i - 1]) * 1000
                n = r.chunk_tokens[i] or 1
                itl += [gap / n] * n
        t, p, i_, e, d = _pcts(ttft), _pcts(tpot), _pcts(itl), _pcts(e2e), _pcts(decode)
        status = "ok" if len(ok) == len(recs) else ("failed" if not ok else "partial")
        peak, mean = _in_flight(recs)
        rows[(cell.concurrency, cell.context_tokens)] = {
            "C": str(cell.concurrency),
            "context": str(cell.context_tokens),
            "status": status,
            "ok": str(len(ok)),
            "failed": str(len(recs) - len(ok)),
            "max in flight": str(peak),
            "mean in flight": fmt(mean),
            "out tok/s": fmt(out / duration if duration > 0 else 0.0),
            "steady tok/s": fmt(_steady(recs, cell.concurrency)),
            "req/s": fmt(len(ok) / duration if duration > 0 else 0.0, 2),
            "goodput req/s": fmt(cell.stats.goodput_req_s, 2),
            "TTFT p50": fmt(t["p50"]),
            "TTFT p90": fmt(t["p90"]),
            "TTFT p99": fmt(t["p99"]),
            "TPOT p50": fmt(p["p50"], 2),
            "TPOT p90": fmt(p["p90"], 2),
            "TPOT p99": fmt(p["p99"], 2),
            "ITL p50": fmt(i_["p50"], 2),
            "ITL p90": fmt(i_["p90"], 2),
            "ITL p99": fmt(i_["p99"], 2),
            "E2E p50": fmt(e["p50"]),
            "E2E p99": fmt(e["p99"]),
            "decode tok/s p50": fmt(d["p50"]),
            "accept len": fmt(cell.acceptance.mean_acceptance_length, 3),
        }
    return rows


def report_rows(report: Path) -> dict[tuple[int, int], dict[str, str]]:
    """The cells table of report.md, by (concurrency, context), each row by header."""
    text = report.read_text(encoding="utf-8")
    section = text.split("## Cells", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows: dict[tuple[int, int], dict[str, str]] = {}
    for line in lines[2:]:
        row = dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        rows[(int(row["C"]), int(row["context"]))] = row
    return rows


def assert_report_consistent(results_path: Path, report: Path) -> None:
    expected = expected_rows(results_path)
    actual = report_rows(report)
    assert set(actual) == set(expected)
    for key, row in expected.items():
        assert set(actual[key]) == set(row), f"cell {key}: columns {sorted(actual[key])}"
        for column, want in row.items():
            got = actual[key][column]
            assert _same_shown(got, want), f"cell {key} {column}: report {got} != records {want}"


def _same_shown(got: str, want: str) -> bool:
    """Equal as printed, or numbers one unit apart in the last printed digit: two
    percentile implementations can land on either side of a rounding boundary
    (0.825 -> 0.82 / 0.83) without either being wrong."""
    if got == want:
        return True
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    decimals = len(want.partition(".")[2])
    return len(got.partition(".")[2]) == decimals and abs(a - b) <= 1.001 * 10**-decimals
