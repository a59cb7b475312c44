"""Errors that name what is wrong and what would be valid.

The one home of specops' error classes: the collection's filters raise them and the
controller package (``specops.errors`` re-exports them) turns them into one line and
exit 2. Bad input has one shape everywhere, :class:`ValidationError` (field, problem,
valid values); the module_utils families' own classes (``GpuSelectError``,
``LxcGpuError``, ``PveConfError``, ``pve_container.SpecError``) are that shape under
their family's name, so a caller may catch either. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SpecopsError", "ValidationError"]


class SpecopsError(Exception):
    """Base class: the message is shown to the operator as is, on one line."""


class ValidationError(SpecopsError):
    """Bad input, caught before anything changes.

    ``field`` is the dotted name of the variable, key or line at fault, ``problem`` what
    is wrong with it, ``valid`` (optional) the values that would be accepted, so a
    message reads ``speculative.num_steps: must be >= 1 (got 0)`` or
    ``ipc_limits: 'sometimes' is not a mode (valid: auto, always, never)``.
    """

    def __init__(self, field: str, problem: str, valid: Iterable[object] = ()) -> None:
        self.field = field
        self.problem = problem
        self.valid = tuple(str(v) for v in valid)
        said = f" (valid: {', '.join(self.valid)})" if self.valid else ""
        super().__init__(f"{field}: {problem}{said}")
