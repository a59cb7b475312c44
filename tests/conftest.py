"""Shared pytest set-up. Area fixtures live in each test folder's conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

# Shared fixtures that several areas use (each plugin documents its own). pytest puts
# tests/ on sys.path for this conftest (rootdir has no tests/__init__.py), so plugins
# are named from there: "plugins.X" is tests/plugins/X.py, with `pytest` or
# `python -m pytest`, from any working directory.
pytest_plugins = ["plugins.measurements", "plugins.synthetic_server", "plugins.vllm_server"]

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
