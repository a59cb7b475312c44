"""Helpers shared by every molecule scenario's testinfra verifier.

pytest loads this file for any test under molecule/, so verifiers use these fixtures
without path tricks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


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
