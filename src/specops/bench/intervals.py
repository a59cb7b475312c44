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

Resamples are seeded (the same results give the same interval on every report) and
drawn with numpy: a seeds'-size matrix (35 cells, 256 requests at C = 64, several runs
per candidate) would take minutes of pure Python per leaderboard.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

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
        # Every resample draws each run's requests again (rows: resamples); all the
        # statistics of a row come from the same draw.
        rng = np.random.default_rng(seed)
        tok_s = np.zeros(resamples)
        rate = np.zeros(resamples)
        draws: dict[str, list[npt.NDArray[np.float64]]] = {"ttft_ms": [], "tpot_ms": []}
        for r in self.runs:
            n = len(r.tokens)
            idx = rng.integers(0, n, size=(resamples, n))
            tokens, busy = np.asarray(r.tokens), np.asarray(r.busy)
            ok = np.asarray(r.ok, dtype=float)
            busy_draw = busy[idx].sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                tok_ratio = tokens[idx].sum(axis=1) / busy_draw / (tokens.sum() / busy.sum())
                ok_ratio = ok[idx].sum(axis=1) / busy_draw / (ok.sum() / busy.sum())
            tok_s += r.tok_s * tok_ratio * r.duration
            rate += r.rate * ok_ratio * r.duration
            for name, column in (("ttft_ms", r.ttft_ms), ("tpot_ms", r.tpot_ms)):
                arr = np.array([np.nan if v is None else v for v in column], dtype=float)
                draws[name].append(arr[idx])
        out: dict[str, list[float]] = {
            "output_tok_s": (tok_s / total).tolist(),
            "request_rate": (rate / total).tolist(),
        }
        for name, parts in draws.items():
            matrix = np.concatenate(parts, axis=1)
            empty: npt.NDArray[np.bool_] = np.asarray(np.isnan(matrix).all(axis=1))
            filled = np.where(empty[:, None], 0.0, matrix)
            if np.isnan(filled).any():  # failed requests: no TTFT/TPOT (slow path)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    qs = np.nanpercentile(filled, [50, 90, 99], axis=1)
            else:
                qs = np.percentile(filled, [50, 90, 99], axis=1)
            for row, q in zip(qs, (50, 90, 99), strict=True):
                out[f"{name}_p{q}"] = np.where(empty, np.nan, row).tolist()
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
