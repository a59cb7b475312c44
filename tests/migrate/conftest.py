"""Fixtures of the migration tests (the lab itself is in migrate_lab.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from migrate_lab import MigrateLab, make_migrate_lab


@pytest.fixture(scope="module")
def migrate_lab(
    tmp_path_factory: pytest.TempPathFactory, rootfs_tarball: Path
) -> Iterator[MigrateLab]:
    yield from make_migrate_lab(tmp_path_factory, rootfs_tarball)
