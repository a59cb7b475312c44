"""The search: coordinate ascent along ordered parameters (racing), or the full grid.

Pure logic. The caller passes an :class:`Evaluator` that benchmarks a candidate (and
restarts the server when it is not the one running); tests pass deterministic or
seeded-noise objective functions, the sweep passes the real thing.

Coordinate ascent (``ascend``) starts at the base profile's values and walks each
parameter in its order: a step up while it improves beyond noise, else a step down;
a walk stops at the first step that does not. A candidate gets ``min_repeats`` runs on
its first visit; while the decision against the incumbent is within noise the running
challenger is measured again (racing, no restart) up to ``max_repeats``; one clearly
worse is dropped at once. Rounds repeat over all parameters until no parameter moves,
or until ``max_candidates`` candidates were measured (each one a restart). ``grid``
measures every candidate ``min_repeats`` times.

The depth model (``modelled``, :mod:`specops.tune.predict`) for a space of one chain
depth (``num_steps``, ``num_draft_tokens``): measure the deepest candidate (its runs give
the acceptance per position for every depth up to it) and the shallowest (the step cost
from two depths), predict every candidate, measure the predicted best and its
neighbours, refit on every depth measured, and stop when the measured best lies inside
the predicted best's band (or nothing new is left to measure, or ``max_candidates``).
A space the model cannot read (several parameters, a tree, a run that drafted nothing)
is measured as a grid, and the steps say so.

Noise is the run-to-run spread pooled over every candidate measured so far
(:func:`~specops.tune.score.pooled_spread`). Both end with :func:`choose`: rejected
candidates (failed requests, failed correctness gate) are out; the best median leads;
the pick is the cheapest candidate within ``tolerance`` of the leader's median,
reported with its interval and the runner-up.

No speculation is a candidate too (``plain``: method ``none``, measured by
:func:`measure_plain` beside the walk, which never steps to it): it is the cheapest of
all, so it is picked whenever it is within ``tolerance`` of the best median; and a
speculative candidate is picked only when it beats it *beyond noise* (the margin of
:func:`~specops.tune.score.compare`: ``z`` standard errors of the difference under the
pooled spread, at least ``min_gain``). A speculative setting that loses to no
speculation, or wins only within noise, is never picked; the outcome says why
(``plain_verdict``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specops.tune.predict import DepthModel, Point, depth_of
from specops.tune.score import Decision, Scoring, compare, interval, margin, pooled_spread
from specops.tune.space import Assignment, Candidate, SearchSpace, plain_candidate

__all__ = [
    "Choice",
    "Evaluator",
    "Measurement",
    "Outcome",
    "Standing",
    "ascend",
    "choose",
    "grid",
    "measure_plain",
    "modelled",
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
    # The run's acceptance per draft position (drafts-weighted over its cells): what the
    # depth model reads (mode ``model``); () when the run drafted nothing or is older.
    per_position: tuple[float, ...] = ()


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

    @property
    def usable(self) -> bool:
        return not self.rejected and bool(self.runs)

    @property
    def median(self) -> float | None:
        return float(statistics.median(self.values)) if self.runs else None

    @property
    def tiebreak(self) -> float | None:
        return float(statistics.median(r.tiebreak for r in self.runs)) if self.runs else None

    def interval(self, spread: float | None, z: float) -> tuple[float, float] | None:
        return interval(self.values, spread, z) if self.runs else None


@dataclass(frozen=True)
class Choice:
    best: Standing | None  # highest median (with the tie-break)
    pick: Standing | None  # cheapest within tolerance of the best
    runner_up: Standing | None  # the best-ranked usable candidate other than the pick
    spread: float | None  # pooled relative run-to-run spread the choice used
    plain_verdict: str | None = None  # the pick against no speculation, in words


@dataclass
class Outcome:
    pick: Standing | None
    best: Standing | None  # highest median (before the cheaper-within-tolerance rule)
    order: list[str]  # candidate keys in the order they were first visited
    standings: dict[str, Standing]
    steps: list[str]  # what the search decided, one line per decision
    runner_up: Standing | None = None
    spread: float | None = None
    z: float = 2.0
    plain: Standing | None = None  # no speculation, measured beside the walk
    plain_verdict: str | None = None  # the pick against no speculation, in words

    def interval(self, st: Standing) -> tuple[float, float] | None:
        return st.interval(self.spread, self.z)


class _Book:
    def __init__(
        self,
        space: SearchSpace,
        evaluator: Evaluator,
        scoring: Scoring,
        plain: Standing | None = None,
        running: str | None = None,
    ) -> None:
        self.space = space
        self.ev = evaluator
        self.s = scoring
        self.standings: dict[str, Standing] = {}
        self.order: list[str] = []
        self.steps: list[str] = []
        self.last = running  # the candidate measured last: the one running
        self.plain = plain
        if plain is not None:
            self.standings[plain.candidate.key] = plain
            self.order.append(plain.candidate.key)
            self.steps.append(_plain_step(plain))

    @property
    def measured(self) -> int:
        """Speculative candidates that have at least one run (each cost a restart)."""
        return sum(1 for st in self.standings.values() if st.runs and not st.candidate.plain)

    def spread(self) -> float | None:
        return pooled_spread([st.values for st in self.standings.values() if st.usable])

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
        self.last = st.candidate.key

    def ensure(self, assignment: Assignment) -> Standing:
        st = self.get(assignment)
        while not st.rejected and len(st.runs) < self.s.min_repeats:
            self.run(st)
        return st

    def decide(self, st: Standing, incumbent: Standing) -> Decision:
        return compare(st.values, incumbent.values, self.s, self.spread())

    def challenge(self, assignment: Assignment, incumbent: Standing) -> Decision:
        st = self.ensure(assignment)
        if st.rejected:
            self.steps.append(f"{st.candidate.key}: rejected ({st.rejected})")
            return Decision.WORSE
        decision = self.decide(st, incumbent)
        while (
            decision is Decision.WITHIN_NOISE
            and len(st.runs) < self.s.max_repeats
            and self.last == st.candidate.key  # racing costs no restart: only the running one
        ):
            self.run(st)
            if st.rejected:
                self.steps.append(f"{st.candidate.key}: rejected ({st.rejected})")
                return Decision.WORSE
            decision = self.decide(st, incumbent)
        need = margin(st.values, incumbent.values, self.s, self.spread())
        step = (
            f"{st.candidate.key} vs {incumbent.candidate.key}: {decision.value}"
            f" (median {st.median:.1f} vs {incumbent.median:.1f}, margin {need:.1f},"
            f" {len(st.runs)} runs)"
        )
        if step not in self.steps:  # a later round asking again, on the same runs
            self.steps.append(step)
        return decision

    def outcome(self) -> Outcome:
        c = choose(list(self.standings.values()), self.space, self.s, self.plain)
        steps = list(self.steps) + ([c.plain_verdict] if c.plain_verdict else [])
        return Outcome(
            c.pick, c.best, list(self.order), dict(self.standings), steps,
            c.runner_up, c.spread, self.s.z, self.plain, c.plain_verdict,
        )  # fmt: skip


def _plain_step(plain: Standing) -> str:
    if plain.rejected:
        return f"none (no speculation): rejected ({plain.rejected})"
    if not plain.runs:
        return "none (no speculation): not measured"
    return f"none (no speculation): median {plain.median:.1f} tok/s over {len(plain.runs)} run(s)"


def measure_plain(evaluator: Evaluator, runs: int) -> Standing:
    """No speculation, measured ``runs`` times (fewer when a run is rejected): the
    candidate the search compares its pick with (see the module docstring)."""
    st = Standing(plain_candidate())
    while not st.rejected and len(st.runs) < runs:
        st.runs.append(evaluator.measure(st.candidate, len(st.runs)))
    return st


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


def _budget_spent(book: _Book, step: Assignment, max_candidates: int | None) -> bool:
    """A new candidate would pass ``max_candidates`` measured ones (each a restart)."""
    if max_candidates is None or book.get(step).runs or book.measured < max_candidates:
        return False
    book.steps.append(f"stopped: {max_candidates} candidates measured (max_candidates)")
    return True


def ascend(
    space: SearchSpace,
    evaluator: Evaluator,
    scoring: Scoring,
    max_rounds: int = 3,
    max_candidates: int | None = None,
    *,
    plain: Standing | None = None,
) -> Outcome:
    """Coordinate ascent from the base profile (see the module docstring).

    ``plain``: no speculation as measured beside the walk (:func:`measure_plain`); the
    pick must beat it. ``max_candidates`` counts the speculative candidates only.
    """
    book = _Book(space, evaluator, scoring, plain, _running(plain))
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
                    if _budget_spent(book, step, max_candidates):
                        return book.outcome()
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


def _running(plain: Standing | None) -> str | None:
    return plain.candidate.key if plain is not None and plain.runs else None


def grid(
    space: SearchSpace, evaluator: Evaluator, scoring: Scoring, plain: Standing | None = None
) -> Outcome:
    """Every candidate, cheapest first, ``min_repeats`` runs each (and ``plain``, as
    :func:`ascend` takes it)."""
    book = _Book(space, evaluator, scoring, plain, _running(plain))
    for assignment in space.grid():
        book.ensure(assignment)
    return book.outcome()


def _rates(st: Standing) -> list[float]:
    """The candidate's acceptance per position, averaged over its good runs."""
    runs = [r.per_position for r in st.runs if r.ok and r.per_position]
    if not runs:
        return []
    width = max(len(r) for r in runs)
    return [sum(r[i] if i < len(r) else 0.0 for r in runs) / len(runs) for i in range(width)]


