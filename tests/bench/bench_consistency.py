"""Re-derive every number of a report from the raw per-request records.

Independent of ``specops.bench.stats``: numpy percentiles, its own ITL split. Used by
the unit tests (synthetic server) and the end-to-end test (real vLLM).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from specops.bench.report import fmt
from specops.bench.results import load_results


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


def expected_rows(results_path: Path) -> dict[tuple[int, int], list[str]]:
    """The report's cells-table row each cell must have, computed from records."""
    res = load_results(results_path)
    rows: dict[tuple[int, int], list[str]] = {}
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
        rows[(cell.concurrency, cell.context_tokens)] = [
            str(cell.concurrency),
            str(cell.context_tokens),
            status,
            str(len(ok)),
            str(len(recs) - len(ok)),
            fmt(out / duration if duration > 0 else 0.0),
            fmt(len(ok) / duration if duration > 0 else 0.0, 2),
            fmt(cell.stats.goodput_req_s, 2),
            fmt(t["p50"]),
            fmt(t["p90"]),
            fmt(t["p99"]),
            fmt(p["p50"], 2),
            fmt(p["p90"], 2),
            fmt(p["p99"], 2),
            fmt(i_["p50"], 2),
            fmt(i_["p90"], 2),
            fmt(i_["p99"], 2),
            fmt(e["p50"]),
            fmt(e["p99"]),
            fmt(d["p50"]),
            fmt(cell.acceptance.mean_acceptance_length, 3),
        ]
    return rows


def report_rows(report: Path) -> dict[tuple[int, int], list[str]]:
    """The cells table of report.md, by (concurrency, context)."""
    text = report.read_text(encoding="utf-8")
    section = text.split("## Cells", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[int, int], list[str]] = {}
    for line in section.splitlines():
        if re.match(r"^\| \d+ \| \d+ \|", line):
            cols = [c.strip() for c in line.strip("|").split("|")]
            rows[(int(cols[0]), int(cols[1]))] = cols
    return rows


def assert_report_consistent(results_path: Path, report: Path) -> None:
    expected = expected_rows(results_path)
    actual = report_rows(report)
    assert set(actual) == set(expected)
    for key, row in expected.items():
        assert len(actual[key]) == len(row), f"cell {key}: report {actual[key]} != records {row}"
        for got, want in zip(actual[key], row, strict=True):
            assert _same_shown(got, want), f"cell {key}: report {actual[key]} != records {row}"


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
