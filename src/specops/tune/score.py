"""Robust scores over repeated measurements and the noise-aware comparison.

A candidate's score is ``median - k * 1.4826 * MAD`` over its repeats (the
normal-consistent MAD, as vLLM's speculative-K tuner scores). Two candidates differ
*beyond noise* when their medians differ by more than the larger of a relative floor
(``min_gain`` of the incumbent's median) and ``k`` noise widths (1.4826 * MAD of either
side). Everything here is pure arithmetic.
"""

from __future__ import annotations

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
    "mad",
    "robust_score",
    "sigma",
]

MAD_SCALE = 1.4826


@dataclass(frozen=True)
class Scoring:
    """How scores are made and compared (the sweep config's ``objective`` section)."""

    k: float = 1.0  # noise widths subtracted in the robust score and needed to win
    min_gain: float = 0.02  # relative gain a step must beat, whatever the spread
    tolerance: float = 0.03  # a cheaper candidate within this of the best is picked
    min_repeats: int = 2  # benchmark runs per candidate on its first visit
    max_repeats: int = 4  # runs allowed when a decision is within noise

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValidationError("objective.k", f"must be >= 0 (got {self.k})")
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


def sigma(values: Sequence[float]) -> float:
    """Noise width: 1.4826 * MAD."""
    return MAD_SCALE * mad(values)


def robust_score(values: Sequence[float], k: float) -> float:
    """``median - k * 1.4826 * MAD`` of non-empty ``values``."""
    if not values:
        raise ValueError("robust score of no values")
    return float(statistics.median(values)) - k * sigma(values)


def compare(challenger: Sequence[float], incumbent: Sequence[float], s: Scoring) -> Decision:
    """Is ``challenger`` better than ``incumbent`` beyond noise, worse, or within it?"""
    a = float(statistics.median(challenger))
    b = float(statistics.median(incumbent))
    margin = max(s.min_gain * abs(b), s.k * max(sigma(challenger), sigma(incumbent)))
    if a - b > margin:
        return Decision.BETTER
    if b - a > margin:
        return Decision.WORSE
    return Decision.WITHIN_NOISE
