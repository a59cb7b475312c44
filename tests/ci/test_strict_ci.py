"""Strict CI: a skip fails the run unless the allowlist names it with missing hardware;
deselected tests are named and, under CI, fail the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugins.strict import load_allowlist

PLUGIN_DIR = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

def test_runs():
    assert 1 + 1 == 2

def test_skips():
    pytest.skip("no tiny model (scripts/setup.sh vllm)")

@pytest.mark.fleet
def test_fleet():
    assert True
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(PLUGIN_DIR))
    pytester.makeini("[pytest]\nmarkers =\n    fleet: three nodes\n")
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_a_skip_fails_under_ci(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest_subprocess("-p", "plugins.strict")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*skipped under CI=true: no tiny model*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_skip_is_only_reported_outside_ci(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest_subprocess("-p", "plugins.strict")
    result.assert_outcomes(passed=2, skipped=1)
    assert result.ret == pytest.ExitCode.OK


def test_deselected_tests_are_named_and_fail_under_ci(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("SPECOPS_TEST_OUT", str(tmp_path))
    result = suite.runpytest_subprocess(
        "-p", "plugins.strict", "-m", "not fleet", "-k", "not skips"
    )
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*2 deselected (not run)*", "*test_suite.py::test_fleet*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert sorted((tmp_path / "deselected.txt").read_text().split()) == [
        "test_suite.py::test_fleet",
        "test_suite.py::test_skips",
    ]


def test_an_allowlisted_skip_stays_a_skip(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    allow = tmp_path / "allow.yml"
    allow.write_text(
        "entries:\n  - test: test_suite.py::test_skips\n"
        "    hardware: an NVIDIA GPU\n    reason: needs the kernel module\n"
    )
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("SPECOPS_SKIP_ALLOWLIST", str(allow))
    result = suite.runpytest_subprocess("-p", "plugins.strict")
    result.assert_outcomes(passed=2, skipped=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("entries:\n  - test: a::b\n    reason: slow\n", "'hardware'"),
        ("entries:\n  - hardware: GPU\n    reason: r\n", "needs 'test'"),
        ("entries: {}\n", "must be a list"),
    ],
)
def test_allowlist_entries_need_a_hardware_reason(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "allow.yml"
    path.write_text(text)
    with pytest.raises(pytest.UsageError, match=message):
        load_allowlist(path)


def test_the_repository_allowlist_is_valid() -> None:
    allow = load_allowlist()
    assert all(": " in why for why in [*allow.tests.values(), *allow.scenarios.values()])
