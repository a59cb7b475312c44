"""The preflight's problem lines, as the table-driven inventory tests check them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["assert_named"]


def assert_named(problems: Sequence[str], expected: Sequence[tuple[str, str]]) -> None:
    """One line per expected problem, in order: it starts with ``host: variable`` and
    holds the text saying what is valid."""
    assert len(problems) == len(expected), problems
    for problem, (start, text) in zip(problems, expected, strict=True):
        assert problem.startswith(start), problem
        assert text in problem, problem
        assert "\n" not in problem
