"""Matplotlib, imported when a plot is drawn (not when a command starts).

The CLI's steps that only measure or decide (``specops rollout smoke``, ``bench run
--no-report``) then start in a fraction of the time; every plot uses the Agg backend.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["pyplot"]


def pyplot() -> ModuleType:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt
