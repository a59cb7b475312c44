"""One version for all: the collection's (galaxy.yml), the wheel's (pyproject.toml),
``specops.__version__`` and what ``specops --version`` prints, and the latest release of
the collection's changelog (changelogs/changelog.yaml). A release bumps them together;
this test fails when one drifts. (The built wheel's METADATA and the tarball's name are
checked where they are built: tests/unit/test_product_package.py,
tests/unit/test_collection_build.py.)"""

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


def versions() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    cli = subprocess.run(
        [sys.executable, "-m", "specops", "--version"],
        check=True, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    releases = yaml.safe_load((INFRA / "changelogs/changelog.yaml").read_text())["releases"]
    return {
        "galaxy.yml": yaml.safe_load((INFRA / "galaxy.yml").read_text())["version"],
        "pyproject.toml": pyproject["project"]["version"],
        "specops.__version__": specops.__version__,
        "specops --version": cli.stdout.strip().removeprefix("specops "),
        "changelogs/changelog.yaml (latest)": max(
            releases, key=lambda v: tuple(int(x) for x in v.split("-")[0].split("."))
        ),
    }


def test_the_collection_the_wheel_and_the_cli_have_one_version() -> None:
    found = versions()
    assert SEMVER.match(found["galaxy.yml"]), found["galaxy.yml"]
    assert set(found.values()) == {found["galaxy.yml"]}, found
