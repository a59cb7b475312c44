"""Fixtures shared by the unit tests of the shipped artefacts."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugins.scripts import REPO, load_script


@pytest.fixture(scope="session")
def collection_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specops.infra's tarball built once from this checkout by scripts/release/build-collection.py
    (the packaging tests and the installed-collection test read the same build)."""
    path: Path = load_script("release/build-collection.py").build(
        REPO, tmp_path_factory.mktemp("dist")
    )
    return path
