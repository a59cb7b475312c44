"""95 % intervals for the figures a decision reads, from the recorded requests.

Nothing here measures: a cell's figures come from its recorded requests (one run's
cell, or the same cell of several runs pooled). The interval is a percentile bootstrap
over requests: each resample draws every run's requests again with replacement (so a
resample keeps each run's size), and every statistic of a resample is computed from the
same draw (TTFT, TPOT and throughput move together, as goodput needs them to).

- Output tok/s of a run cannot be recomputed from resampled requests (it is tokens over
  the run's wall time, which overlapping requests share). By Little's law it equals the
  mean number in flight times the tokens per request-second (sum of output tokens over
  the sum of the requests' times); a resample scales the run's measured tok/s by its own
  tokens per request-second over the run's. Several runs: tokens over wall time summed
  over the runs (the value), each run's resampled tok/s weighted by its wall time.
- Request throughput (completed requests over wall time) likewise, with completed
  requests per request-second.
- A percentile ``q`` is shown only when at least one value lies beyond it:
  :func:`min_values` (p50: 2, p90: 10, p99: 100 values); with fewer it is *marked*
  (``Estimate.short`` says why) and never printed as a figure.
- Ratios (speed-up over no speculation) pair the resamples of two cells, each drawn
  from its own requests: the interval of a over b.

Resamples are seeded (the same results give the same interval on every report); a
resample gathers its requests' values at C speed (``operator.itemgetter``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from specops.bench.stats import percentile, tpot_s

if TYPE_CHECKING:
    from specops.bench.results import Cell

__all__ = [
    "CONFIDENCE",
    "METRICS",
    "RESAMPLES",
    "CellBoot",
    "Estimate",
    "min_values",
    "ratio_estimate",
]

CONFIDENCE = 0.95
RESAMPLES = 1000
# The statistics a CellBoot gives: output tok/s, request throughput, and percentiles of
# TTFT and TPOT (ms) and of the per-request decode speed.
METRICS: tuple[str, ...] = (
    "output_tok_s", "request_rate",
    "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99",
)  # fmt: skip


def min_values(q: float) -> int:
    """Values a percentile ``q`` needs before it is shown: at least one value beyond it
    (n * (1 - q/100) >= 1): p50 2, p90 10, p99 100."""
    return math.ceil(1.0 / (1.0 - q / 100.0) - 1e-9)


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95 % interval; ``short`` (and no value) when too few values."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # the values (requests) it is computed from
    short: str | None = None  # why it is not shown, e.g. "8 requests < 10 for p90"

    @property
    def shown(self) -> bool:
        return self.value is not None and self.short is None

    def to_dict(self) -> dict[str, float | int | str | None]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n,
                "short": self.short}  # fmt: skip


def _quantiles(samples: Sequence[float]) -> tuple[float | None, float | None]:
    finite = sorted(s for s in samples if not math.isnan(s))
    if not finite:
        return None, None
    tail = (1.0 - CONFIDENCE) / 2 * 100
    return percentile(finite, tail, is_sorted=True), percentile(finite, 100 - tail, is_sorted=True)


@dataclass(frozen=True)
class _Run:
    """One run's requests of a cell, as the bootstrap needs them."""

    tok_s: float  # the run's measured output tok/s
    rate: float  # the run's measured request throughput
    duration: float  # the run's measured wall time (s)
    tokens: tuple[float, ...]  # output tokens per request (0 for a failed one)
    busy: tuple[float, ...]  # request time per request (s)
    ok: tuple[bool, ...]
    ttft_ms: tuple[float | None, ...]
    tpot_ms: tuple[float | None, ...]


