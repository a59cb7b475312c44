"""Intervals over requests (bench.intervals): on the H200's recorded cells and on
seeded simulations whose true values are known."""

from __future__ import annotations

import random
import statistics

import pytest
from plugins.scripts import REPO

from specops.bench.client import RequestRecord
from specops.bench.intervals import CellBoot, Estimate, min_values, ratio_estimate
from specops.bench.metrics import Acceptance
from specops.bench.plan import Slo
from specops.bench.results import Cell, load_results
from specops.bench.stats import cell_stats

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"


def test_a_percentile_needs_a_value_beyond_it() -> None:
    assert (min_values(50), min_values(90), min_values(99)) == (2, 10, 100)


def test_the_h200_cells_get_intervals_and_their_p90_of_8_requests_is_marked() -> None:
    results = load_results(RUN / "sweep" / "runs" / "num_steps=3" / "r1.json")
    c1, c4, c16 = results.cells
    boot = CellBoot([c1])
    tok_s = boot.estimate("output_tok_s")
    assert tok_s.value == pytest.approx(c1.stats.output_tok_s)
    assert tok_s.low is not None
    assert tok_s.high is not None
    assert tok_s.low < tok_s.value < tok_s.high
    p50 = boot.estimate("tpot_ms_p50")
    assert p50.value == pytest.approx(c1.stats.tpot_ms.p50)
    # 8 requests: no value lies beyond a p90, so it is marked, never a figure
    p90 = boot.estimate("tpot_ms_p90")
    assert (p90.value, p90.short) == (None, "8 req < 10 for p90")
    assert not p90.shown
    # C=16 sent 16: its p90 is shown, its p99 is not
    big = CellBoot([c16])
    assert big.estimate("ttft_ms_p90").shown
    assert big.estimate("ttft_ms_p99").short == "16 req < 100 for p99"
    # the same requests give the same interval on every report (seeded)
    again = CellBoot([c1]).estimate("output_tok_s")
    assert (again.low, again.high) == (tok_s.low, tok_s.high)
    # a cell over itself is 1 with no spread; plain over the draft model beyond noise
    assert ratio_estimate(boot, boot, "output_tok_s") == Estimate(1.0, 1.0, 1.0, 8)
    plain = load_results(RUN / "bench-plain" / "results.json").cells[0]
    ratio = ratio_estimate(CellBoot([plain]), boot, "output_tok_s")
    assert ratio.value == pytest.approx(plain.stats.output_tok_s / c1.stats.output_tok_s)
    assert ratio.low is not None
    assert ratio.low > 1.0
    assert c4.records  # every cell kept its requests


def _cell(tpots: list[float], tokens: int = 32) -> Cell:
    """A cell of one-at-a-time requests (C=1) with these per-token times."""
    records = []
    t = 0.0
    for i, tpot in enumerate(tpots):
        ttft = 0.02
        e2e = ttft + tpot * (tokens - 1)
        records.append(
            RequestRecord(
                index=i,
                context_tokens=64,
                t_sent=t,
                ttft_s=ttft,
                e2e_s=e2e,
                done_s=e2e,
                output_tokens=tokens,
            )
        )
        t += e2e
    return Cell(1, 64, "ok", cell_stats(records, Slo(), 1), Acceptance("none"), 0, 0, "", records)


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)  # noqa: S311 - a seeded simulation
    true_median = 0.010  # lognormal TPOT with median 10 ms
    covered = 0
    trials = 60
    for _ in range(trials):
        tpots = [true_median * rng.lognormvariate(0, 0.3) for _ in range(40)]
        est = CellBoot([_cell(tpots)], resamples=300).estimate("tpot_ms_p50")
        assert est.low is not None
        assert est.high is not None
        covered += est.low <= true_median * 1000 <= est.high
    assert 0.83 <= covered / trials <= 1.0, covered


def test_throughput_interval_widens_with_the_requests_spread() -> None:
    steady = CellBoot([_cell([0.01] * 30)]).estimate("output_tok_s")
    rng = random.Random(3)  # noqa: S311 - a seeded simulation
    spread = CellBoot([_cell([0.01 * rng.lognormvariate(0, 0.5) for _ in range(30)])])
    wide = spread.estimate("output_tok_s")
    assert steady.low == pytest.approx(steady.value)
    assert steady.high == pytest.approx(steady.value)
    assert wide.low is not None
    assert wide.high is not None
    assert wide.value is not None
    assert (wide.high - wide.low) / wide.value > 0.05
    # two runs pooled: tokens over the runs' wall time
    two = CellBoot([_cell([0.01] * 30), _cell([0.02] * 30)]).estimate("output_tok_s")
    one, other = _cell([0.01] * 30).stats, _cell([0.02] * 30).stats
    pooled = (one.total_output_tokens + other.total_output_tokens) / (
        one.duration_s + other.duration_s
    )
    assert two.value == pytest.approx(pooled)
    assert statistics.fmean([one.output_tok_s, other.output_tok_s]) > pooled
