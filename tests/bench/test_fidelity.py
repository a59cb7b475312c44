"""P1's protocol arithmetic (specops.bench.fidelity): the ABBA order with warm-ups first,
the Student-t quantiles, the paired-ratio interval, its coverage, and the verdicts."""

from __future__ import annotations

import math
import random

import pytest

from specops.bench.fidelity import (
    MET,
    NOT_MET,
    TOO_FEW,
    UNDECIDED,
    RatioInterval,
    acceptance_verdict,
    overall,
    pair_order,
    paired_ratio_interval,
    schedule,
    spread,
    t_cdf,
    t_quantile,
    verdict,
)


def test_schedule_warms_every_concurrency_before_any_measured_run() -> None:
    slots = schedule([1, 4, 16], 3)
    phases = [s.phase for s in slots]
    first_measured = phases.index("measured")
    assert set(phases[:first_measured]) == {"warmup"}
    assert "warmup" not in phases[first_measured:]
    warm = [(s.concurrency, s.client) for s in slots[:first_measured]]
    assert sorted(warm) == sorted((c, w) for c in (1, 4, 16) for w in ("ours", "theirs"))
    assert all(s.repeat is None for s in slots[:first_measured])
    assert [s.seq for s in slots] == list(range(len(slots)))


def test_schedule_is_abba_per_concurrency() -> None:
    slots = schedule([1, 4], 4)
    for c in (1, 4):
        measured = [s for s in slots if s.phase == "measured" and s.concurrency == c]
        assert [s.client[0] for s in measured] == list("otto" * 2)  # A B B A A B B A
        assert [s.repeat for s in measured] == [0, 0, 1, 1, 2, 2, 3, 3]
    # per concurrency the measured runs are contiguous: both runs of a pair back to back
    cs = [s.concurrency for s in slots if s.phase == "measured"]
    assert cs == [1] * 8 + [4] * 8


def test_pair_order_alternates() -> None:
    assert [pair_order(r) for r in range(3)] == [
        ("ours", "theirs"),
        ("theirs", "ours"),
        ("ours", "theirs"),
    ]
    with pytest.raises(ValueError, match="repeat must be >= 0"):
        pair_order(-1)


def test_abba_cancels_a_linear_drift_that_ab_ab_does_not() -> None:
    """A server that slows by the same factor every run, and two identical clients: the
    ABBA pairs' geometric mean ratio is exactly 1 over an even number of pairs; always
    running A first would blame the drift on B."""
    step = 0.03

    def tpot(seq: int) -> float:
        return 5.0 * math.exp(step * seq)

    slots = schedule([4], 4)
    runs = {(s.client, s.repeat): tpot(s.seq) for s in slots if s.phase == "measured"}
    ours = [runs[("ours", r)] for r in range(4)]
    theirs = [runs[("theirs", r)] for r in range(4)]
    iv = paired_ratio_interval(ours, theirs)
    assert iv is not None
    assert iv.point == pytest.approx(1.0, abs=1e-12)
    ab_ab = paired_ratio_interval(
        [tpot(2 * r) for r in range(4)], [tpot(2 * r + 1) for r in range(4)]
    )
    assert ab_ab is not None
    assert ab_ab.point == pytest.approx(math.exp(-step))


@pytest.mark.parametrize(
    ("concurrencies", "repeats", "message"),
    [
        ([], 3, "at least one"),
        ([0, 4], 3, ">= 1"),
        ([4, 4], 3, "must not repeat"),
        ([1], 0, "repeats must be >= 1"),
    ],
)
def test_schedule_refuses_bad_input(concurrencies: list[int], repeats: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(concurrencies, repeats)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [  # two-sided 95 % and one-sided 95 % values from standard t tables
        (0.975, 1, 12.706204736),
        (0.975, 2, 4.302652730),
        (0.975, 3, 3.182446305),
        (0.975, 4, 2.776445105),
        (0.975, 9, 2.262157163),
        (0.975, 30, 2.042272456),
        (0.95, 5, 2.015048373),
        (0.995, 2, 9.924843201),
        (0.025, 2, -4.302652730),
    ],
)
def test_t_quantile_matches_tables(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-8)


def test_t_cdf_known_values() -> None:
    assert t_cdf(0.0, 3) == pytest.approx(0.5)
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(-1.0, 1) == pytest.approx(0.25)
    assert t_cdf(2.0, 2) == pytest.approx(0.5 + 1 / math.sqrt(6))  # closed form for df=2
    with pytest.raises(ValueError, match="df must be > 0"):
        t_cdf(1.0, 0)
    with pytest.raises(ValueError, match="p must be in"):
        t_quantile(1.0, 3)


