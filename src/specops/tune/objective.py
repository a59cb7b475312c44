"""A candidate's objective and verdict, read from a bench results document.

Nothing here measures: the numbers come from :class:`specops.bench.results.Results`
(``specops bench run`` wrote them). The objective is the operator's (the sweep config's
``objective.kind``), always a number where higher is better:

- ``mean`` (the default, what every sweep used before objectives had kinds): the mean
  over the plan's cells of the cell's output tok/s. The cells of highest concurrency
  weigh most (they have the most tok/s).
- ``latency``: the per-request decode speed at one cell, 1000 / TPOT p50 (tok/s of one
  request; TPOT p50 in ms is 1000 over it), at ``concurrency`` (default 1) and
  ``context`` (default the plan's shortest): an operator who serves one agent at a time.
- ``throughput``: output tok/s at one cell, ``concurrency`` (default the plan's highest)
  and ``context`` (default the shortest).
- ``goodput``: the highest request rate (completed requests per second) among the
  cells at ``context`` (default the shortest) whose TTFT p90 and TPOT p90 meet
  ``ttft_ms`` / ``tpot_ms`` (at least one given); 0 when no cell meets them. Each cell
  needs at least 10 requests for its p90 (checked against the plan before anything runs).
- ``mix``: a weighted set of cells that describes the traffic, each ``{concurrency,
  context, weight}``: the weighted geometric mean of their output tok/s, so a relative
  gain in a cell counts by its weight whatever that cell's absolute tok/s.

Tie-break: single-stream tok/s (output tok/s of the cells at the plan's lowest
concurrency). A run is rejected when any request failed (warm-up included) or the
correctness gate fails, or when the objective's cell was not measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specops.bench.intervals import CellBoot
from specops.bench.plan import Plan, parse_token_count
from specops.bench.results import Cell, Results
from specops.errors import ValidationError
from specops.tune.search import Measurement

__all__ = [
    "OBJECTIVE_KINDS",
    "CorrectnessGate",
    "MixPoint",
    "Objective",
    "correctness_verdict",
    "measurement_from_results",
]

OBJECTIVE_KINDS: tuple[str, ...] = ("mean", "latency", "throughput", "goodput", "mix")
# The keys of the config's objective section that say what is optimised (the others
# say how scores are compared: specops.tune.score.Scoring).
OBJECTIVE_KEYS: frozenset[str] = frozenset(
    {"kind", "concurrency", "context", "ttft_ms", "tpot_ms", "mix"}
)
_GOODPUT_MIN_REQUESTS = 10  # a p90 needs at least 10 values (bench.intervals.min_values)


@dataclass(frozen=True)
class MixPoint:
    concurrency: int
    context: int
    weight: float


@dataclass(frozen=True)
class Objective:
    """What the sweep optimises (see the module docstring); resolved against the plan
    by :meth:`resolve` (defaults filled in, every named cell in the plan)."""

    kind: str = "mean"
    concurrency: int | None = None
    context: int | None = None
    ttft_ms: float | None = None  # goodput: TTFT p90 limit
    tpot_ms: float | None = None  # goodput: TPOT p90 limit
    mix: tuple[MixPoint, ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Objective:
        """The objective keys of the config's ``objective`` section; errors name them."""
        kind = data.get("kind", "mean")
        if kind not in OBJECTIVE_KINDS:
            raise ValidationError(
                "objective.kind", f"must be one of {', '.join(OBJECTIVE_KINDS)} (got {kind!r})"
            )
        conc = data.get("concurrency")
        if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
            raise ValidationError(
                "objective.concurrency", f"must be an integer >= 1 (got {conc!r})"
            )
        ctx = data.get("context")
        context = parse_token_count(ctx, "objective.context") if ctx is not None else None
        limits: dict[str, float | None] = {}
        for key in ("ttft_ms", "tpot_ms"):
            value = data.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise ValidationError(
                    f"objective.{key}", f"must be milliseconds > 0 (got {value!r})"
                )
            limits[key] = float(value) if value is not None else None
        mix = _mix(data.get("mix"))
        obj = cls(str(kind), conc, context, limits["ttft_ms"], limits["tpot_ms"], mix)
        obj._check_kind_fields()
        return obj

    def _check_kind_fields(self) -> None:
        given = {
            "concurrency": self.concurrency is not None, "context": self.context is not None,
            "ttft_ms": self.ttft_ms is not None, "tpot_ms": self.tpot_ms is not None,
            "mix": bool(self.mix),
        }  # fmt: skip
        allowed = {
            "mean": set(),
            "latency": {"concurrency", "context"},
            "throughput": {"concurrency", "context"},
            "goodput": {"context", "ttft_ms", "tpot_ms"},
            "mix": {"mix"},
        }[self.kind]
        for key, present in given.items():
            if present and key not in allowed:
                valid = ", ".join(sorted(allowed)) or "none"
                raise ValidationError(
                    f"objective.{key}",
                    f"does not apply to objective kind {self.kind} (its keys: {valid})",
                )
        if self.kind == "goodput" and self.ttft_ms is None and self.tpot_ms is None:
            raise ValidationError(
                "objective.ttft_ms", "goodput needs a TTFT or TPOT p90 limit (ttft_ms, tpot_ms)"
            )
        if self.kind == "mix" and not self.mix:
            raise ValidationError(
                "objective.mix",
                "is required for kind mix: a list of {concurrency, context, weight}",
            )

    def resolve(self, plan: Plan) -> Objective:
        """Defaults filled in from ``plan``, and every named cell in it (ValidationError
        naming the key and the plan's values otherwise)."""
        conc, ctxs = plan.concurrency, plan.context_lengths
        context = self.context if self.context is not None else min(ctxs)
        if self.kind == "mean":
            return self
        if self.kind == "mix":
            for i, p in enumerate(self.mix):
                _in_plan(f"objective.mix[{i}].concurrency", p.concurrency, conc, "concurrency")
                _in_plan(f"objective.mix[{i}].context", p.context, ctxs, "context_lengths")
            return self
        _in_plan("objective.context", context, ctxs, "context_lengths")
        if self.kind == "goodput":
            short = [c for c in conc if plan.requests_for(c) < _GOODPUT_MIN_REQUESTS]
            if short:
                raise ValidationError(
                    "objective.kind",
                    f"goodput judges TTFT/TPOT p90, which needs >= {_GOODPUT_MIN_REQUESTS}"
                    f" requests per cell; the plan sends {plan.requests_for(short[0])} at"
                    f" C={short[0]} (raise plan.requests_per_cell or plan.waves_per_cell)",
                )
            return Objective(self.kind, None, context, self.ttft_ms, self.tpot_ms)
        default = min(conc) if self.kind == "latency" else max(conc)
        c = self.concurrency if self.concurrency is not None else default
        _in_plan("objective.concurrency", c, conc, "concurrency")
        return Objective(self.kind, c, context)

    @property
    def is_default(self) -> bool:
        return self == Objective()

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "concurrency": self.concurrency, "context": self.context,
            "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
            "mix": [[p.concurrency, p.context, p.weight] for p in self.mix],
        }  # fmt: skip

    def to_mapping(self) -> dict[str, Any]:
        """The objective as a config's ``objective`` section (what :meth:`from_mapping`
        reads back): the keys it sets, none that it leaves to the plan."""
        data: dict[str, Any] = {"kind": self.kind}
        for key in ("concurrency", "context", "ttft_ms", "tpot_ms"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.mix:
            data["mix"] = [
                {"concurrency": p.concurrency, "context": p.context, "weight": p.weight}
                for p in self.mix
            ]
        return data

    @property
    def label(self) -> str:
        """What the objective is, in words (the leaderboard's first line)."""
        if self.kind == "mean":
            return "mean output tok/s over the plan's cells"
        if self.kind == "latency":
            return (
                f"per-request decode speed at C={self.concurrency}, {self.context} tokens in:"
                " 1000 / TPOT p50 (tok/s of one request; TPOT p50 in ms = 1000 / it)"
            )
        if self.kind == "throughput":
            return f"output tok/s at C={self.concurrency}, {self.context} tokens in"
        if self.kind == "goodput":
            limits = " and ".join(
                f"{name} p90 <= {value:g} ms"
                for name, value in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms))
                if value is not None
            )
            return (
                f"goodput at {self.context} tokens in: the highest request rate (req/s) of a"
                f" cell meeting {limits}"
            )
        parts = ", ".join(f"C={p.concurrency}/{p.context} x{p.weight:g}" for p in self.mix)
        return f"traffic mix: weighted geometric mean of output tok/s over {parts}"

    @property
    def unit(self) -> str:
        return "req/s" if self.kind == "goodput" else "tok/s"

    def value(self, results: Results) -> tuple[float | None, str]:
        """The objective of one run, or None and why (a cell the run lacks)."""
        cells = results.cells
        if self.kind == "mean":
            return statistics.fmean(c.stats.output_tok_s or 0.0 for c in cells), ""
        if self.kind == "goodput":
            return self._goodput(cells), ""
        if self.kind == "mix":
            return self._mix_value(cells)
        return self._one_cell(cells)

    def samples(self, results: Results) -> list[float] | None:
        """The objective of ``results`` under the bootstrap over its requests (one value
        per resample, :class:`~specops.bench.intervals.CellBoot`), or None when its
        requests were not recorded or the kind has none (goodput: a maximum over cells
        that pass or fail a limit)."""
        if self.kind == "goodput" or not results.cells or not all(c.records for c in results.cells):
            return None
        if self.kind == "mean":
            per_cell = [CellBoot([c]).samples("output_tok_s") for c in results.cells]
            return [statistics.fmean(v) for v in zip(*per_cell, strict=True)]
        if self.kind == "mix":
            return self._mix_samples(results)
        cell = _cell(results.cells, self.concurrency or 1, self.context or 0)
        if cell is None:
            return None
        if self.kind == "throughput":
            return CellBoot([cell]).samples("output_tok_s")
        return [1000.0 / v for v in CellBoot([cell]).samples("tpot_ms_p50") if v > 0]

    def _mix_samples(self, results: Results) -> list[float] | None:
        weighted: list[tuple[float, list[float]]] = []
        for p in self.mix:
            cell = _cell(results.cells, p.concurrency, p.context)
            if cell is None:
                return None
            weighted.append((p.weight, CellBoot([cell]).samples("output_tok_s")))
        total = sum(w for w, _ in weighted)
        return [
            math.exp(sum(w * math.log(max(v[j], 1e-12)) for w, v in weighted) / total)
            for j in range(len(weighted[0][1]))
        ]

    def _one_cell(self, cells: list[Cell]) -> tuple[float | None, str]:
        conc, ctx = self.concurrency or 1, self.context or 0
        cell = _cell(cells, conc, ctx)
        if cell is None:
            return None, f"cell C={conc} ctx {ctx} not measured"
        if self.kind == "throughput":
            return cell.stats.output_tok_s, ""
        tpot = cell.stats.tpot_ms.p50
        if not tpot:
            return None, f"cell C={conc} ctx {ctx} has no TPOT"
        return 1000.0 / tpot, ""

    def _goodput(self, cells: list[Cell]) -> float:
        ctx = self.context or 0
        rates = [
            c.stats.request_rate
            for c in cells
            if _same_context(c, ctx, cells) and _meets(c, self.ttft_ms, self.tpot_ms)
        ]
        return max(rates, default=0.0)

    def _mix_value(self, cells: list[Cell]) -> tuple[float | None, str]:
        logs = total = 0.0
        for p in self.mix:
            cell = _cell(cells, p.concurrency, p.context)
            if cell is None or not cell.stats.output_tok_s:
                return None, f"mix cell C={p.concurrency} ctx {p.context} not measured"
            logs += p.weight * math.log(cell.stats.output_tok_s)
            total += p.weight
        return math.exp(logs / total), ""


