"""The search on deterministic objectives: walks, early stop, repeats, rejection, pick."""

from __future__ import annotations

import pytest

from specops.errors import ValidationError
from specops.speculative import Engine
from specops.tune.score import (
    Decision,
    Scoring,
    compare,
    interval,
    mad,
    pooled_spread,
    standard_error,
)
from specops.tune.search import ascend, grid
from specops.tune.space import SearchSpace

from .conftest import NGRAM_BASE, ScriptedEvaluator

S = Scoring(z=2.0, min_gain=0.02, tolerance=0.0, min_repeats=2, max_repeats=4)


def peak_at(peak: int, height: float = 100.0, slope: float = 10.0):
    return lambda a, r: height - slope * abs(a["num_draft_tokens"] - peak)


def test_pooled_spread_standard_error_and_interval() -> None:
    assert mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0
    assert mad([5.0]) == 0.0
    # two runs 10 % apart: each deviates 5 % from their median, x sqrt(2) for the dof
    assert pooled_spread([[95.0, 105.0]]) == pytest.approx(1.4826 * 0.05 * 2**0.5)
    # pooled over candidates; a lone run and a zero median say nothing
    assert pooled_spread([[100.0], [0.0, 0.0]]) is None
    three = pooled_spread([[90.0, 100.0, 110.0], [180.0, 200.0, 220.0]])
    assert three == pytest.approx(1.4826 * 0.1 * 1.5**0.5)  # the median run is left out
    se = standard_error([90.0, 100.0, 110.0], 0.1)
    assert se == pytest.approx((3.14159265 / 2) ** 0.5 * 0.1 * 100 / 3**0.5)
    low, high = interval([90.0, 100.0, 110.0], 0.1, 2.0)
    assert (low, high) == pytest.approx((100 - 2 * se, 100 + 2 * se))
    assert standard_error([100.0], None) == 0.0


def test_compare_needs_more_than_noise() -> None:
    s = Scoring(z=2.0, min_gain=0.02)
    assert compare([110.0, 110.0], [100.0, 100.0], s) is Decision.BETTER
    assert compare([101.0, 101.0], [100.0, 100.0], s) is Decision.WITHIN_NOISE
    assert compare([90.0, 90.0], [100.0, 100.0], s) is Decision.WORSE
    # wide spread: a 10 % gain is within noise
    assert compare([95.0, 125.0], [100.0, 100.0], s) is Decision.WITHIN_NOISE
    # the search's pooled spread decides, not the two candidates' own few runs
    assert compare([110.0, 110.0], [100.0, 100.0], s, spread=0.2) is Decision.WITHIN_NOISE
    assert compare([110.0, 110.0], [100.0, 100.0], s, spread=0.01) is Decision.BETTER


@pytest.mark.parametrize("peak", [2, 3, 4, 5, 6, 7, 8, 9])
def test_ascent_finds_the_grid_pick(ngram_space: SearchSpace, peak: int) -> None:
    ev_grid = ScriptedEvaluator(peak_at(peak))
    g = grid(ngram_space, ev_grid, S)
    ev = ScriptedEvaluator(peak_at(peak))
    a = ascend(ngram_space, ev, S)
    assert g.pick is not None
    assert a.pick is not None
    assert a.pick.candidate.key == g.pick.candidate.key == f"num_draft_tokens={peak}"
    assert ev_grid.restarts == 8
    assert ev.restarts <= 7


def test_ascent_stops_early_on_a_plateau(ngram_space: SearchSpace) -> None:
    # start is 4; 5 is 1 % better (within noise), everything else worse: visits 4, 5, 3
    values = {2: 80.0, 3: 90.0, 4: 100.0, 5: 101.0, 6: 102.0, 7: 103.0, 8: 104.0, 9: 105.0}
    ev = ScriptedEvaluator(lambda a, r: values[a["num_draft_tokens"]])
    out = ascend(ngram_space, ev, Scoring(tolerance=0.02))
    assert out.order == ["num_draft_tokens=4", "num_draft_tokens=5", "num_draft_tokens=3"]
    assert ev.restarts == 3
    # 5 scores 1 % higher: within the 2 % tolerance, so the cheaper 4 is picked, 5 is
    # the runner-up
    assert out.best is not None
    assert out.best.candidate.key == "num_draft_tokens=5"
    assert out.pick is not None
    assert out.pick.candidate.key == "num_draft_tokens=4"
    assert out.runner_up is not None
    assert out.runner_up.candidate.key == "num_draft_tokens=5"


