"""Measurements the real-server tests take (P3, P4, P5): printed, kept, never asserted.

``measurement(name, lines, data)`` writes ``results/<name>.json`` and queues ``lines``
for pytest's terminal summary (a test's own output is captured; the summary is not),
under "measurements". Targets are judged by reading them, as the bench scripts print
theirs; a test asserts mechanics, not speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_LINES: list[str] = []

Record = Callable[[str, list[str], Mapping[str, Any]], None]


@pytest.fixture
def measurement() -> Record:
    def record(name: str, lines: list[str], data: Mapping[str, Any]) -> None:
        out = REPO / "results" / f"{name}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(dict(data), indent=2) + "\n", encoding="utf-8")
        _LINES.extend([*lines, f"  (kept in {out.relative_to(REPO)})"])

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LINES:
        terminalreporter.write_sep("-", "measurements")
        for line in _LINES:
            terminalreporter.write_line(line)
