"""Bandwidth roofline for single-stream decode, scaled by speculative acceptance.

Without speculation a decode step reads the model's weights once and yields one token,
so single-stream decode cannot beat ``bandwidth / bytes_per_token`` tokens/s. With
speculation a verify step still reads the weights about once but yields the mean
acceptance length tau of tokens, so the bound becomes ``tau * bandwidth /
bytes_per_token``. The report shows achieved single-stream decode (the median
per-request decode speed at concurrency 1) as a percentage of that bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from specops.bench.results import Results

__all__ = ["RooflineRow", "roofline_rows"]


@dataclass(frozen=True)
class RooflineRow:
    context_tokens: int
    achieved_tok_s: float  # median per-request decode tok/s at concurrency 1
    acceptance_length: float  # tau (1.0 when the cell has no acceptance data)
    roofline_tok_s: float  # bandwidth / bytes_per_token
    bound_tok_s: float  # roofline * tau
    percent_of_bound: float


def roofline_rows(
    results: Results, bandwidth_gb_s: float, bytes_per_token: float
) -> list[RooflineRow]:
    """One row per context length that has a concurrency-1 cell with decode data."""
    if bandwidth_gb_s <= 0 or bytes_per_token <= 0:
        raise ValueError("bandwidth and bytes per token must be > 0")
    base = bandwidth_gb_s * 1e9 / bytes_per_token
    rows: list[RooflineRow] = []
    for cell in results.cells:
        if cell.concurrency != 1 or cell.stats.decode_tok_s.p50 is None:
            continue
        tau = cell.acceptance.mean_acceptance_length or 1.0
        bound = base * tau
        achieved = cell.stats.decode_tok_s.p50
        rows.append(
            RooflineRow(
                context_tokens=cell.context_tokens,
                achieved_tok_s=achieved,
                acceptance_length=tau,
                roofline_tok_s=base,
                bound_tok_s=bound,
                percent_of_bound=100.0 * achieved / bound,
            )
        )
    return rows
