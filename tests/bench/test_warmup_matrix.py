"""The warm-up reaches every cell: before the first measured request, each cell of the
plan gets ``warmup_waves`` waves of C requests at its own context length.

On the H200 (SGLang 0.5.11) two warm-up requests per cell never reached the batch
shapes the engine compiles at C = 4 and 16, and each candidate's first run measured
0.5-0.6 x its second. The synthetic server records the prompt length of every
generation in the order they came: the warm-up is the first requests it saw."""

from __future__ import annotations

import asyncio

import pytest

from specops.bench.plan import Plan, plan_from_mapping
from specops.bench.runner import run_plan
from specops.errors import ValidationError


def _plan(url: str, waves: int) -> Plan:
    return plan_from_mapping({
        "base_url": url, "concurrency": [1, 4, 8], "context_lengths": [64, 300],
        "output_len": 8, "requests_per_cell": 8, "waves_per_cell": 1,
        "warmup_per_cell": 1, "warmup_waves": waves,
    })  # fmt: skip


@pytest.mark.parametrize("waves", [1, 2])
def test_every_cell_is_warmed_before_the_first_measured_request(synthetic, waves: int) -> None:
    server = synthetic(chunk_delay_s=0.001)
    results = asyncio.run(run_plan(_plan(server.url, waves)))
    warm = results.warmup
    assert warm is not None
    per_context = waves * (1 + 4 + 8)
    assert (warm["waves"], warm["cells"], warm["requests"], warm["failed"]) == (
        waves, 6, 2 * per_context, 0
    )  # fmt: skip
    # the first requests the server saw: C requests per wave at each cell's context,
    # shortest context first, as the cells are measured; then the cells, each after its
    # own warm-up request
    seen = server.prompt_lengths
    assert seen[:per_context] == [64] * per_context
    assert seen[per_context : 2 * per_context] == [300] * per_context
    assert len(seen) == 2 * per_context + sum(c.stats.requests + 1 for c in results.cells)
    assert [(c.concurrency, c.context_tokens) for c in results.cells] == [
        (1, 64), (4, 64), (8, 64), (1, 300), (4, 300), (8, 300)
    ]  # fmt: skip
    assert results.to_dict()["warmup"] == warm


def test_off_it_sends_only_each_cells_own_warm_up(synthetic) -> None:
    server = synthetic(chunk_delay_s=0.001)
    results = asyncio.run(run_plan(_plan(server.url, 0)))
    assert results.warmup is None
    assert server.prompt_lengths[:9] == [64] * 9  # c1: 1 + 8, straight into the measured
    assert len(server.prompt_lengths) == sum(c.stats.requests + 1 for c in results.cells)


@pytest.mark.parametrize("waves", [-1, "one"])
def test_warmup_waves_is_checked(waves: object) -> None:
    with pytest.raises(ValidationError, match=r"^warmup_waves: must be an integer >= 0"):
        plan_from_mapping({"base_url": "http://127.0.0.1:1", "warmup_waves": waves})
