"""Per-request and per-cell statistics, computed only from recorded requests.

Definitions (anchored on ``vllm bench serve`` and ``sglang.bench_serving``):

- TTFT: request sent -> first content chunk. E2E: request sent -> last content chunk.
- TPOT = (E2E - TTFT) / (output_tokens - 1), for requests with more than one token.
- ITL: gaps between content chunks (a chunk: the tokens one network read brought, see
  ``client._fast_block``); a gap is split evenly over the tokens the later chunk
  carried when that count is known (so a 4-token chunk after 40 ms gives four 10 ms
  values), else it counts once.
- Per-request decode speed = (output_tokens - 1) / (E2E - TTFT).
- Output throughput = sum of output tokens / measured wall time (first request sent to
  last request over; warm-up is never part of it).
- Goodput = requests meeting every SLO / measured wall time.
- Percentiles are over pooled values with linear interpolation (numpy's default).
- Concurrency achieved: requests in flight over the measured wall time, from each
  request's send and end: the maximum, and the time-weighted mean.
- Steady state: from the send that filled the cell to its concurrency (the C-th send) to
  the last send; the whole concurrency is in flight throughout (a request ends, the next
  starts). Steady output tok/s = tokens streamed inside that window / its length, from
  every chunk's time and token count. None when the cell never fills (requests <= C).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specops.bench.client import RequestRecord
from specops.bench.plan import Slo

__all__ = [
    "CellStats",
    "Distribution",
    "cell_stats",
    "decode_tok_s",
    "in_flight",
    "itl_values",
    "meets_slo",
    "percentile",
    "steady_state",
    "tpot_s",
]


def percentile(values: Sequence[float], q: float, *, is_sorted: bool = False) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] of non-empty ``values``."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = values if is_sorted else sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    """Summary of one quantity over a cell; all None when there are no values."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    min: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return cls(0, None, None, None, None, None, None)
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            p50=percentile(ordered, 50, is_sorted=True),
            p90=percentile(ordered, 90, is_sorted=True),
            p99=percentile(ordered, 99, is_sorted=True),
            min=ordered[0],
            max=ordered[-1],
        )


def tpot_s(rec: RequestRecord) -> float | None:
    if rec.error or rec.ttft_s is None or rec.e2e_s is None or not rec.output_tokens:
        return None
    if rec.output_tokens < 2:
        return None
    return (rec.e2e_s - rec.ttft_s) / (rec.output_tokens - 1)


def decode_tok_s(rec: RequestRecord) -> float | None:
    if rec.error or rec.ttft_s is None or rec.e2e_s is None or not rec.output_tokens:
        return None
    span = rec.e2e_s - rec.ttft_s
    if rec.output_tokens < 2 or span <= 0:
        return None
    return (rec.output_tokens - 1) / span


def itl_values(rec: RequestRecord) -> list[float]:
    """Inter-token latencies in seconds, each chunk gap split over its tokens."""
    values: list[float] = []
    times = rec.chunk_times
    for i in range(1, len(times)):
        gap = times[i] - times[i - 1]
        tokens = rec.chunk_tokens[i] if i < len(rec.chunk_tokens) else None
        if tokens is not None and tokens > 1:
            values.extend([gap / tokens] * tokens)
        else:
            values.append(gap)
    return values


def meets_slo(rec: RequestRecord, slo: Slo) -> bool:
    if rec.error or rec.ttft_s is None or rec.e2e_s is None:
        return False
    if slo.ttft_ms is not None and rec.ttft_s * 1000 > slo.ttft_ms:
        return False
    if slo.e2e_ms is not None and rec.e2e_s * 1000 > slo.e2e_ms:
        return False
    if slo.tpot_ms is not None:
        tpot = tpot_s(rec)
        if tpot is not None and tpot * 1000 > slo.tpot_ms:
            return False
    return True


@dataclass(frozen=True)
class CellStats:
    """Aggregates of one (concurrency, context length) cell; latencies in milliseconds."""

    requests: int
    completed: int
    failed: int
    failure_reasons: dict[str, int]
    duration_s: float
    total_output_tokens: int
    total_prompt_tokens: int
    output_tok_s: float
    request_rate: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    decode_tok_s: Distribution
    output_tokens: Distribution
    goodput_req_s: float | None
    slo_met: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    # Added in results schema 2; a schema-1 file reads them as these defaults.
    concurrency_max: int | None = None  # most requests in flight at once
    concurrency_mean: float | None = None  # time-weighted mean in flight (measured span)
    steady_s: float | None = None  # length of the steady window (all C in flight)
    steady_output_tok_s: float | None = None  # output tok/s inside the steady window

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellStats:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "decode_tok_s", "output_tokens"):
            values[key] = Distribution(**values[key])
        return cls(**values)