def _mix(raw: object) -> tuple[MixPoint, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ValidationError(
            "objective.mix", f"must be a list of {{concurrency, context, weight}} (got {raw!r})"
        )
    points = []
    for i, item in enumerate(raw):
        where = f"objective.mix[{i}]"
        if not isinstance(item, Mapping):
            raise ValidationError(where, f"must be {{concurrency, context, weight}} (got {item!r})")
        for key in item:
            if key not in ("concurrency", "context", "weight"):
                raise ValidationError(
                    f"{where}.{key}", "unknown key; valid: concurrency, context, weight"
                )
        conc = item.get("concurrency")
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise ValidationError(f"{where}.concurrency", f"must be an integer >= 1 (got {conc!r})")
        if "context" not in item:
            raise ValidationError(f"{where}.context", "is required (e.g. 1K)")
        ctx = parse_token_count(item["context"], f"{where}.context")
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise ValidationError(f"{where}.weight", f"must be a number > 0 (got {weight!r})")
        points.append(MixPoint(conc, ctx, float(weight)))
    return tuple(points)


def _in_plan(where: str, value: int, values: tuple[int, ...], plan_key: str) -> None:
    if value not in values:
        have = ", ".join(str(v) for v in values)
        raise ValidationError(where, f"{value} is not in the plan's {plan_key} ({have})")


def _same_context(cell: Cell, context: int, cells: list[Cell]) -> bool:
    """The cell measured ``context``: the same length, or the one a clipped run measured
    in its place (the longest measured length not above it)."""
    measured = sorted({c.context_tokens for c in cells})
    fits = [c for c in measured if c <= context]
    return cell.context_tokens == (fits[-1] if fits else measured[0])


def _cell(cells: list[Cell], concurrency: int, context: int) -> Cell | None:
    for c in cells:
        if c.concurrency == concurrency and _same_context(c, context, cells):
            return c
    return None


def _meets(cell: Cell, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    s = cell.stats
    if cell.status != "ok" or s.completed < _GOODPUT_MIN_REQUESTS:
        return False
    if ttft_ms is not None and (s.ttft_ms.p90 is None or s.ttft_ms.p90 > ttft_ms):
        return False
    return not (tpot_ms is not None and (s.tpot_ms.p90 is None or s.tpot_ms.p90 > tpot_ms))


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


def measurement_from_results(
    results: Results, gate: CorrectnessGate, objective: Objective | None = None
) -> Measurement:
    """The run's objective (``objective``, resolved; None: ``mean``), tie-break and
    verdict."""
    if not results.cells:
        return Measurement(0.0, 0.0, False, "no cells measured")
    value, why_none = (objective or Objective()).value(results)
    lowest = min(c.concurrency for c in results.cells)
    tiebreak = statistics.fmean(
        c.stats.output_tok_s or 0.0 for c in results.cells if c.concurrency == lowest
    )
    if value is None:
        return Measurement(0.0, tiebreak, False, f"objective: {why_none}")
    objective_value = value
    rates = _per_position(results)
    failed = sum(c.stats.failed + c.warmup_failed for c in results.cells)
    failed += int((results.warmup or {}).get("failed") or 0)
    if failed or results.failed_cells:
        return Measurement(objective_value, tiebreak, False, f"{failed} failed request(s)", rates)
    why = correctness_verdict(results, gate)
    if why:
        return Measurement(objective_value, tiebreak, False, why, rates)
    return Measurement(objective_value, tiebreak, per_position=rates)


def _per_position(results: Results) -> tuple[float, ...]:
    """Acceptance per draft position over the run's cells, drafts-weighted."""
    cells = [c.acceptance for c in results.cells if c.acceptance.drafts > 0]
    drafts = sum(a.drafts for a in cells)
    if drafts <= 0:
        return ()
    width = max(len(a.per_position) for a in cells)
    return tuple(
        sum(a.drafts * (a.per_position[i] if i < len(a.per_position) else 0.0) for a in cells)
        / drafts
        for i in range(width)
    )
