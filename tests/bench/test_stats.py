"""Per-request and per-cell statistics against hand-computed values and numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specops.bench.client import RequestRecord
from specops.bench.plan import Slo
from specops.bench.stats import cell_stats, decode_tok_s, itl_values, meets_slo, percentile, tpot_s


def _rec(
    t_sent: float,
    times: list[float],
    tokens: list[int | None],
    out: int | None,
    error: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        index=0,
        context_tokens=10,
        t_sent=t_sent,
        ttft_s=times[0] if times else None,
        e2e_s=times[-1] if times else None,
        done_s=(times[-1] + 0.001) if times else 0.5,
        chunk_times=times,
        chunk_tokens=tokens,
        output_tokens=out,
        error=error,
    )


def test_tpot_and_decode_speed() -> None:
    rec = _rec(0.0, [0.1, 0.2, 0.5], [1, 4, 5], 10)
    assert tpot_s(rec) == pytest.approx((0.5 - 0.1) / 9)
    assert decode_tok_s(rec) == pytest.approx(9 / 0.4)
    assert tpot_s(_rec(0.0, [0.1], [1], 1)) is None


def test_itl_splits_each_gap_over_the_tokens_of_the_chunk() -> None:
    rec = _rec(0.0, [0.10, 0.14, 0.16], [1, 4, 2], 7)
    assert itl_values(rec) == pytest.approx([0.01] * 4 + [0.01] * 2)
    unknown = _rec(0.0, [0.10, 0.14, 0.16], [None, None, None], 7)
    assert itl_values(unknown) == pytest.approx([0.04, 0.02])


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.sampled_from([50, 90, 99]))
def test_percentile_matches_numpy_linear(values: list[float], q: int) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-6)


def test_cell_stats_duration_throughput_failures_goodput() -> None:
    records = [
        _rec(0.0, [0.1, 0.3], [1, 3], 4),  # ends 0.301
        _rec(0.05, [0.2, 0.4], [1, 1], 2),  # ends 0.451
        _rec(0.1, [], [], None, error="HTTP 500: boom"),  # ends 0.6
    ]
    s = cell_stats(records, Slo(ttft_ms=150))
    assert s.requests == 3
    assert s.completed == 2
    assert s.failed == 1
    assert s.failure_reasons == {"HTTP 500: boom": 1}
    assert s.duration_s == pytest.approx(0.6)
    assert s.total_output_tokens == 6
    assert s.output_tok_s == pytest.approx(6 / 0.6)
    assert s.ttft_ms.p50 == pytest.approx(150.0)
    assert s.slo_met == 1  # only the first meets TTFT <= 150 ms
    assert s.goodput_req_s == pytest.approx(1 / 0.6)
    assert s.itl_ms.count == 3 + 1


def test_slo_checks_every_bound() -> None:
    rec = _rec(0.0, [0.1, 1.1], [1, 10], 11)  # TPOT 100 ms, E2E 1100 ms
    assert meets_slo(rec, Slo(ttft_ms=200, tpot_ms=150, e2e_ms=2000))
    assert not meets_slo(rec, Slo(tpot_ms=50))
    assert not meets_slo(rec, Slo(e2e_ms=1000))
    assert not meets_slo(_rec(0.0, [], [], None, error="x"), Slo(ttft_ms=1e9))


def test_empty_cell_has_no_values() -> None:
    s = cell_stats([], Slo())
    assert s.ttft_ms.p50 is None
    assert s.output_tok_s == 0.0
    assert s.goodput_req_s is None