def test_repeats_only_where_the_decision_is_within_noise(ngram_space: SearchSpace) -> None:
    values = {2: 80.0, 3: 90.0, 4: 100.0, 5: 101.0, 6: 50.0, 7: 50.0, 8: 50.0, 9: 50.0}
    ev = ScriptedEvaluator(lambda a, r: values[a["num_draft_tokens"]])
    ascend(ngram_space, ev, S)
    runs: dict[str, int] = {}
    for key, _ in ev.calls:
        runs[key] = runs.get(key, 0) + 1
    assert runs["num_draft_tokens=4"] == 2  # incumbent: min_repeats only
    assert runs["num_draft_tokens=5"] == 4  # within noise: raced up to max_repeats
    assert runs["num_draft_tokens=3"] == 2  # clearly worse: no repeats


def test_noisy_runs_resolved_by_repeats(ngram_space: SearchSpace) -> None:
    # candidate 5 is really 20 % better but its first two runs disagree widely
    def fn(a: dict[str, int], r: int) -> float:
        n = a["num_draft_tokens"]
        if n == 5:
            return [60.0, 180.0, 120.0, 121.0][r]
        return 100.0 - 10 * abs(n - 4)

    ev = ScriptedEvaluator(fn)
    out = ascend(ngram_space, ev, S)
    assert ("num_draft_tokens=5", 2) in ev.calls  # a third run was taken
    assert out.pick is not None


def test_rejected_candidates_never_win(ngram_space: SearchSpace) -> None:
    ev = ScriptedEvaluator(
        peak_at(7),
        reject=lambda a: "correctness gate: 0 passed" if a["num_draft_tokens"] == 7 else None,
    )
    out = grid(ngram_space, ev, S)
    assert out.pick is not None
    assert out.pick.candidate.key in {"num_draft_tokens=6", "num_draft_tokens=8"}
    assert out.standings["num_draft_tokens=7"].rejected == "correctness gate: 0 passed"


def test_cheaper_within_tolerance_is_picked(ngram_space: SearchSpace) -> None:
    values = {2: 50.0, 3: 70.0, 4: 99.0, 5: 100.0, 6: 60.0, 7: 50.0, 8: 50.0, 9: 50.0}
    ev = ScriptedEvaluator(lambda a, r: values[a["num_draft_tokens"]])
    out = grid(ngram_space, ev, Scoring(tolerance=0.02))
    assert out.best is not None
    assert out.best.candidate.key == "num_draft_tokens=5"
    assert out.pick is not None
    assert out.pick.candidate.key == "num_draft_tokens=4"


def test_invalid_candidates_are_recorded_without_a_restart(vllm_cpu: Engine) -> None:
    # ngram takes no num_steps: every candidate of this space is invalid for the engine
    space = SearchSpace.from_mapping(NGRAM_BASE, {"num_steps": [1, 2]}, vllm_cpu)
    ev = ScriptedEvaluator(peak_at(4))
    out = grid(space, ev, S)
    assert ev.invalids == ["num_steps=1", "num_steps=2"]
    assert ev.restarts == 0
    assert ev.calls == []
    assert out.pick is None


def test_two_parameters_coordinate_ascent(vllm_cpu: Engine) -> None:
    base = {"method": "draft_model", "draft_model": "/m", "num_steps": 1}
    space = SearchSpace.from_mapping(base, {"num_steps": "1..6", "topk": [1, 2, 4]}, vllm_cpu)
    # vLLM draft_model takes no topk > 1: those candidates are invalid, so the walk
    # stays on topk 1 and climbs num_steps to the peak at 4.
    ev = ScriptedEvaluator(lambda a, r: 100 - 10 * abs(a["num_steps"] - 4) - a["topk"])
    out = ascend(space, ev, S)
    assert out.pick is not None
    assert dict(out.pick.candidate.assignment)["num_steps"] == 4
    assert ev.restarts < space.size()


def test_space_validation_names_the_field(vllm_cpu: Engine) -> None:
    with pytest.raises(ValidationError, match=r"space\.bogus: is not a tunable"):
        SearchSpace.from_mapping(NGRAM_BASE, {"bogus": [1]}, vllm_cpu)
    with pytest.raises(ValidationError, match=r"space\.num_draft_tokens: range '9..2' is empty"):
        SearchSpace.from_mapping(NGRAM_BASE, {"num_draft_tokens": "9..2"}, vllm_cpu)
    with pytest.raises(ValidationError, match=r"space\.topk\[1\]: must be an integer"):
        SearchSpace.from_mapping(NGRAM_BASE, {"topk": [1, "x"]}, vllm_cpu)
    with pytest.raises(ValidationError, match=r"objective\.max_repeats"):
        Scoring(min_repeats=3, max_repeats=2)
