"""Report text lives in Jinja templates under the repository's top-level ``templates/``,
which the package reaches as ``specops/templates`` (a link in the checkout, the files
themselves in the wheel: an installed specops carries its templates).

Python computes the numbers and hands them over keyed (mappings, dataclasses); the
templates hold every sentence and table layout, and format numbers with the filters
below. ``SPECOPS_TEMPLATES`` points at another directory (an operator's own templates).
"""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["estimate", "fmt", "render", "templates_dir"]


def templates_dir() -> Path:
    env = os.environ.get("SPECOPS_TEMPLATES")
    return Path(env) if env else Path(__file__).parent / "templates"


def fmt(value: Any, digits: int = 1) -> str:
    """How every number appears in a report: ``-`` for none, ints as ints."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def estimate(value: Any, digits: int = 1) -> str:
    """A figure with its 95 % interval, ``1374.2 [1290.0, 1450.3]``; a figure not shown
    (too few requests for a percentile) as why in parentheses, ``(8 req < 10 for p90)``,
    never as a number. Reads anything with ``value``, ``low``, ``high`` and ``short``
    (:class:`specops.bench.intervals.Estimate`)."""
    if value is None:
        return "-"
    short = getattr(value, "short", None)
    if short:
        return f"({short})"
    number = getattr(value, "value", None)
    if number is None:
        return "-"
    low, high = getattr(value, "low", None), getattr(value, "high", None)
    if low is None or high is None:
        return fmt(number, digits)
    return f"{fmt(number, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]"


def _rates(values: Any, digits: int = 2) -> str:
    """Rates by position, ``0.05 / 0.04 / 0.03``; ``-`` for none."""
    return " / ".join(fmt(float(v), digits) for v in values) if values else "-"


def _count(value: Any) -> str:
    """An integer count with thousands separators, ``1,234,567``."""
    return f"{int(value):,}" if value is not None else "-"


def _cell(value: Any) -> str:
    """A value inside a Markdown table cell (no pipes, no newlines)."""
    return str(value).replace("|", "/").replace("\n", " ")


@cache
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - Markdown and text, never HTML
    )
    env.filters["fmt"] = fmt
    env.filters["duration"] = _duration
    env.filters["cell"] = _cell
    env.filters["est"] = estimate
    env.filters["count"] = _count
    env.filters["rates"] = _rates
    return env


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>`` with ``context``."""
    root = templates_dir()
    if not (root / name).is_file():
        raise FileNotFoundError(f"template {name} not found under {root} (SPECOPS_TEMPLATES)")
    return _environment(str(root)).get_template(name).render(**context)
