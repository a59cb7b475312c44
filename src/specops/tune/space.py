"""The search space: ordered parameters over a base speculative profile.

A space maps profile fields to ordered value lists, cheapest first (fewer draft
tokens, smaller windows and budgets cost less compute), e.g.
``{"num_draft_tokens": "2..9", "topk": [1, 4, 8]}``. The order of the keys is the
order coordinate ascent walks them. A *candidate* is the base profile with one value
per parameter; it is checked through the profile translator for the serving engine, so
a candidate the engine build cannot take is known to be invalid before anything
restarts. :func:`plain_candidate` is method ``none`` (key ``none``), which the sweep
measures beside every space: it has no assignment, so it costs least of all.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from specops.errors import ValidationError
from specops.speculative import INT_FIELDS, Engine, SpeculativeProfile, launch
from specops.tune.plain import PLAIN_KEY, PLAIN_PROFILE

__all__ = [
    "TUNABLE",
    "Assignment",
    "Candidate",
    "Parameter",
    "SearchSpace",
    "assignment_key",
    "plain_candidate",
]

# Profile fields a sweep may vary: the profile's integer fields (ordered, numeric).
TUNABLE = INT_FIELDS
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")

Assignment = tuple[tuple[str, int], ...]


def assignment_key(assignment: Assignment) -> str:
    """Stable text key of an assignment, e.g. ``num_draft_tokens=4,topk=1``."""
    return ",".join(f"{name}={value}" for name, value in assignment)


@dataclass(frozen=True)
class Parameter:
    name: str
    values: tuple[int, ...]  # cheapest first

    def index(self, value: int) -> int:
        return self.values.index(value)


@dataclass(frozen=True)
class Candidate:
    """One point of the space: the assignment, the full profile, and whether it renders."""

    assignment: Assignment
    profile: dict[str, Any]  # inventory mapping (SpeculativeProfile.to_mapping)
    argv: tuple[str, ...]  # the engine flags the translator rendered ([] when invalid)
    invalid: str | None  # the translator's message when the engine cannot take it

    @property
    def key(self) -> str:
        """The assignment's key; ``none`` for the plain candidate (no assignment)."""
        return assignment_key(self.assignment) or PLAIN_KEY

    @property
    def plain(self) -> bool:
        """No speculation: the candidate the sweep measures beside the space's."""
        return not self.assignment


def plain_candidate() -> Candidate:
    """Method ``none``: no assignment, no engine flags; the cheapest of all candidates."""
    return Candidate((), dict(PLAIN_PROFILE), (), None)


def _values(name: str, raw: object) -> tuple[int, ...]:
    where = f"space.{name}"
    if isinstance(raw, str):
        match = _RANGE.match(raw)
        if not match:
            raise ValidationError(
                where, f"must be a list of integers or a range 'A..B' (got {raw!r})"
            )
        low, high = int(match.group(1)), int(match.group(2))
        if high < low:
            raise ValidationError(where, f"range {raw!r} is empty (A must be <= B)")
        return tuple(range(low, high + 1))
    if not isinstance(raw, list) or not raw:
        raise ValidationError(
            where, f"must be a non-empty list of integers or 'A..B' (got {raw!r})"
        )
    values: list[int] = []
    for i, item in enumerate(raw):
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValidationError(f"{where}[{i}]", f"must be an integer (got {item!r})")
        if item in values:
            raise ValidationError(f"{where}[{i}]", f"{item} is listed twice")
        values.append(item)
    return tuple(values)


@dataclass(frozen=True)
class SearchSpace:
    base: SpeculativeProfile
    parameters: tuple[Parameter, ...]
    engine: Engine

    @classmethod
    def from_mapping(
        cls, base: Mapping[str, Any] | None, space: Mapping[str, Any], engine: Engine
    ) -> SearchSpace:
        profile = SpeculativeProfile.from_mapping(base, prefix="base_profile")
        if not isinstance(space, Mapping) or not space:
            raise ValidationError(
                "space", "must map profile fields to value lists, e.g. {num_draft_tokens: '2..9'}"
            )
        params = []
        for name, raw in space.items():
            if name not in TUNABLE:
                raise ValidationError(
                    f"space.{name}", f"is not a tunable profile field; valid: {', '.join(TUNABLE)}"
                )
            params.append(Parameter(name, _values(name, raw)))
        return cls(profile, tuple(params), engine)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def size(self) -> int:
        total = 1
        for p in self.parameters:
            total *= len(p.values)
        return total

    def start(self) -> Assignment:
        """The base profile's own values where the space has them, else the cheapest."""
        base = self.base.to_mapping()
        out = []
        for p in self.parameters:
            value = base.get(p.name)
            out.append((p.name, value if value in p.values else p.values[0]))
        return tuple(out)

    def cost(self, assignment: Assignment) -> tuple[int, ...]:
        """Orderable cost: the value indices (lower is cheaper), in parameter order."""
        return tuple(self.parameter(n).index(v) for n, v in assignment)

    def grid(self) -> Iterator[Assignment]:
        """Every assignment, cheapest first."""
        names = self.names
        for combo in itertools.product(*(p.values for p in self.parameters)):
            yield tuple(zip(names, combo, strict=True))

    def candidate(self, assignment: Assignment) -> Candidate:
        """The base profile with ``assignment`` applied, checked through the translator."""
        mapping = self.base.to_mapping()
        mapping.update(dict(assignment))
        try:
            profile = SpeculativeProfile.from_mapping(mapping, prefix="candidate")
            argv, _env = launch(profile, self.engine)
        except ValidationError as exc:
            return Candidate(assignment, mapping, (), str(exc))
        return Candidate(assignment, profile.to_mapping(), tuple(argv), None)

    def fingerprint(self) -> str:
        return json.dumps(
            {
                "base": self.base.to_mapping(),
                "space": {p.name: list(p.values) for p in self.parameters},
                "engine": self.engine.label,
            },
            sort_keys=True,
        )
