"""A plan's price before it runs: cells, requests, tokens and a time estimate.

Nothing here sends a request. Per cell (concurrency x context): the measured requests
(:meth:`Plan.requests_for`: ``max(requests_per_cell, waves_per_cell x C)``, so C = 64
sends 256 with the default 4 waves whatever ``requests_per_cell`` says), its warm-up
requests (``warmup_per_cell`` and its share of the plan's warm-up over every cell,
``warmup_waves x C``), prompt tokens (requests x context) and output tokens (requests x
``output_len``: an upper bound, a request may end early at EOS). HumanEval adds its
problems.

The context lengths are fitted against the server's ``max_model_len`` first
(:func:`~specops.bench.plan.fit_context_lengths`): a length the plan names beyond the
limit is refused here, before anything runs, unless the plan says to clip or drop it.
The limit comes from the caller (``--max-model-len``, the server when asked, or the
last run of that server); unknown, the lengths are not checked and the price says so.

Time: from the last run of that server when one is given (each cell's measured output
tok/s, the nearest measured cell's for a cell it lacks: same context first, then the
nearest concurrency), else the roofline's lower bound (memory-bound decode: a step
reads the weights once for the whole batch, ``bandwidth / bytes_per_token`` steps per
second, one token each; prefill and KV reads left out, which add time, and speculation,
which saves it), else none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import httpx

from specops.bench.plan import Plan, fit_context_lengths, read_api_key
from specops.bench.results import Results
from specops.bench.roofline import Hardware, resolve

__all__ = ["CellPrice", "PlanPrice", "price", "served_max_model_len"]


@dataclass(frozen=True)
class CellPrice:
    concurrency: int
    context_tokens: int
    requests: int  # measured
    warmup: int  # warm-up requests (the cell's own and its share of the plan's)
    prompt_tokens: int  # measured and warm-up
    output_tokens: int  # measured and warm-up, at most
    seconds: float | None  # estimate; None: no basis
    basis: str  # where the estimate comes from


@dataclass
class PlanPrice:
    cells: list[CellPrice]
    notes: list[str] = field(default_factory=list)  # lengths clipped or dropped; checks
    basis: str = ""  # the time estimate's source, in words
    humaneval: int = 0  # problems
    max_model_len: int | None = None

    @property
    def requests(self) -> int:
        return sum(c.requests for c in self.cells)

    @property
    def warmup(self) -> int:
        return sum(c.warmup for c in self.cells)

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.cells)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.cells)

    @property
    def seconds(self) -> float | None:
        """The estimated time of the cells (HumanEval aside), None when any cell has
        no estimate."""
        times = [c.seconds for c in self.cells]
        if not times or any(t is None for t in times):
            return None
        return sum(t for t in times if t is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cells": [c.__dict__ for c in self.cells],
            "requests": self.requests,
            "warmup_requests": self.warmup,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "humaneval_problems": self.humaneval,
            "seconds": self.seconds,
            "basis": self.basis,
            "max_model_len": self.max_model_len,
            "notes": self.notes,
        }


def _history_rate(history: Results, conc: int, ctx: int) -> tuple[float, str] | None:
    """Output tok/s of the nearest cell the last run measured (same context first)."""
    cells = [c for c in history.cells if c.status == "ok" and c.stats.output_tok_s > 0]
    if not cells:
        return None

    def distance(c: Any) -> tuple[float, float]:
        return (
            abs(math.log(c.context_tokens / ctx)),
            abs(math.log(c.concurrency / conc)),
        )

    best = min(cells, key=distance)
    label = f"c{best.concurrency}-ctx{best.context_tokens}"
    exact = best.concurrency == conc and best.context_tokens == ctx
    return best.stats.output_tok_s, f"{history.run_id} {label}{'' if exact else ' (nearest)'}"


def price(
    plan: Plan,
    *,
    max_model_len: int | None = None,
    history: Results | None = None,
) -> PlanPrice:
    """The plan's price (see the module docstring); ValidationError naming the length
    when a context does not fit and the plan says to refuse it."""
    contexts, notes = fit_context_lengths(
        plan.context_lengths, plan.output_len, max_model_len, plan.context_over_limit
    )
    if max_model_len is None:
        notes.append(
            "context lengths not checked: the server's max_model_len is not known"
            " (give --max-model-len, --ask-server, or a last run of the server)"
        )
    hardware: Hardware | str = resolve(plan.roofline) if history is None else "history"
    if history is not None:
        basis = f"the last run of this server, {history.run_id} ({history.created_at})"
    elif isinstance(hardware, Hardware):
        steps = hardware.bandwidth_gb_s * 1e9 / hardware.bytes_per_token
        basis = (
            f"roofline: {steps:.0f} decode steps/s ({hardware.bandwidth_gb_s:g} GB/s over"
            f" {hardware.bytes_per_token:.3g} bytes per token), one token per step; prefill"
            " and KV reads left out (they add time), speculation too (it saves time)"
        )
    else:
        basis = f"no estimate: no last run of this server and no roofline ({hardware})"
    cells = []
    for ctx in contexts:
        for conc in plan.concurrency:
            measured = plan.requests_for(conc)
            warm = plan.warmup_per_cell + plan.warmup_waves * conc
            total = measured + warm
            seconds: float | None = None
            cell_basis = "-"
            if history is not None:
                rate = _history_rate(history, conc, ctx)
                if rate is not None:
                    seconds = total * plan.output_len / rate[0]
                    cell_basis = rate[1]
            elif isinstance(hardware, Hardware):
                steps = hardware.bandwidth_gb_s * 1e9 / hardware.bytes_per_token
                waves = math.ceil(measured / conc) + plan.warmup_waves
                waves += math.ceil(plan.warmup_per_cell / conc)
                seconds = waves * plan.output_len / steps
                cell_basis = "roofline"
            cells.append(
                CellPrice(
                    concurrency=conc,
                    context_tokens=ctx,
                    requests=measured,
                    warmup=warm,
                    prompt_tokens=total * ctx,
                    output_tokens=total * plan.output_len,
                    seconds=seconds,
                    basis=cell_basis,
                )
            )
    humaneval = plan.humaneval.limit if plan.humaneval.enabled else 0
    return PlanPrice(cells, notes, basis, humaneval, max_model_len)


def served_max_model_len(plan: Plan) -> tuple[int | None, str]:
    """``max_model_len`` of the plan's model as the server's ``/v1/models`` lists it, or
    None and why (unreachable, no such model, no limit listed). One GET, the plan's
    connect timeout; the plan's API key when it names one."""
    headers = {}
    if plan.api_key_file:
        headers["Authorization"] = f"Bearer {read_api_key(plan.api_key_file)}"
    url = f"{plan.base_url}/v1/models"
    try:
        response = httpx.get(url, headers=headers, timeout=plan.timeouts.connect_s)
    except httpx.HTTPError as exc:
        return None, f"cannot reach {url}: {type(exc).__name__}"
    if response.status_code != 200:
        return None, f"{url} answered HTTP {response.status_code}"
    try:
        entries = response.json().get("data") or []
    except ValueError:
        return None, f"{url} did not answer JSON"
    chosen = [e for e in entries if plan.model in (None, e.get("id"))]
    if not chosen:
        return None, f"{url} lists no model {plan.model or ''}".strip()
    value = chosen[0].get("max_model_len")
    if not isinstance(value, int):
        return None, f"{url} lists no max_model_len"
    return value, url
