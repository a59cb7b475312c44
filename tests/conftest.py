"""Shared pytest set-up. Area fixtures live in each test folder's conftest.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from specops_lab.paths import template_tarball

# Hypothesis judges each example's run time by default (deadline 200 ms, the too_slow
# health check): on two shared cores that turns a busy moment into a failure. Property
# tests assert properties, never speed.
settings.register_profile("specops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("specops")

# Shared fixtures that several areas use (each plugin documents its own). pytest puts
# tests/ on sys.path for this conftest (rootdir has no tests/__init__.py), so plugins
# are named from there: "plugins.X" is tests/plugins/X.py, with `pytest` or
# `python -m pytest`, from any working directory.
pytest_plugins = [
    "pytester",
    "plugins.ee",
    "plugins.kinds",
    "plugins.measurements",
    "plugins.strict",
    "plugins.synthetic_server",
    "plugins.vllm_server",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def rootfs_tarball() -> Path:
    """The Debian bookworm rootfs of `scripts/setup.sh image` (the lab's CT template).

    A missing tarball fails the test: the README's test command sets it up first, so its
    absence is a broken set-up, not a reason to skip.
    """
    tarball = template_tarball()
    if not tarball.is_file():
        pytest.fail(f"{tarball} is missing: run scripts/setup.sh image (or move SPECOPS_CACHE)")
    if shutil.which("lxc-start") is None:
        pytest.fail("lxc-start is missing: run scripts/setup.sh packages")
    return tarball