def _reason_key(error: str) -> str:
    # "HTTP 500: long body" -> keep the class of failure readable and bounded
    return error if len(error) <= 160 else error[:157] + "..."


def _span(rec: RequestRecord) -> tuple[float, float]:
    return rec.t_sent, rec.t_sent + (rec.done_s if rec.done_s is not None else 0.0)


def in_flight(records: Sequence[RequestRecord]) -> tuple[int, float]:
    """(max, time-weighted mean) requests in flight from first send to last end."""
    if not records:
        return 0, 0.0
    events: list[tuple[float, int]] = []
    for rec in records:
        start, end = _span(rec)
        events += [(start, 1), (end, -1)]
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    level = peak = 0
    area = 0.0
    last = events[0][0]
    for t, step in events:
        area += level * (t - last)
        last = t
        level += step
        peak = max(peak, level)
    span = events[-1][0] - events[0][0]
    return peak, (area / span if span > 0 else float(peak))


def _chunk_tokens(rec: RequestRecord) -> list[float]:
    """Tokens each content chunk carried (evenly spread when the server did not say)."""
    known = rec.chunk_tokens
    if known and len(known) == len(rec.chunk_times) and all(t is not None for t in known):
        return [float(t or 0) for t in known]
    n = len(rec.chunk_times)
    return [(rec.output_tokens or 0) / n] * n if n else []


def steady_state(
    records: Sequence[RequestRecord], concurrency: int
) -> tuple[float | None, float | None]:
    """(window seconds, output tok/s in it) while the whole concurrency is in flight."""
    sends = sorted(r.t_sent for r in records)
    if concurrency < 1 or len(sends) <= concurrency:
        return None, None
    begin, end = sends[concurrency - 1], sends[-1]
    if end <= begin:
        return None, None
    tokens = 0.0
    for rec in records:
        if rec.error is not None:
            continue
        for at, n in zip(rec.chunk_times, _chunk_tokens(rec), strict=True):
            if begin <= rec.t_sent + at < end:
                tokens += n
    return end - begin, tokens / (end - begin)


def cell_stats(
    records: Sequence[RequestRecord], slo: Slo, concurrency: int | None = None
) -> CellStats:
    """Aggregate the measured records of one cell (warm-up records never get here).

    ``concurrency``: the cell's level, for the steady-state window (None: no window).
    """
    ok = [r for r in records if r.error is None]
    failed = [r for r in records if r.error is not None]
    reasons = Counter(_reason_key(r.error or "") for r in failed)
    if records:
        start = min(r.t_sent for r in records)
        end = max(r.t_sent + (r.done_s if r.done_s is not None else 0.0) for r in records)
        duration = max(end - start, 0.0)
    else:
        duration = 0.0
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    ms = 1000.0
    ttft = [r.ttft_s * ms for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s * ms for r in ok if r.e2e_s is not None]
    tpots = [t * ms for t in (tpot_s(r) for r in ok) if t is not None]
    itls = [v * ms for r in ok for v in itl_values(r)]
    decode = [d for d in (decode_tok_s(r) for r in ok) if d is not None]
    goodput: float | None = None
    met: int | None = None
    if not slo.is_empty():
        met = sum(1 for r in ok if meets_slo(r, slo))
        goodput = met / duration if duration > 0 else 0.0
    peak, mean = in_flight(records)
    steady_s, steady_tok_s = steady_state(records, concurrency or 0)
    return CellStats(
        requests=len(records),
        completed=len(ok),
        failed=len(failed),
        failure_reasons=dict(reasons),
        duration_s=duration,
        total_output_tokens=out_tokens,
        total_prompt_tokens=prompt_tokens,
        output_tok_s=out_tokens / duration if duration > 0 else 0.0,
        request_rate=len(ok) / duration if duration > 0 else 0.0,
        ttft_ms=Distribution.of(ttft),
        tpot_ms=Distribution.of(tpots),
        itl_ms=Distribution.of(itls),
        e2e_ms=Distribution.of(e2e),
        decode_tok_s=Distribution.of(decode),
        output_tokens=Distribution.of([float(r.output_tokens or 0) for r in ok]),
        goodput_req_s=goodput,
        slo_met=met,
        concurrency_max=peak,
        concurrency_mean=mean,
        steady_s=steady_s,
        steady_output_tok_s=steady_tok_s,
    )