def modelled(
    space: SearchSpace,
    evaluator: Evaluator,
    scoring: Scoring,
    plain: Standing | None = None,
    max_candidates: int | None = None,
) -> Outcome:
    """The depth model's search (see the module docstring); a grid where it cannot read
    the space."""
    valid = [a for a in space.grid() if not space.candidate(a).invalid]
    depths = {a: depth_of(space.candidate(a).profile) for a in valid}
    known = {a: d for a, d in depths.items() if d is not None}
    if len(space.parameters) != 1 or len(known) != len(depths) or len(set(known.values())) < 2:
        out = grid(space, evaluator, scoring, plain)
        out.steps.insert(0, "model: the space is not one chain depth; measured as a grid")
        return out
    book = _Book(space, evaluator, scoring, plain, _running(plain))
    order = sorted(known, key=lambda a: known[a])
    ref = book.ensure(order[-1])
    rates = _rates(ref)
    if ref.rejected or not rates:
        book.steps.append(
            f"model: {ref.candidate.key} gave no acceptance per position"
            f" ({ref.rejected or 'it drafted nothing'}); measuring the rest as a grid"
        )
        for a in order:
            book.ensure(a)
        return book.outcome()
    book.ensure(order[0])
    book.steps.append(
        f"model: rates per position read at {ref.candidate.key} (depth {known[order[-1]]}),"
        f" the step cost from it and {book.get(order[0]).candidate.key}"
    )
    while True:
        measured = [book.get(a) for a in order if book.get(a).usable]
        points = [Point(st.candidate.key, known[st.candidate.assignment], st.median or 0.0)
                  for st in measured]  # fmt: skip
        if len({p.depth for p in points}) < 2:
            book.steps.append("model: fewer than two depths usable; stopped")
            break
        spread = book.spread() or scoring.min_gain
        model = DepthModel.fit(rates, known[order[-1]], points, spread, scoring.z)
        preds = {a: model.predict(space.candidate(a).key, known[a]) for a in order}
        best_a = max(order, key=lambda a: preds[a].objective)
        i = order.index(best_a)
        new = [a for a in order[max(i - 1, 0) : i + 2] if not book.get(a).runs]
        best = preds[best_a]
        if not new:
            book.steps.append(f"model: predicted best {best.key} and its neighbours measured")
            break
        if max_candidates is not None and book.measured + len(new) > max_candidates:
            book.steps.append(f"stopped: {max_candidates} candidates measured (max_candidates)")
            break
        for a in new:
            book.ensure(a)
        top = max((book.get(a) for a in order if book.get(a).usable), key=_rank)
        held = best.holds(top.median or 0.0)
        book.steps.append(
            f"model: predicted best {best.key} {best.objective:.1f} ({best.low:.1f} to"
            f" {best.high:.1f}); measured best {top.candidate.key} {top.median or 0.0:.1f}:"
            f" {'inside, stop' if held else 'outside, refit'}"
        )
        if held:
            break
    return book.outcome()


