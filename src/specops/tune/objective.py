"""A candidate's objective and verdict, read from a bench results document.

Nothing here measures: the numbers come from :class:`specops.bench.results.Results`
(``specops bench run`` wrote them). Objective: the mean over the plan's cells of the
cell's output tok/s (aggregate throughput at each concurrency and context). Tie-break:
single-stream tok/s (output tok/s of the cells at the plan's lowest concurrency).
A run is rejected when any request failed (warm-up included) or the correctness gate
fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specops.bench.results import Results
from specops.errors import ValidationError
from specops.tune.search import Measurement

__all__ = ["CorrectnessGate", "correctness_verdict", "measurement_from_results"]


@dataclass(frozen=True)
class CorrectnessGate:
    """HumanEval gate: ``limit`` problems (0: gate off), at least ``min_passed`` passing.

    ``reference_passed`` (the pass count of the no-speculation baseline, when known) with
    ``max_pass_drop``: lossless speculation with greedy decoding must pass as many.
    """

    limit: int = 0
    min_passed: int = 0
    reference_passed: int | None = None
    max_pass_drop: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> CorrectnessGate:
        data = dict(data or {})
        valid = {"limit", "min_passed", "reference_passed", "max_pass_drop"}
        for key in data:
            if key not in valid:
                raise ValidationError(
                    f"correctness.{key}", f"unknown key; valid: {', '.join(sorted(valid))}"
                )
        for key, value in data.items():
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValidationError(
                    f"correctness.{key}", f"must be an integer >= 0 (got {value!r})"
                )
        return cls(**data)

    @property
    def enabled(self) -> bool:
        return self.limit > 0


def correctness_verdict(results: Results, gate: CorrectnessGate) -> str | None:
    """None when the gate passes (or is off), else why it failed."""
    if not gate.enabled:
        return None
    c = results.correctness
    if not c:
        return "correctness gate: no HumanEval result in the run"
    passed = int(c["passed"])
    if int(c.get("generated", c["problems"])) < int(c["problems"]):
        return f"correctness gate: only {c['generated']} of {c['problems']} completions generated"
    if passed < gate.min_passed:
        return f"correctness gate: {passed} passed < min_passed {gate.min_passed}"
    if gate.reference_passed is not None and passed < gate.reference_passed - gate.max_pass_drop:
        return (
            f"correctness gate: {passed} passed, reference {gate.reference_passed}"
            f" (max drop {gate.max_pass_drop})"
        )
    return None


def measurement_from_results(results: Results, gate: CorrectnessGate) -> Measurement:
    if not results.cells:
        return Measurement(0.0, 0.0, False, "no cells measured")
    objective = statistics.fmean(c.stats.output_tok_s or 0.0 for c in results.cells)
    lowest = min(c.concurrency for c in results.cells)
    tiebreak = statistics.fmean(
        c.stats.output_tok_s or 0.0 for c in results.cells if c.concurrency == lowest
    )
    failed = sum(c.stats.failed + c.warmup_failed for c in results.cells)
    if failed or results.failed_cells:
        return Measurement(objective, tiebreak, False, f"{failed} failed request(s)")
    why = correctness_verdict(results, gate)
    if why:
        return Measurement(objective, tiebreak, False, why)
    return Measurement(objective, tiebreak)
