"""One version for all: the collection's (galaxy.yml), the wheel's (pyproject.toml),
``specops.__version__`` and what ``specops --version`` prints (scripts/release/release.py bump
writes them together); it is the latest release of the collection's changelog
(changelogs/changelog.yaml), or the next one while its changes are fragments. The
version_added and fragment rules: tests/unit/test_release.py. (The built wheel's
METADATA and the tarball's name are checked where they are built:
tests/unit/test_product_package.py, tests/unit/test_collection_build.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml
from plugins.scripts import REPO

import specops

INFRA = REPO / "collections/ansible_collections/specops/infra"
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?$")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("-", maxsplit=1)[0].split("."))


def versions() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    cli = subprocess.run(
        [sys.executable, "-m", "specops", "--version"],
        check=True, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    return {
        "galaxy.yml": yaml.safe_load((INFRA / "galaxy.yml").read_text())["version"],
        "pyproject.toml": pyproject["project"]["version"],
        "specops.__version__": specops.__version__,
        "specops --version": cli.stdout.strip().removeprefix("specops "),
    }


def test_the_collection_the_wheel_and_the_cli_have_one_version() -> None:
    found = versions()
    assert SEMVER.match(found["galaxy.yml"]), found["galaxy.yml"]
    assert set(found.values()) == {found["galaxy.yml"]}, found


def test_the_version_is_the_latest_release_or_the_next() -> None:
    version = versions()["galaxy.yml"]
    releases = yaml.safe_load((INFRA / "changelogs/changelog.yaml").read_text())["releases"]
    latest = max(releases, key=_key)
    fragments = sorted((INFRA / "changelogs/fragments").glob("*.yml"))
    if version == latest:
        assert fragments == [], "a released version carries no unreleased fragment"
    else:
        assert _key(version) > _key(latest), (version, latest)