def _rank(st: Standing) -> tuple[float, float]:
    return (st.median or 0.0, st.tiebreak or 0.0)


def standings(outcome: Outcome) -> list[Standing]:
    """Usable candidates by median (best first), then the rejected ones."""
    usable = sorted((s for s in outcome.standings.values() if s.usable), key=_rank, reverse=True)
    rest = [s for s in outcome.standings.values() if not s.usable]
    return usable + rest


def _cost(space: SearchSpace, st: Standing) -> tuple[int, tuple[int, ...], float]:
    cost = space.cost(st.candidate.assignment)
    return (sum(cost), cost, -(st.median or 0.0))


def _pct(a: float, b: float) -> str:
    return f"{(a - b) / b:+.1%}" if b else "n/a"


def choose(
    items: Sequence[Standing],
    space: SearchSpace,
    scoring: Scoring,
    plain: Standing | None = None,
) -> Choice:
    """The best (median), the pick (cheapest within ``tolerance`` of it), the runner-up.

    Noise decides the walk, not the pick: with wide intervals "cheapest within noise"
    would trade real throughput for a cheaper profile (simulated in
    tests/tune/test_p5_algorithm.py, it lost P5 far more often).

    ``plain`` (no speculation, one of ``items`` or not): the cheapest candidate of all,
    so picked when within ``tolerance`` of the best; a speculative pick must beat it
    beyond noise (:func:`~specops.tune.score.compare`), else no speculation is picked.
    """
    pool = list(items)
    if plain is not None and plain not in pool:
        pool.append(plain)
    usable = [s for s in pool if s.usable]
    spread = pooled_spread([s.values for s in usable])
    verdict = None
    if plain is not None and not plain.usable:
        why = plain.rejected or "not measured"
        verdict = f"no speculation unusable ({why}): the pick is not checked against it"
    if not usable:
        return Choice(None, None, None, spread, verdict)
    best = max(usable, key=_rank)
    floor = (best.median or 0.0) * (1 - scoring.tolerance)
    near = [s for s in usable if (s.median or 0.0) >= floor]
    pick = min(near, key=lambda s: _cost(space, s))
    if plain is not None and plain.usable:
        pick, verdict = _against_plain(
            best, near, plain, space=space, scoring=scoring, spread=spread
        )
    others = sorted((s for s in usable if s is not pick), key=_rank, reverse=True)
    return Choice(best, pick, others[0] if others else None, spread, verdict)