def test_paired_ratio_interval_by_hand() -> None:
    iv = paired_ratio_interval([1.0, 1.1, 1.05], [1.0, 1.0, 1.0])
    assert iv is not None
    logs = [0.0, math.log(1.1), math.log(1.05)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302652730 * sd / math.sqrt(3)
    assert iv.point == pytest.approx(math.exp(mean))
    assert iv.low == pytest.approx(math.exp(mean - half))
    assert iv.high == pytest.approx(math.exp(mean + half))
    assert iv.pairs == 3
    assert iv.ratios == pytest.approx((1.0, 1.1, 1.05))


def test_paired_ratio_interval_is_symmetric_in_the_clients() -> None:
    a, b = [4.5, 5.7, 6.0], [4.1, 4.8, 5.6]
    iv, vi = paired_ratio_interval(a, b), paired_ratio_interval(b, a)
    assert iv is not None
    assert vi is not None
    assert iv.low is not None
    assert iv.high is not None
    assert vi.low is not None
    assert vi.high is not None
    assert iv.point == pytest.approx(1 / vi.point)
    assert iv.low == pytest.approx(1 / vi.high)
    assert iv.high == pytest.approx(1 / vi.low)


def test_paired_ratio_interval_edges() -> None:
    assert paired_ratio_interval([None, 0.0], [1.0, 1.0]) is None
    one = paired_ratio_interval([2.0, None], [1.0, 1.0])
    assert one == RatioInterval(2.0, None, None, 1, 0.95, (2.0,))
    with pytest.raises(ValueError, match="must pair up"):
        paired_ratio_interval([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="confidence"):
        paired_ratio_interval([1.0, 1.0], [1.0, 1.0], confidence=1.0)


def test_interval_covers_the_true_ratio_about_95_percent_with_three_pairs() -> None:
    """Seeded simulation: per-pair log ratios ~ N(log 1.02, 0.05). A z interval (1.96)
    would cover ~80 % with 3 pairs; the t interval must cover ~95 %."""
    rng = random.Random(20261203)  # noqa: S311 (a seeded simulation, not a secret)
    true, trials, covered = 1.02, 4000, 0
    for _ in range(trials):
        theirs = [rng.uniform(4, 6) for _ in range(3)]
        ours = [t * math.exp(rng.gauss(math.log(true), 0.05)) for t in theirs]
        iv = paired_ratio_interval(ours, theirs)
        assert iv is not None
        assert iv.low is not None
        assert iv.high is not None
        covered += iv.low <= true <= iv.high
    assert 0.93 <= covered / trials <= 0.97


def _iv(low: float, high: float) -> RatioInterval:
    return RatioInterval((low + high) / 2, low, high, 3, 0.95, (low, high))


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.97, 1.03, MET),
        (0.95, 1.05, MET),  # the bounds belong to the band
        (0.90, 1.01, UNDECIDED),
        (0.99, 1.20, UNDECIDED),
        (0.80, 1.30, UNDECIDED),  # straddles both bounds
        (1.06, 1.20, NOT_MET),
        (0.70, 0.94, NOT_MET),
    ],
)
def test_verdict(low: float, high: float, expected: str) -> None:
    assert verdict(_iv(low, high)) == expected


def test_verdict_without_interval_and_other_targets() -> None:
    assert verdict(None) == TOO_FEW
    assert verdict(RatioInterval(1.0, None, None, 1, 0.95, (1.0,))) == TOO_FEW
    assert verdict(_iv(0.92, 1.08), target=0.10) == MET
    with pytest.raises(ValueError, match="target"):
        verdict(_iv(0.99, 1.01), target=0)


def test_overall() -> None:
    assert overall([MET, MET]) == MET
    assert overall([MET, UNDECIDED]) == UNDECIDED
    assert overall([UNDECIDED, NOT_MET, MET]) == NOT_MET
    assert overall([MET, TOO_FEW]) == UNDECIDED
    assert overall([]) == TOO_FEW


def test_spread() -> None:
    sp = spread([4.0, 5.0, None, 6.0])
    assert sp is not None
    assert sp.runs == 3
    assert sp.mean == pytest.approx(5.0)
    assert sp.cv == pytest.approx(1.0 / 5.0)
    assert sp.range_rel == pytest.approx(0.4)
    assert (sp.low, sp.high) == (4.0, 6.0)
    single = spread([3.0])
    assert single is not None
    assert single.cv is None
    assert single.range_rel == 0.0
    assert spread([None]) is None


def test_acceptance_verdict() -> None:
    assert acceptance_verdict([None, None], [None, None]) == "n/a (no speculation)"
    assert acceptance_verdict([2.5, 2.6], [2.5, 2.6]) == "equal"
    assert acceptance_verdict([2.5, 2.6], [2.5, 2.7]) == "differs"
    assert acceptance_verdict([2.5], [None]) == "differs"
    assert acceptance_verdict([2.50, 2.6], [2.52, 2.6], tolerance=0.01) == "equal"
