"""P5 for the algorithm, on seeded noise: counts of trials, never timings.

The real P5 runs the grid and the sweep on a lab node (tests/tune/test_real_rollout.py,
scripts/experiments/bench-sweep-vs-grid.py). Here the same two searches and the same judgement
(:func:`specops.tune.versus.judge`) run on an objective with the lab's shape (ngram
num_draft_tokens 2..9, peak near 5 with 4 within 2 %) and the noise seen on this
two-core machine: per-run jitter, a run now and then slowed to about half by other
work, and a slow drift of the machine's speed over the minutes a search takes (which
is what moved the grid's medians of neighbouring candidates apart in the CI run of
2026-12-01). Every trial is a fixed seed, so the counts are exact and repeatable.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from specops.tune.config import load_config
from specops.tune.search import ascend, grid
from specops.tune.versus import LAB_SEARCH, RESTART_RATIO_TARGET, Versus, judge

from .conftest import ScriptedEvaluator

# tok/s of each num_draft_tokens at C=4 on the lab's tiny model (the lab's grid runs)
TRUE = {2: 600.0, 3: 700.0, 4: 760.0, 5: 775.0, 6: 745.0, 7: 700.0, 8: 660.0, 9: 620.0}


def noisy(seed: int, jitter: float, slowed: float) -> Callable[[dict[str, int], int], float]:
    rng = random.Random(seed)  # noqa: S311 - seeded test noise, not cryptography
    runs = 0

    def objective(a: dict[str, int], repeat: int) -> float:
        nonlocal runs
        del repeat
        runs += 1
        drift = 1 + 0.05 * math.sin(runs / 15)  # +-5 % over a few dozen runs
        value = TRUE[a["num_draft_tokens"]] * drift * (1 + rng.gauss(0, jitter))
        return value * 0.55 if rng.random() < slowed else value

    return objective


def trial(seed: int, jitter: float, slowed: float) -> Versus:
    cfg = load_config({**LAB_SEARCH, "canary": "node", "base_url": "http://127.0.0.1:1"})
    objective = noisy(seed, jitter, slowed)  # one machine: both searches share its noise
    ev_grid = ScriptedEvaluator(objective)
    g = grid(cfg.space, ev_grid, cfg.scoring)
    ev = ScriptedEvaluator(objective)
    assert g.pick is not None
    ev.running = g.pick.candidate.key  # the grid leaves the canary on its pick
    a = ascend(cfg.space, ev, cfg.scoring, cfg.max_rounds, cfg.max_candidates)
    return judge(g, a, LAB_SEARCH, ev_grid.restarts, ev.restarts)


@pytest.mark.parametrize(("jitter", "slowed"), [(0.03, 0.0), (0.06, 0.05), (0.10, 0.08)])
def test_the_sweep_pick_is_within_the_grid_noise_band_with_40_percent_of_its_restarts(
    jitter: float, slowed: float
) -> None:
    trials = [trial(seed, jitter, slowed) for seed in range(100)]
    assert all(t.grid_restarts == 8 for t in trials)
    assert all(t.ratio <= RESTART_RATIO_TARGET for t in trials)  # max_candidates 3 of 8
    within = sum(t.within_noise for t in trials)
    # 3 of 3 CI runs needs ~99 % per run; these seeds give 97-100 of 100
    assert within >= 97, [t.lines() for t in trials if not t.within_noise][:3]


def test_a_pick_outside_the_band_is_reported_as_such() -> None:
    """The judgement is not blind: a sweep that stopped on a clearly worse candidate
    (measured as the grid measured it: no shift between times) fails P5."""
    cfg = load_config({**LAB_SEARCH, "canary": "node", "base_url": "http://127.0.0.1:1"})
    steady = ScriptedEvaluator(lambda a, r: TRUE[a["num_draft_tokens"]] * (1 + 0.01 * (r - 1)))
    g = grid(cfg.space, steady, cfg.scoring)
    only_2 = {**LAB_SEARCH, "canary": "n", "base_url": "http://h:1",
              "space": {"num_draft_tokens": [2]}}  # fmt: skip
    stuck = ScriptedEvaluator(lambda a, r: TRUE[a["num_draft_tokens"]] * (1 + 0.01 * (r - 1)))
    sweep = grid(load_config(only_2).space, stuck, cfg.scoring)
    verdict = judge(g, sweep, LAB_SEARCH, steady.restarts, stuck.restarts)
    assert verdict.sweep_pick == "num_draft_tokens=2"
    assert verdict.time_shift == pytest.approx(0.0)
    assert verdict.grid_best_median - verdict.sweep_pick_on_grid > verdict.band
    assert not verdict.within_noise
    assert not verdict.ok