def _run_of(cell: Cell) -> _Run:
    tokens, busy, ok, ttft, tpot = [], [], [], [], []
    for r in cell.records:
        tokens.append(float(r.output_tokens or 0) if r.ok else 0.0)
        busy.append(float(r.done_s if r.done_s is not None else (r.e2e_s or 0.0)))
        ok.append(r.ok)
        ttft.append(r.ttft_s * 1000 if r.ok and r.ttft_s is not None else None)
        t = tpot_s(r)
        tpot.append(t * 1000 if t is not None else None)
    s = cell.stats
    return _Run(s.output_tok_s, s.request_rate, s.duration_s, tuple(tokens), tuple(busy),
                tuple(ok), tuple(ttft), tuple(tpot))  # fmt: skip


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def _resamples(wanted: int, requests: int) -> int:
    """Resamples for a cell of ``requests``: ``wanted`` (1000) up to 200 requests, fewer
    beyond (at least 200: each end of the 95 % interval rests on 5 or more), so a
    seeds'-size leaderboard (35 cells, 4 runs of 256 requests) takes seconds."""
    return max(min(wanted, 200), min(wanted, 200_000 // max(requests, 1)))


def _total(values: Any) -> float:
    """The sum of what an itemgetter returned (a tuple, or one value for n = 1)."""
    return float(sum(values)) if isinstance(values, tuple) else float(values)


def _values(values: Any) -> tuple[float, ...]:
    return values if isinstance(values, tuple) else (values,)


class CellBoot:
    """The bootstrap of one cell over its requests, pooled over one or more runs.

    ``cells``: the same (concurrency, context) cell of each run (a run without records,
    e.g. a results file whose requests were dropped, gives point values only).
    """

    def __init__(self, cells: Sequence[Cell], resamples: int = RESAMPLES, seed: int = 0) -> None:
        self.runs = [_run_of(c) for c in cells if c.records]
        self.cells = list(cells)
        self._samples: dict[str, list[float]] = {}
        self._point: dict[str, float | None] = {}
        self._n: dict[str, int] = {}
        self._compute(resamples, seed)

    @property
    def requests(self) -> int:
        return sum(len(r.tokens) for r in self.runs)

    def _compute(self, resamples: int, seed: int) -> None:
        total = sum(r.duration for r in self.runs)
        if self.runs and total > 0:
            self._point["output_tok_s"] = sum(r.tok_s * r.duration for r in self.runs) / total
            self._point["request_rate"] = sum(r.rate * r.duration for r in self.runs) / total
        else:
            self._point["output_tok_s"] = self._point["request_rate"] = None
        pooled: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": []}
        for r in self.runs:
            pooled["ttft_ms"] += [v for v in r.ttft_ms if v is not None]
            pooled["tpot_ms"] += [v for v in r.tpot_ms if v is not None]
        for name, values in pooled.items():
            for q in (50, 90, 99):
                key = f"{name}_p{q}"
                self._n[key] = len(values)
                self._point[key] = percentile(values, q) if values else None
        self._n["output_tok_s"] = self._n["request_rate"] = self.requests
        if not self.runs or total <= 0:
            return
        # Every resample draws each run's requests again; all the statistics of a
        # resample come from the same draw (gathered by itemgetter: C speed, no numpy).
        rng = random.Random(seed)  # noqa: S311 - a seeded bootstrap, no secret
        out: dict[str, list[float]] = {m: [] for m in METRICS}
        prepared = []
        for r in self.runs:
            n = len(r.tokens)
            ttft = [math.nan if v is None else v for v in r.ttft_ms]
            tpot = [math.nan if v is None else v for v in r.tpot_ms]
            oks = [1.0 if ok else 0.0 for ok in r.ok]
            base_tok = _ratio(sum(r.tokens), sum(r.busy))
            base_ok = _ratio(sum(oks), sum(r.busy))
            prepared.append((r, range(n), n, ttft, tpot, oks, base_tok, base_ok))
        # a failed request has no TTFT/TPOT (NaN): filtered only where there is one
        gaps = any(v is None for r in self.runs for v in (*r.ttft_ms, *r.tpot_ms))
        for _ in range(_resamples(resamples, self.requests)):
            tok_s = rate = 0.0
            draw_ttft: list[float] = []
            draw_tpot: list[float] = []
            for r, population, n, ttft, tpot, oks, base_tok, base_ok in prepared:
                pick = itemgetter(*rng.choices(population, k=n))
                busy = _total(pick(r.busy))
                tok_s += (
                    r.tok_s * _ratio(_ratio(_total(pick(r.tokens)), busy), base_tok) * r.duration
                )
                rate += r.rate * _ratio(_ratio(_total(pick(oks)), busy), base_ok) * r.duration
                draw_ttft.extend(_values(pick(ttft)))
                draw_tpot.extend(_values(pick(tpot)))
            out["output_tok_s"].append(tok_s / total)
            out["request_rate"].append(rate / total)
            for name, values in (("ttft_ms", draw_ttft), ("tpot_ms", draw_tpot)):
                ordered = sorted(v for v in values if not math.isnan(v)) if gaps else sorted(values)
                for q in (50, 90, 99):
                    out[f"{name}_p{q}"].append(
                        percentile(ordered, q, is_sorted=True) if ordered else math.nan
                    )
        self._samples = out

    def samples(self, metric: str) -> list[float]:
        """The metric's bootstrap resamples ([] when there are no records)."""
        if metric not in METRICS:
            raise KeyError(f"{metric}: not one of {', '.join(METRICS)}")
        return self._samples.get(metric, [])

    def estimate(self, metric: str) -> Estimate:
        """The metric's value and 95 % interval, or why it is not shown."""
        if metric not in METRICS:
            raise KeyError(f"{metric}: not one of {', '.join(METRICS)}")
        n = self._n.get(metric, 0)
        value = self._point.get(metric)
        if metric.rsplit("_p", 1)[-1].isdigit() and "_p" in metric:
            q = float(metric.rsplit("_p", 1)[1])
            need = min_values(q)
            if n < need:
                return Estimate(None, n=n, short=f"{n} req < {need} for p{q:g}")
        if value is None:
            return Estimate(None, n=n, short="no completed requests")
        low, high = _quantiles(self.samples(metric))
        return Estimate(value, low, high, n)


def ratio_estimate(a: CellBoot, b: CellBoot, metric: str, invert: bool = False) -> Estimate:
    """``a``'s metric over ``b``'s (``invert``: ``b``'s over ``a``'s, e.g. a TPOT speed-up),
    with the interval of the paired resamples."""
    ea, eb = a.estimate(metric), b.estimate(metric)
    if not ea.shown or not eb.shown:
        return Estimate(None, n=min(ea.n, eb.n), short=ea.short or eb.short or "not measured")
    num, den = (eb, ea) if invert else (ea, eb)
    sn, sd = (
        (b.samples(metric), a.samples(metric)) if invert else (a.samples(metric), b.samples(metric))
    )
    if not num.value or not den.value:
        return Estimate(None, n=min(ea.n, eb.n), short="zero in a run")
    low, high = _quantiles([_ratio(x, y) for x, y in zip(sn, sd, strict=False)])
    return Estimate(num.value / den.value, low, high, min(ea.n, eb.n))
