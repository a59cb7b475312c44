"""Errors that name what is wrong and what would be valid.

The one home of specops' error classes: the collection's filters raise them and the
controller package (``specops.errors`` re-exports them) turns them into one line and
exit 2. Standard library only.
"""

from __future__ import annotations

__all__ = ["SpecopsError", "ValidationError"]


class SpecopsError(Exception):
    """Base class: the message is shown to the operator as is, on one line."""


class ValidationError(SpecopsError):
    """Bad input, caught before anything changes.

    ``field`` is the dotted name of the variable or key at fault, so a message reads
    ``speculative.num_steps: must be >= 1 (got 0)``.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")