def _against_plain(
    best: Standing,
    near: list[Standing],
    plain: Standing,
    *,
    space: SearchSpace,
    scoring: Scoring,
    spread: float | None,
) -> tuple[Standing, str]:
    """The pick and its verdict against no speculation (see :func:`choose`)."""
    p = plain.median or 0.0
    tol = f"{scoring.tolerance:.0%}"
    if best is plain:
        runner = max((s for s in near if s is not plain), key=_rank, default=None)
        tail = (
            f"; the best speculative candidate within {tol}, {runner.candidate.key},"
            f" {runner.median:.1f} ({_pct(runner.median or 0.0, p)})"
            if runner is not None
            else f"; no speculative candidate comes within {tol} of it"
        )
        return plain, f"pick none: no speculation has the best median ({p:.1f} tok/s){tail}"
    b = best.median or 0.0
    if plain in near:
        return plain, (
            f"pick none: no speculation ({p:.1f} tok/s) is within the {tol} tolerance of the"
            f" best, {best.candidate.key} ({b:.1f} tok/s, {_pct(b, p)}): the cheaper setting"
        )
    beat = [s for s in near if compare(s.values, plain.values, scoring, spread) is Decision.BETTER]
    if not beat:
        need = margin(best.values, plain.values, scoring, spread)
        return plain, (
            f"pick none: no speculative candidate beats no speculation beyond noise: the best,"
            f" {best.candidate.key}, {b:.1f} vs {p:.1f} tok/s ({_pct(b, p)}), margin"
            f" {need:.1f} tok/s"
        )
    pick = min(beat, key=lambda s: _cost(space, s))
    m = pick.median or 0.0
    need = margin(pick.values, plain.values, scoring, spread)
    return pick, (
        f"{pick.candidate.key} beats no speculation beyond noise: {m:.1f} vs {p:.1f} tok/s"
        f" ({_pct(m, p)}, margin {need:.1f} tok/s)"
    )
