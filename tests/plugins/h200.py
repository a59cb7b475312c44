"""The H200's recorded plain-vs-speculative figures as bench results (bench and tune tests).

``tests/fixtures/tune/h200-vllm-0.20.1-1b-plain-vs-spec.json`` holds, per config (``none``,
``ngram``, ``draft_model``), the cells specops bench measured on one H200 with vLLM
0.20.1 and a 1B model on 2026-12-02 (output tok/s, TPOT p50, acceptance length).
:func:`recorded` turns one config into a results document: a run measured here on the
synthetic server with the same matrix (C = 1, 4, 16 at 512 tokens in), each cell's
figures replaced by the H200's. Decisions (gates, picks, speed-ups) then read the
H200's numbers through the real results code, as they would read the device's file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from specops.bench.metrics import Acceptance
from specops.bench.plan import plan_from_mapping
from specops.bench.results import Results
from specops.bench.runner import run_plan

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures/tune/h200-vllm-0.20.1-1b-plain-vs-spec.json"
)
H200: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
PLAN = {"concurrency": [1, 4, 16], "context_lengths": [512], "output_len": 8,
        "requests_per_cell": 16, "warmup_per_cell": 0}  # fmt: skip


def measure(synthetic: Callable[..., Any], **plan: Any) -> Results:
    """One run of the H200 matrix on a synthetic server (its numbers are replaced)."""
    server = synthetic(chunk_delay_s=0.001)
    return asyncio.run(run_plan(plan_from_mapping({**PLAN, **plan, "base_url": server.url})))


def recorded(template: Results, config: str, scale: float = 1.0) -> Results:
    """``template`` with the H200's cells of ``config`` (output tok/s times ``scale``)."""
    cells = {(c["concurrency"], c["context_tokens"]): c for c in H200["configs"][config]["cells"]}
    copy = Results.from_dict(template.to_dict())
    copy.run_id = f"{template.run_id}-{config}"
    for cell in copy.cells:
        h = cells[(cell.concurrency, cell.context_tokens)]
        cell.stats = replace(
            cell.stats,
            output_tok_s=h["output_tok_s"] * scale,
            tpot_ms=replace(cell.stats.tpot_ms, p50=h["tpot_ms_p50"] / scale),
        )
        length = h["mean_acceptance_length"]
        cell.acceptance = (
            Acceptance(source="none", note="no speculation")
            if length is None
            else Acceptance(source="vllm-metrics", mean_acceptance_length=length,
                            drafts=100.0, accepted=100.0 * (length - 1))
        )  # fmt: skip
    return copy
