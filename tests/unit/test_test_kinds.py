"""tests/plugins/kinds.py: every test has one kind, and a unit test that starts a
process fails when unit tests run alone (``scripts/test.sh unit``, ``-m unit``)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
markers =
    unit: u
    integration: i
    e2e: e
    slow: s
    lxc: l
"""

TESTS = """
import subprocess
import sys

import pytest


def test_pure():
    assert sum([1, 2]) == 3


def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_one_and_swallows_the_refusal():
    try:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    except Exception:
        pass


@pytest.mark.slow
def test_marked_slow_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makepyfile(test_kinds_demo=TESTS)
    return pytester


def test_a_unit_run_fails_the_unit_test_that_starts_a_process(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "plugins.kinds", "-m", "unit", "--strict-markers")
    result.assert_outcomes(passed=1, failed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_starts_a_process*is a unit test*", "*INTEGRATION_PATHS*"])
    result.stdout.fnmatch_lines(["*swallows_the_refusal*which it caught*"])


@pytest.mark.integration  # its inner tests start processes, unguarded
def test_a_mixed_run_runs_every_test_as_before(project: pytest.Pytester) -> None:
    """No guard when the run mixes kinds (CI's): the check never changes the full run."""
    project.runpytest("-p", "plugins.kinds").assert_outcomes(passed=4)


@pytest.mark.integration
def test_a_marker_makes_it_integration(project: pytest.Pytester) -> None:
    result = project.runpytest("-p", "plugins.kinds", "-m", "integration", "--strict-markers")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*1 passed*"])
