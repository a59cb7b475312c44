"""Fewer restarts by a model: the acceptance per position read at one depth predicts
the acceptance length at every depth, and the step cost measured at two depths
predicts every candidate's objective.

Acceptance. A draft chain of ``k`` positions (``num_draft_tokens - 1``: ``num_steps``
for a top-k 1 chain, ``num_speculative_tokens`` on vLLM) verifies ``k`` drafted tokens
per step. The engines report per position ``i`` the fraction of steps whose first
``i + 1`` drafts were all accepted (``p_i``); its conditional rate is ``c_i = p_i /
p_{i-1}`` (``c_0 = p_0``). The expected tokens per step at depth ``k`` are ``1 +
sum over i < k of prod over j <= i of c_j`` (the bonus token plus the accepted drafts):
exact at every depth up to the one read, and beyond it the last conditional rate held.

Cost. A step at depth ``k`` takes ``a + b k`` (the verify pass and ``k`` draft
passes), so the objective (tokens per second, all kinds but goodput) is
``AL(k) / (a + b k)`` up to a scale; ``a`` and ``b`` come from the objectives measured
at two depths or more (least squares on ``AL / objective``). The band of a prediction:
``z`` standard errors from the measured points' relative noise carried through the
line (interpolation keeps it, extrapolation widens it).

The model-guided search (:func:`replay` on a recorded grid): measure the reference
depth (where the per-position rates are read) and the depth farthest from it, predict
every candidate, measure the predicted best and its neighbours, refit, and stop when
the measured best lies inside its prediction's band. The restarts it would have saved
are the grid's candidates it never measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops.errors import ValidationError
from specops.speculative import SpeculativeProfile

__all__ = [
    "DepthModel",
    "Point",
    "Prediction",
    "Replay",
    "acceptance_length",
    "conditional_rates",
    "depth_of",
    "replay",
]


def conditional_rates(per_position: Sequence[float]) -> list[float]:
    """``c_i = p_i / p_{i-1}`` (``c_0 = p_0``); a position after one never accepted
    has rate 0."""
    out: list[float] = []
    before = 1.0
    for p in per_position:
        out.append(p / before if before > 0 else 0.0)
        before = p
    return out


def acceptance_length(per_position: Sequence[float], depth: int) -> float:
    """Expected tokens per verify step at ``depth`` draft positions from the rates read
    at another depth (the last conditional rate held beyond it)."""
    rates = conditional_rates(per_position)
    if depth > len(rates):
        last = rates[-1] if rates else 0.0
        rates += [last] * (depth - len(rates))
    total, product = 1.0, 1.0
    for c in rates[:depth]:
        product *= c
        total += product
    return total


def depth_of(profile: Mapping[str, Any]) -> int | None:
    """Draft positions a candidate verifies per step, or None when the model does not
    apply (no speculation, a tree: top-k above 1, a method without a chain depth)."""
    try:
        p = SpeculativeProfile.from_mapping(profile, prefix="candidate")
    except ValidationError:
        return None
    if p.method in ("none", None) or (p.topk or 1) != 1:
        return None
    tokens = p.effective_num_draft_tokens
    return tokens - 1 if tokens else None


@dataclass(frozen=True)
class Point:
    """A measured candidate: its depth and objective (and acceptance length when read)."""

    key: str
    depth: int
    objective: float
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Prediction:
    key: str
    depth: int
    acceptance_length: float
    objective: float
    band: float  # relative half-width (z standard errors)

    @property
    def low(self) -> float:
        return self.objective * (1 - self.band)

    @property
    def high(self) -> float:
        return self.objective * (1 + self.band)

    def holds(self, measured: float) -> bool:
        return self.low <= measured <= self.high


@dataclass(frozen=True)
class DepthModel:
    """``objective(k) = AL(k) / (a + b k)`` fitted on measured points."""

    per_position: tuple[float, ...]  # read at the reference depth
    reference: int  # the depth the rates were read at
    a: float
    b: float
    spread: float  # relative noise of one measured objective
    z: float
    anchors: tuple[int, ...]  # the depths fitted on

    @classmethod
    def fit(
        cls,
        per_position: Sequence[float],
        reference: int,
        points: Sequence[Point],
        spread: float,
        z: float,
    ) -> DepthModel:
        """Least squares of ``AL(k) / objective(k)`` on ``k`` over ``points`` (two
        depths or more); AL from ``per_position``."""
        depths = sorted({p.depth for p in points})
        if len(depths) < 2:
            raise ValueError("the step cost needs objectives at two depths")
        xs = [float(p.depth) for p in points]
        ys = [acceptance_length(per_position, p.depth) / p.objective for p in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        a = my - b * mx
        return cls(tuple(per_position), reference, a, b, spread, z, tuple(depths))

    def _band(self, depth: int) -> float:
        """z x the relative error of ``a + b k`` carried from the two outermost anchors."""
        lo, hi = self.anchors[0], self.anchors[-1]
        lam = (depth - lo) / (hi - lo)
        t_lo, t_hi = self.a + self.b * lo, self.a + self.b * hi
        t = self.a + self.b * depth
        if t <= 0:
            return math.inf
        err = math.hypot((1 - lam) * t_lo, lam * t_hi) * self.spread / t
        return self.z * err

    def predict(self, key: str, depth: int) -> Prediction:
        length = acceptance_length(self.per_position, depth)
        cost = self.a + self.b * depth
        value = length / cost if cost > 0 else math.nan
        return Prediction(key, depth, length, value, self._band(depth))


@dataclass
class Replay:
    """The model-guided search replayed on a recorded grid. ``model`` and
    ``predictions``: from the first two depths alone (every other candidate's prediction
    is made before it is measured); ``final``: the last refit."""

    model: DepthModel
    predictions: dict[str, Prediction]
    measured: dict[str, Point]  # the grid's measurements (every candidate)
    final: DepthModel | None = None
    visited: list[str] = field(default_factory=list)  # what the model would measure, in order
    steps: list[str] = field(default_factory=list)
    best_measured: str | None = None  # the grid's best
    best_model: str | None = None  # the model search's best among what it measured

    @property
    def restarts(self) -> int:
        return len(self.visited)

    @property
    def saved(self) -> int:
        return len(self.measured) - len(self.visited)

    def ranking(self) -> list[dict[str, Any]]:
        """Every candidate: predicted and measured, each with its rank."""
        by_pred = sorted(self.predictions.values(), key=lambda p: -p.objective)
        by_meas = sorted(self.measured.values(), key=lambda p: -p.objective)
        rank_p = {p.key: i + 1 for i, p in enumerate(by_pred)}
        rank_m = {p.key: i + 1 for i, p in enumerate(by_meas)}
        rows = []
        for p in sorted(self.predictions.values(), key=lambda p: p.depth):
            m = self.measured.get(p.key)
            rows.append({
                "key": p.key, "depth": p.depth,
                "predicted_acceptance_length": p.acceptance_length,
                "measured_acceptance_length": m.acceptance_length if m else None,
                "predicted": p.objective, "low": p.low, "high": p.high,
                "measured": m.objective if m else None,
                "within": p.holds(m.objective) if m else None,
                "predicted_rank": rank_p[p.key], "measured_rank": rank_m.get(p.key),
                "order": self.visited.index(p.key) + 1 if p.key in self.visited else None,
            })  # fmt: skip
        return rows


def replay(
    points: Mapping[str, Point],
    reference: str,
    per_position: Sequence[float],
    spread: float,
    z: float,
) -> Replay:
    """The model-guided search on a recorded grid (``points``: every candidate measured,
    by key; ``reference``: the candidate whose per-position rates are ``per_position``).
    See the module docstring."""
    ref = points[reference]
    others = sorted(
        (p for p in points.values() if p.key != reference),
        key=lambda p: (-abs(p.depth - ref.depth), p.depth),
    )
    if not others:
        raise ValueError("the step cost needs objectives at two depths")
    visited = [reference, others[0].key]
    steps = [
        f"measure {reference} (per-position rates read at depth {ref.depth}) and"
        f" {others[0].key} (the depth farthest from it): the step cost from two depths"
    ]
    first: tuple[DepthModel, dict[str, Prediction]] | None = None
    while True:
        model = DepthModel.fit(per_position, ref.depth, [points[k] for k in visited], spread, z)
        predictions = {k: model.predict(k, p.depth) for k, p in points.items()}
        first = first or (model, predictions)
        best = max(predictions.values(), key=lambda p: p.objective)
        around = sorted(points.values(), key=lambda p: p.depth)
        idx = [p.key for p in around].index(best.key)
        wanted = [around[i].key for i in (idx - 1, idx, idx + 1) if 0 <= i < len(around)]
        new = [k for k in wanted if k not in visited]
        if not new:
            steps.append(
                f"predicted best {best.key} ({best.objective:.1f}) and its neighbours are"
                " measured: stop"
            )
            break
        visited += new
        measured_best = max((points[k] for k in visited), key=lambda p: p.objective)
        held = best.holds(measured_best.objective)
        steps.append(
            f"predicted best {best.key} ({best.objective:.1f}, band {best.low:.1f} to"
            f" {best.high:.1f}); measure {', '.join(new)}; the measured best,"
            f" {measured_best.key} ({measured_best.objective:.1f}), is"
            f" {'inside: stop' if held else 'outside: refit on every depth measured'}"
        )
        if held:
            break
    measured_best = max((points[k] for k in visited), key=lambda p: p.objective)
    grid_best = max(points.values(), key=lambda p: p.objective)
    return Replay(
        first[0], first[1], dict(points), model, visited, steps, grid_best.key, measured_best.key
    )
