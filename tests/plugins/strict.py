"""pytest plugin: under ``CI=true`` a skip is a failure unless the allowlist names it.

The allowlist is ``.ci/skip-allowlist.yml``: entries with ``test`` (an exact node id),
``hardware`` (what this machine lacks) and ``reason``. An entry without a hardware
reason is refused when the session starts. Deselected tests (``-m``, ``-k``,
``--deselect``) are counted, named in the summary and, under CI, fail the session: a
test that did not run proves nothing.

Outside CI (a developer's quick run) skips and deselections are only reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = ["Allowlist", "load_allowlist"]

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = REPO / ".ci" / "skip-allowlist.yml"


@dataclass(frozen=True)
class Allowlist:
    tests: dict[str, str]  # node id -> "hardware: reason"
    scenarios: dict[str, str]


def load_allowlist(path: Path = ALLOWLIST) -> Allowlist:
    """Read and check the allowlist; every entry must name missing hardware."""
    data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    entries = (data or {}).get("entries")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise pytest.UsageError(f"{path}: 'entries' must be a list, got {type(entries).__name__}")
    tests: dict[str, str] = {}
    scenarios: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: entries[{i}]"
        if not isinstance(entry, dict):
            raise pytest.UsageError(
                f"{where}: must be a mapping with test|scenario, hardware, reason"
            )
        hardware = str(entry.get("hardware") or "").strip()
        reason = str(entry.get("reason") or "").strip()
        if not hardware or not reason:
            raise pytest.UsageError(
                f"{where}: 'hardware' (what this machine lacks) and 'reason' are required"
            )
        if "test" in entry:
            tests[str(entry["test"])] = f"{hardware}: {reason}"
        elif "scenario" in entry:
            scenarios[str(entry["scenario"])] = f"{hardware}: {reason}"
        else:
            raise pytest.UsageError(f"{where}: needs 'test' (node id) or 'scenario' (molecule)")
    return Allowlist(tests, scenarios)


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


_ALLOW = pytest.StashKey[Allowlist]()
_DESELECTED = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    override = os.environ.get("SPECOPS_SKIP_ALLOWLIST")
    config.stash[_ALLOW] = load_allowlist(Path(override) if override else ALLOWLIST)
    config.stash[_DESELECTED] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if not (_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return report
    allowed = item.config.stash[_ALLOW].tests
    if item.nodeid in allowed:
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true: {reason}\n"
        f"A skipped test is a failed proof. Make it run here (the set-up installs what "
        f"tests need), or list {item.nodeid!r} in .ci/skip-allowlist.yml with the "
        f"hardware this machine lacks."
    )
    return report


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[_DESELECTED].extend(item.nodeid for item in items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    deselected = session.config.stash[_DESELECTED]
    out = os.environ.get("SPECOPS_TEST_OUT")
    if out:  # scripts/test.sh counts these in its closing line
        Path(out, "deselected.txt").write_text("".join(f"{n}\n" for n in deselected))
    if deselected and _ci() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    deselected = terminalreporter.config.stash[_DESELECTED]
    if not deselected:
        return
    terminalreporter.write_sep("-", f"{len(deselected)} deselected (not run)")
    for nodeid in deselected[:50]:
        terminalreporter.write_line(f"  {nodeid}")
    if len(deselected) > 50:
        terminalreporter.write_line(f"  ... and {len(deselected) - 50} more")
    if _ci():
        terminalreporter.write_line(
            "CI=true: deselected tests fail the run (nothing may be left out)"
        )
