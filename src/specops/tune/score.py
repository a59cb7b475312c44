"""Scores with their uncertainty, and the noise-aware comparison. Pure arithmetic.

A candidate's score is the median of its runs. Its uncertainty comes from the
run-to-run spread, pooled over every candidate of the search (one candidate's two or
three runs say little about noise; the search's dozens of runs say a lot, and on one
machine the noise is the machine's, not the candidate's):

- spread: 1.4826 x the median absolute deviation of each run from its candidate's
  median, relative to that median, each deviation scaled by sqrt(n / (n - 1)) for the
  degree of freedom the candidate's own median took (about unbiased for normal noise;
  robust to a run slowed by something else on the machine);
- standard error of a median of n runs: spread x median / sqrt(n) (x 1.2533, the
  median's efficiency, from three runs on);
- interval: median +- z standard errors.

Two candidates differ *beyond noise* when their medians differ by more than the larger
of a relative floor (``min_gain`` of the incumbent's median) and ``z`` standard errors of
the difference. Within noise, the search measures the running candidate again (racing)
up to ``max_repeats``; beyond it, the loser is dropped.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from specops.errors import ValidationError

__all__ = [
    "MAD_SCALE",
    "Decision",
    "Scoring",
    "compare",
    "interval",
    "mad",
    "margin",
    "pooled_spread",
    "standard_error",
]

MAD_SCALE = 1.4826
_MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class Scoring:
    """How scores are made and compared (the sweep config's ``objective`` section)."""

    z: float = 2.0  # standard errors: interval half-width and the margin a step must beat
    min_gain: float = 0.02  # relative gain a step must beat, whatever the spread
    tolerance: float = 0.03  # a cheaper candidate within this (or within noise) of the best
    min_repeats: int = 2  # benchmark runs per candidate on its first visit
    max_repeats: int = 4  # runs allowed while a decision is within noise

    def __post_init__(self) -> None:
        if self.z < 0:
            raise ValidationError("objective.z", f"must be >= 0 (got {self.z})")
        if not 0 <= self.min_gain < 1:
            raise ValidationError("objective.min_gain", f"must be in [0, 1) (got {self.min_gain})")
        if not 0 <= self.tolerance < 1:
            raise ValidationError(
                "objective.tolerance", f"must be in [0, 1) (got {self.tolerance})"
            )
        if self.min_repeats < 1:
            raise ValidationError("objective.min_repeats", f"must be >= 1 (got {self.min_repeats})")
        if self.max_repeats < self.min_repeats:
            raise ValidationError(
                "objective.max_repeats",
                f"must be >= objective.min_repeats ({self.min_repeats}) (got {self.max_repeats})",
            )


class Decision(Enum):
    BETTER = "better"
    WORSE = "worse"
    WITHIN_NOISE = "within_noise"


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return float(statistics.median(abs(v - med) for v in values))


def pooled_spread(groups: Sequence[Sequence[float]]) -> float | None:
    """Relative run-to-run spread pooled over candidates with two runs or more."""
    deviations: list[float] = []
    for values in groups:
        n = len(values)
        med = statistics.median(values) if n else 0.0
        if n < 2 or med == 0:
            continue
        scale = math.sqrt(n / (n - 1))
        devs = sorted(abs(v - med) / abs(med) * scale for v in values)
        if n % 2 == 1:
            devs = devs[1:]  # the median run itself deviates by 0 by construction
        deviations += devs
    if not deviations:
        return None
    return MAD_SCALE * float(statistics.median(deviations))


def standard_error(values: Sequence[float], spread: float | None) -> float:
    """Standard error of the median of ``values`` under relative ``spread``."""
    if not values or spread is None:
        return 0.0
    factor = _MEDIAN_EFFICIENCY if len(values) >= 3 else 1.0
    return factor * spread * abs(float(statistics.median(values))) / math.sqrt(len(values))


def interval(values: Sequence[float], spread: float | None, z: float) -> tuple[float, float]:
    """median +- z standard errors."""
    med = float(statistics.median(values))
    half = z * standard_error(values, spread)
    return med - half, med + half


def margin(a: Sequence[float], b: Sequence[float], s: Scoring, spread: float | None) -> float:
    """How far apart medians of ``a`` and ``b`` must be to differ beyond noise."""
    se = math.hypot(standard_error(a, spread), standard_error(b, spread))
    return max(s.min_gain * abs(float(statistics.median(b))), s.z * se)


def compare(
    challenger: Sequence[float],
    incumbent: Sequence[float],
    s: Scoring,
    spread: float | None = None,
) -> Decision:
    """Is ``challenger`` better than ``incumbent`` beyond noise, worse, or within it?

    ``spread``: the search's pooled spread; None pools the two candidates' own runs.
    """
    if spread is None:
        spread = pooled_spread([challenger, incumbent])
    a = float(statistics.median(challenger))
    b = float(statistics.median(incumbent))
    need = margin(challenger, incumbent, s, spread)
    if a - b > need:
        return Decision.BETTER
    if b - a > need:
        return Decision.WORSE
    return Decision.WITHIN_NOISE
