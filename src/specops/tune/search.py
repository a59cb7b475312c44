"""The search: coordinate ascent along ordered parameters, or the full grid.

Pure logic. The caller passes an :class:`Evaluator` that benchmarks a candidate (and
restarts the server when it is not the one running); tests pass deterministic
objective functions, the sweep passes the real thing wrapped in its results file.

Coordinate ascent (``ascend``) starts at the base profile's values and walks each
parameter in its order: a step up while it improves beyond noise, else a step down;
a walk stops at the first step that does not improve beyond noise. A candidate is
measured ``min_repeats`` times on its first visit; more runs (up to ``max_repeats``,
on the server already running it, so no restart) are taken only while the decision
against the incumbent is within noise. Rounds repeat over all parameters until no
parameter moves. ``grid`` measures every candidate ``min_repeats`` times.

Both end with :func:`choose`: rejected candidates (failed requests, failed
correctness gate) are out; the best robust score wins, and the cheapest candidate
whose score is within ``tolerance`` of the best is picked.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specops.tune.score import Decision, Scoring, compare, robust_score
from specops.tune.space import Assignment, Candidate, SearchSpace

__all__ = [
    "Evaluator",
    "Measurement",
    "Outcome",
    "Standing",
    "ascend",
    "choose",
    "grid",
    "standings",
]


@dataclass(frozen=True)
class Measurement:
    """One benchmark run of a candidate.

    ``objective`` is the plan's aggregate output tok/s, ``tiebreak`` single-stream
    tok/s. ``ok`` is false when any request failed or the correctness gate failed
    (``reason`` says which); such a candidate cannot be picked.
    """

    objective: float
    tiebreak: float
    ok: bool = True
    reason: str = ""


class Evaluator(Protocol):
    def measure(self, candidate: Candidate, repeat: int) -> Measurement:
        """Benchmark ``candidate`` (run number ``repeat``, from 0)."""
        ...

    def invalid(self, candidate: Candidate) -> None:
        """Record a candidate the engine rejects (no restart, no benchmark)."""
        ...


@dataclass
class Standing:
    candidate: Candidate
    runs: list[Measurement] = field(default_factory=list)

    @property
    def rejected(self) -> str | None:
        if self.candidate.invalid:
            return f"invalid: {self.candidate.invalid}"
        for run in self.runs:
            if not run.ok:
                return run.reason or "rejected"
        return None

    @property
    def values(self) -> list[float]:
        return [r.objective for r in self.runs]

    def score(self, k: float) -> float | None:
        if self.rejected or not self.runs:
            return None
        return robust_score(self.values, k)

    @property
    def median(self) -> float | None:
        return float(statistics.median(self.values)) if self.runs else None

    @property
    def tiebreak(self) -> float | None:
        return float(statistics.median(r.tiebreak for r in self.runs)) if self.runs else None


@dataclass
class Outcome:
    pick: Standing | None
    best: Standing | None  # highest robust score (before the cheaper-within-tolerance rule)
    order: list[str]  # candidate keys in the order they were first visited
    standings: dict[str, Standing]
    steps: list[str]  # what the search decided, one line per decision


class _Book:
    def __init__(self, space: SearchSpace, evaluator: Evaluator, scoring: Scoring) -> None:
        self.space = space
        self.ev = evaluator
        self.s = scoring
        self.standings: dict[str, Standing] = {}
        self.order: list[str] = []
        self.steps: list[str] = []

    def get(self, assignment: Assignment) -> Standing:
        cand = self.space.candidate(assignment)
        st = self.standings.get(cand.key)
        if st is None:
            st = Standing(cand)
            self.standings[cand.key] = st
            self.order.append(cand.key)
            if cand.invalid:
                self.ev.invalid(cand)
                self.steps.append(f"{cand.key}: invalid, not started ({cand.invalid})")
        return st

    def run(self, st: Standing) -> None:
        st.runs.append(self.ev.measure(st.candidate, len(st.runs)))

    def ensure(self, assignment: Assignment) -> Standing:
        st = self.get(assignment)
        while not st.rejected and len(st.runs) < self.s.min_repeats:
            self.run(st)
        return st

    def challenge(self, assignment: Assignment, incumbent: Standing) -> Decision:
        st = self.ensure(assignment)
        if st.rejected:
            self.steps.append(f"{st.candidate.key}: rejected ({st.rejected})")
            return Decision.WORSE
        decision = compare(st.values, incumbent.values, self.s)
        while decision is Decision.WITHIN_NOISE and len(st.runs) < self.s.max_repeats:
            self.run(st)
            if st.rejected:
                self.steps.append(f"{st.candidate.key}: rejected ({st.rejected})")
                return Decision.WORSE
            decision = compare(st.values, incumbent.values, self.s)
        self.steps.append(
            f"{st.candidate.key} vs {incumbent.candidate.key}: {decision.value}"
            f" (median {st.median:.1f} vs {incumbent.median:.1f}, {len(st.runs)} runs)"
        )
        return decision

    def outcome(self) -> Outcome:
        best, pick = choose(list(self.standings.values()), self.space, self.s)
        return Outcome(pick, best, list(self.order), dict(self.standings), list(self.steps))


def _with(assignment: Assignment, name: str, value: int) -> Assignment:
    return tuple((n, value if n == name else v) for n, v in assignment)


def _first_usable(book: _Book) -> Standing | None:
    start = book.space.start()
    st = book.ensure(start)
    if not st.rejected:
        return st
    book.steps.append(f"start {st.candidate.key} unusable; taking the cheapest usable candidate")
    for assignment in book.space.grid():
        st = book.ensure(assignment)
        if not st.rejected:
            return st
    return None


def ascend(
    space: SearchSpace, evaluator: Evaluator, scoring: Scoring, max_rounds: int = 3
) -> Outcome:
    """Coordinate ascent from the base profile (see the module docstring)."""
    book = _Book(space, evaluator, scoring)
    incumbent = _first_usable(book)
    if incumbent is None:
        return book.outcome()
    current = incumbent.candidate.assignment
    for _round in range(max_rounds):
        moved_any = False
        for param in space.parameters:
            here = dict(current)[param.name]
            moved = False
            for direction in (1, -1):
                j = param.index(here) + direction
                while 0 <= j < len(param.values):
                    step = _with(current, param.name, param.values[j])
                    if book.get(step).candidate.invalid:
                        break
                    if book.challenge(step, book.get(current)) is not Decision.BETTER:
                        break
                    current = step
                    moved = True
                    j += direction
                if moved:
                    break
            moved_any = moved_any or moved
        if not moved_any:
            break
    return book.outcome()


def grid(space: SearchSpace, evaluator: Evaluator, scoring: Scoring) -> Outcome:
    """Every candidate, cheapest first, ``min_repeats`` runs each."""
    book = _Book(space, evaluator, scoring)
    for assignment in space.grid():
        book.ensure(assignment)
    return book.outcome()


def standings(outcome: Outcome, k: float) -> list[Standing]:
    """Usable candidates by robust score (best first), then the rejected ones."""
    usable = [s for s in outcome.standings.values() if s.score(k) is not None]
    usable.sort(key=lambda s: (s.score(k) or 0.0, s.tiebreak or 0.0), reverse=True)
    rest = [s for s in outcome.standings.values() if s.score(k) is None]
    return usable + rest


def choose(
    items: Sequence[Standing], space: SearchSpace, scoring: Scoring
) -> tuple[Standing | None, Standing | None]:
    """(best by robust score with the tie-break, pick: cheapest within tolerance of best)."""
    usable = [s for s in items if s.score(scoring.k) is not None]
    if not usable:
        return None, None
    best = max(usable, key=lambda s: (s.score(scoring.k) or 0.0, s.tiebreak or 0.0))
    floor = (best.score(scoring.k) or 0.0) * (1 - scoring.tolerance)
    near = [s for s in usable if (s.score(scoring.k) or 0.0) >= floor]
    pick = min(
        near,
        key=lambda s: (
            sum(space.cost(s.candidate.assignment)),
            space.cost(s.candidate.assignment),
            -(s.score(scoring.k) or 0.0),
        ),
    )
    return best, pick
