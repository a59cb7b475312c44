"""The sweep's ``mode: model``: the depth model decides which candidates to measure.
Scripted objectives (seeded noise) shaped like the seeds' MTP; the real plumbing (the
ledger keeps each run's rates per position, a resumed sweep replays them) too."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from specops.errors import ValidationError
from specops.speculative import Engine
from specops.tune.config import load_config
from specops.tune.ledger import Ledger
from specops.tune.predict import acceptance_length
from specops.tune.score import Scoring
from specops.tune.search import Measurement, grid, modelled
from specops.tune.space import Candidate, SearchSpace

RATES = [0.72, 0.55, 0.40, 0.28, 0.19, 0.13, 0.09, 0.06]  # the seeds' MTP, falling


def _true(depth: int) -> float:
    return 100 * acceptance_length(RATES, depth) / (1.0 + 0.12 * depth)


@dataclass
class MtpEvaluator:
    """An MTP chain of ``num_steps`` k: its runs draft k positions at the seeds' rates;
    objective with 2 % noise per run."""

    seed: int
    noise: float = 0.02
    calls: list[str] = field(default_factory=list)
    invalids: list[str] = field(default_factory=list)
    restarts: int = 0
    running: str | None = None

    def measure(self, candidate: Candidate, repeat: int) -> Measurement:
        self.calls.append(candidate.key)
        if candidate.key != self.running:
            self.restarts += 1
            self.running = candidate.key
        if candidate.plain:
            return Measurement(50.0, 50.0)
        k = int(candidate.profile["num_steps"])
        rng = random.Random(hash((self.seed, k, repeat)))  # noqa: S311 - a seeded simulation
        value = _true(k) * rng.gauss(1, self.noise)
        return Measurement(value, value, per_position=tuple(RATES[:k]))

    def invalid(self, candidate: Candidate) -> None:
        self.invalids.append(candidate.key)


def _space() -> SearchSpace:
    engine = Engine.parse("sglang", "0.5.11")
    return SearchSpace.from_mapping(
        {"method": "mtp", "num_steps": 1}, {"num_steps": "1..8"}, engine
    )


def test_the_model_finds_the_best_depth_with_fewer_restarts() -> None:
    space = _space()
    scoring = Scoring(min_repeats=2, max_repeats=2, tolerance=0.0)
    assert max(range(1, 9), key=_true) == 4
    near = restarts = 0
    for seed in range(30):
        ev = MtpEvaluator(seed)
        out = modelled(space, ev, scoring)
        assert out.pick is not None
        near += _true(int(out.pick.candidate.profile["num_steps"])) >= _true(4) * 0.98
        restarts += ev.restarts
        assert out.steps[0].startswith("model: rates per position read at num_steps=8")
    full = MtpEvaluator(0)
    grid(space, full, scoring)
    assert full.restarts == 8
    assert near >= 28, near
    assert restarts / 30 <= 5.5, restarts / 30


def test_a_space_the_model_cannot_read_is_a_grid() -> None:
    engine = Engine.parse("sglang", "0.5.11")
    space = SearchSpace.from_mapping(
        {"method": "mtp", "num_steps": 1}, {"num_steps": "1..2", "topk": [1, 4]}, engine
    )
    ev = MtpEvaluator(0)
    out = modelled(space, ev, Scoring(min_repeats=1, max_repeats=1))
    assert out.steps[0] == "model: the space is not one chain depth; measured as a grid"
    assert ev.restarts + len(ev.invalids) == 4


def test_a_depth_that_drafted_nothing_falls_back_to_the_grid() -> None:
    space = _space()

    class Silent(MtpEvaluator):
        def measure(self, candidate: Candidate, repeat: int) -> Measurement:
            m = super().measure(candidate, repeat)
            return Measurement(m.objective, m.tiebreak)

    ev = Silent(0)
    out = modelled(space, ev, Scoring(min_repeats=1, max_repeats=1))
    assert "gave no acceptance per position" in out.steps[0]
    assert ev.restarts == 8


def test_mode_model_is_a_config_mode_and_the_ledger_keeps_the_rates(tmp_path) -> None:
    cfg = load_config({
        "canary": "c", "base_url": "http://127.0.0.1:1", "engine": {"name": "sglang",
        "version": "0.5.11"}, "base_profile": {"method": "mtp", "num_steps": 1},
        "space": {"num_steps": "1..8"}, "mode": "model", "max_candidates": 6,
    })  # fmt: skip
    assert (cfg.mode, cfg.candidates_bound()) == ("model", 6)
    with pytest.raises(ValidationError, match=r"^mode: must be one of ascent, grid, model"):
        load_config({"mode": "guess", "canary": "c", "base_url": "http://x:1",
                     "base_profile": {"method": "mtp", "num_steps": 1},
                     "space": {"num_steps": "1..2"}})  # fmt: skip
    ledger = Ledger(tmp_path / "sweep.jsonl", cfg.fingerprint())
    ledger.record({"kind": "run", "key": "num_steps=3", "repeat": 0, "objective": 1.0,
                   "tiebreak": 1.0, "ok": True, "reason": "", "results": None,
                   "restart": None, "per_position": [0.7, 0.5, 0.3]})  # fmt: skip
    again = Ledger(tmp_path / "sweep.jsonl", cfg.fingerprint())
    run = again.run("num_steps=3", 0)
    assert run is not None
    assert run.measurement.per_position == (0.7, 0.5, 0.3)
