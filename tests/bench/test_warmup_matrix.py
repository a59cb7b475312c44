"""The warm-up reaches every cell: before the first measured request, the server has met
every batch shape (requests in flight, prompt length) the plan's cells will give it.

On the H200 (SGLang 0.5.11) two warm-up requests per cell never reached the batch
shapes the engine compiles at C = 4 and 16, and each candidate's first run measured
0.5-0.6 x its second. The synthetic server here records the request number at which it
met each new shape (a real engine compiles a graph or kernel then)."""

from __future__ import annotations

import asyncio

import pytest

from specops.bench.plan import plan_from_mapping
from specops.bench.runner import run_plan


def _plan(url: str, waves: int) -> object:
    return plan_from_mapping({
        "base_url": url, "concurrency": [1, 4, 8], "context_lengths": [64, 300],
        "output_len": 8, "requests_per_cell": 8, "waves_per_cell": 1,
        "warmup_per_cell": 0, "warmup_waves": waves,
    })  # fmt: skip


def test_every_shape_is_met_before_the_first_measured_request(synthetic) -> None:
    # every request lasts >= 0.1 s (a prefill), so a wave's C requests overlap
    server = synthetic(first_delay_s=0.1, chunk_delay_s=0.002)
    results = asyncio.run(run_plan(_plan(server.url, 1)))  # type: ignore[arg-type]
    warm = results.warmup
    assert warm is not None
    # one wave of C requests at each of the 6 cells, before any of them measured
    assert (warm["waves"], warm["cells"], warm["requests"], warm["failed"]) == (1, 6, 26, 0)
    assert server.requests == 26 + sum(c.stats.requests for c in results.cells)
    assert max(server.met_at) <= 26, server.met_at
    # the cells measured all they were asked, after it
    assert [(c.concurrency, c.context_tokens) for c in results.cells] == [
        (1, 64), (4, 64), (8, 64), (1, 300), (4, 300), (8, 300)
    ]  # fmt: skip
    assert results.to_dict()["warmup"] == warm


def test_without_it_measured_requests_meet_new_shapes(synthetic) -> None:
    """The check above can fail: with ``warmup_waves: 0`` the measured cells are where
    the server first meets its shapes."""
    server = synthetic(chunk_delay_s=0.002)
    results = asyncio.run(run_plan(_plan(server.url, 0)))  # type: ignore[arg-type]
    assert results.warmup is None
    assert len(server.met_at) >= 2
    assert server.met_at[-1] > 1


@pytest.mark.parametrize("waves", [-1, "one"])
def test_warmup_waves_is_checked(waves: object) -> None:
    with pytest.raises(Exception, match=r"^warmup_waves: must be an integer >= 0"):
        plan_from_mapping({"base_url": "http://127.0.0.1:1", "warmup_waves": waves})
