"""Helpers shared by every molecule scenario's testinfra verifier.

pytest loads this file for any test under molecule/, so verifiers use these fixtures
without path tricks. The verifiers run under the same strict rule as the pytest suite
(tests/plugins/strict.py): under CI=true a skipped verifier test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The strict-CI hooks of the pytest suite: this is not the root conftest, so they are
# imported into it (hook functions of a conftest module are registered by name).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from plugins.strict import (
    pytest_configure,
    pytest_deselected,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

__all__ = [
    "pytest_configure",
    "pytest_deselected",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
]


@pytest.fixture
def converge(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``converge(check=False, **extra_vars)``: run the calling scenario's converge.yml
    again against molecule's inventory (``-v``, JSON results, no colour, so messages are
    searchable as written); returns the finished process, whatever its exit code."""
    playbook = Path(request.path).resolve().parent.parent / "converge.yml"

    def play(*, check: bool = False, **extra: Any) -> subprocess.CompletedProcess[str]:
        argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(playbook)]
        argv += ["-e", json.dumps(extra), "-v", *(["--check"] if check else [])]
        env = {
            **os.environ,
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        }
        return subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=600, env=env
        )

    return play


@pytest.fixture
def assert_service_running(host: Any) -> Callable[[str], None]:
    """Assert a systemd unit is active; on failure show its journal."""

    def check(unit: str) -> None:
        svc = host.service(unit)
        if not svc.is_running:
            journal = host.run(f"journalctl -u {unit} --no-pager -n 50").stdout
            pytest.fail(f"{unit} is not running; last journal lines:\n{journal}")

    return check


@pytest.fixture
def assert_dir(host: Any) -> Callable[[str, str, str, int], None]:
    """Assert a directory exists with the given owner, group and mode."""

    def check(path: str, owner: str, group: str, mode: int) -> None:
        d = host.file(path)
        assert d.is_directory, f"{path} is not a directory"
        assert (d.user, d.group, d.mode) == (owner, group, mode), (
            f"{path}: got {d.user}:{d.group} {oct(d.mode)}, want {owner}:{group} {oct(mode)}"
        )

    return check
