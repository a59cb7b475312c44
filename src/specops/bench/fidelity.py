"""P1's protocol arithmetic: the order of the runs, the paired-ratio interval, the verdicts.

``scripts/experiments/bench-fidelity.py`` measures our client ("ours", A) and ``vllm bench serve``
("theirs", B) on one server; this module decides in which order and what the runs say.

- **Order** (:func:`schedule`): a warm-up run of each client at every concurrency before
  any measured run (not counted), then, per concurrency, ``repeats`` pairs in ABBA order
  (A B, B A, A B, ...): a drift of the server that is linear in time lands on A in one
  pair and on B in the next, so it cancels over an even number of pairs (over an odd
  number, one pair's share of it is left).
- **Interval** (:func:`paired_ratio_interval`): per pair the log of ours/theirs; the mean
  of those logs with a Student-t interval, turned back into a ratio. Why t and logs:
  there are only 3-5 pairs, and a bootstrap percentile interval from so few values can
  never reach beyond the observed extremes (with 3 pairs it has 10 distinct resamples),
  so it claims more certainty than the data hold; the t interval widens honestly with
  few pairs (t = 4.30 for 3 pairs at 95 %). Logs make ours/theirs and theirs/ours
  symmetric and turn multiplicative run-to-run noise additive. Pairing removes what
  both runs of a pair share (they run back to back). It assumes the pairs' log ratios
  are independent and roughly normal; the per-pair ratios are printed beside it.
- **Verdict** (:func:`verdict`): "met" only when the whole interval lies inside
  ``1 +- target``, "not met" when it lies wholly outside, "undecided (noise)" otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CLIENTS",
    "MET",
    "NOT_MET",
    "TOO_FEW",
    "UNDECIDED",
    "RatioInterval",
    "Slot",
    "Spread",
    "acceptance_verdict",
    "overall",
    "pair_order",
    "paired_ratio_interval",
    "schedule",
    "spread",
    "t_cdf",
    "t_quantile",
    "verdict",
]

CLIENTS = ("ours", "theirs")
MET = "met"
NOT_MET = "not met"
UNDECIDED = "undecided (noise)"
TOO_FEW = "undecided (<2 pairs)"
METHOD = "Student-t interval of the mean of per-pair log(ours/theirs), exponentiated"


@dataclass(frozen=True)
class Slot:
    """One run of the protocol: its place in the order, the client, the concurrency;
    ``repeat`` is the pair it belongs to (None for a warm-up run, which is not counted)."""

    seq: int
    concurrency: int
    client: str
    phase: str  # "warmup" or "measured"
    repeat: int | None


def pair_order(repeat: int) -> tuple[str, str]:
    """The clients of pair ``repeat`` in the order they run: A B, then B A, ... (ABBA)."""
    if repeat < 0:
        raise ValueError(f"repeat must be >= 0 (got {repeat})")
    return CLIENTS if repeat % 2 == 0 else (CLIENTS[1], CLIENTS[0])


def schedule(concurrencies: Sequence[int], repeats: int) -> list[Slot]:
    """Every run in order: first a warm-up of both clients at every concurrency (in the
    order given, the client that starts alternating between concurrencies), then per
    concurrency ``repeats`` pairs in ABBA order."""
    if not concurrencies:
        raise ValueError("concurrencies must name at least one concurrency")
    if any(c < 1 for c in concurrencies):
        raise ValueError(f"concurrencies must be >= 1 (got {list(concurrencies)})")
    if len(set(concurrencies)) != len(concurrencies):
        raise ValueError(f"concurrencies must not repeat (got {list(concurrencies)})")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1 (got {repeats})")
    slots: list[Slot] = []
    for i, c in enumerate(concurrencies):
        for client in pair_order(i):
            slots.append(Slot(len(slots), c, client, "warmup", None))
    for c in concurrencies:
        for r in range(repeats):
            for client in pair_order(r):
                slots.append(Slot(len(slots), c, client, "measured", r))
    return slots


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df must be > 0 (got {df})")
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)
    return 1 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on :func:`t_cdf`, to ~1e-12)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1 + num * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1 - c * d) < 1e-15:
            break
    return front * (f - 1) / a


@dataclass(frozen=True)
class RatioInterval:
    """ours/theirs over the pairs: the geometric mean of the per-pair ratios and its
    interval (None with fewer than two pairs)."""

    point: float
    low: float | None
    high: float | None
    pairs: int
    confidence: float
    ratios: tuple[float, ...]
    method: str = METHOD


def paired_ratio_interval(
    ours: Sequence[float | None], theirs: Sequence[float | None], confidence: float = 0.95
) -> RatioInterval | None:
    """The interval of ours/theirs from pairs (ours[i], theirs[i]); a pair with a missing
    or non-positive figure is left out; None when no pair is left."""
    if len(ours) != len(theirs):
        raise ValueError(f"ours and theirs must pair up ({len(ours)} vs {len(theirs)} runs)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    ratios = tuple(
        a / b
        for a, b in zip(ours, theirs, strict=True)
        if a is not None and b is not None and a > 0 and b > 0
    )
    if not ratios:
        return None
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioInterval(math.exp(mean), None, None, 1, confidence, ratios)
    half = t_quantile((1 + confidence) / 2, len(logs) - 1) * statistics.stdev(logs)
    half /= math.sqrt(len(logs))
    return RatioInterval(
        math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs), confidence, ratios
    )


def verdict(interval: RatioInterval | None, target: float = 0.05) -> str:
    """The verdict on an interval of ours/theirs: "met" when it lies wholly within
    1 +- target, "not met" when wholly outside, "undecided (noise)" when it straddles a
    bound, "undecided (<2 pairs)" when there is no interval."""
    if not 0 < target < 1:
        raise ValueError(f"target must be in (0, 1) (got {target})")
    if interval is None or interval.low is None or interval.high is None:
        return TOO_FEW
    low, high = 1 - target, 1 + target
    if interval.low >= low and interval.high <= high:
        return MET
    if interval.high < low or interval.low > high:
        return NOT_MET
    return UNDECIDED


def overall(verdicts: Iterable[str]) -> str:
    """All met: met; any not met: not met; else undecided."""
    seen = list(verdicts)
    if not seen:
        return TOO_FEW
    if all(v == MET for v in seen):
        return MET
    if any(v == NOT_MET for v in seen):
        return NOT_MET
    return UNDECIDED


@dataclass(frozen=True)
class Spread:
    """How much one figure moved over runs: relative standard deviation and range."""

    runs: int
    mean: float
    cv: float | None  # stdev / mean (None with one run)
    range_rel: float  # (max - min) / mean
    low: float
    high: float


def spread(values: Iterable[float | None]) -> Spread | None:
    """The run-to-run spread of ``values`` (missing ones left out); None when none."""
    seen = [v for v in values if v is not None]
    if not seen:
        return None
    mean = statistics.fmean(seen)
    if mean == 0:
        return Spread(len(seen), 0.0, None, 0.0, min(seen), max(seen))
    cv = statistics.stdev(seen) / abs(mean) if len(seen) > 1 else None
    return Spread(len(seen), mean, cv, (max(seen) - min(seen)) / abs(mean), min(seen), max(seen))


def acceptance_verdict(
    ours: Sequence[float | None], theirs: Sequence[float | None], tolerance: float = 1e-3
) -> str:
    """Whether both clients saw the same acceptance length: "equal" when every pair
    agrees within ``tolerance`` (relative), "differs" when one does not, "n/a (no
    speculation)" when no run reported one."""
    pairs = [(a, b) for a, b in zip(ours, theirs, strict=True) if a is not None or b is not None]
    if not pairs:
        return "n/a (no speculation)"
    for a, b in pairs:
        if a is None or b is None or abs(a - b) > tolerance * max(abs(a), abs(b)):
            return "differs"
    return "equal"
