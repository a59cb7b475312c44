"""Fixtures for the speculative profile tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.speculative import Engine


@pytest.fixture(scope="session")
def drafter_fixtures(fixtures_dir: Path) -> Path:
    return fixtures_dir / "drafter"


@pytest.fixture(scope="session")
def sglang() -> Engine:
    return Engine("sglang", "0.5.11")


@pytest.fixture(scope="session")
def vllm() -> Engine:
    return Engine("vllm", "0.32.0")
