"""specops finds the collection specops.infra where Ansible finds it (issue 50), with
nothing of the checkout in the way: a Python whose path holds the venv's packages but no
``ansible_collections`` (``python -S``, the packages linked one by one), this checkout's
``src/``, a fresh ``HOME`` and a directory without ``ansible.cfg``.

- ``specops --version`` needs nothing but the package;
- absent, any command is one line naming the install command and where Ansible looked,
  exit 2, no traceback;
- installed in Ansible's default path (``~/.ansible/collections``), or where
  ``ANSIBLE_COLLECTIONS_PATH`` or the ``ansible.cfg`` of the working directory says, a
  command imports it through Ansible's own collection loader;
- a collection of another version is refused, naming both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO

import specops

pytestmark = pytest.mark.slow

SITE = Path(sysconfig.get_paths()["purelib"])
INFRA = REPO / "collections/ansible_collections/specops/infra"
VERSION = specops.__version__
# A command that imports the collection's module_utils (the speculative translator); the
# profile file is written in the working directory.
RENDER = ("profile", "render", "--engine", "vllm", "--version", "0.20.1", "--profile", "p.json")


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's packages (links, one per entry) with its ``ansible_collections`` but
    no specops.infra there: the ``ansible`` bundle's collections in site-packages, as an
    operator's venv has them (a namespace package Python imports before Ansible's
    collection loader would)."""
    root = tmp_path_factory.mktemp("packages")
    for entry in SITE.iterdir():
        if entry.name != "ansible_collections" and not entry.name.endswith(".pth"):
            (root / entry.name).symlink_to(entry)
    for namespace in (SITE / "ansible_collections").iterdir():
        if namespace.name != "specops" and namespace.is_dir():
            (root / "ansible_collections" / namespace.name).parent.mkdir(exist_ok=True)
            (root / "ansible_collections" / namespace.name).symlink_to(namespace)
    assert (root / "ansible_collections/community/general").is_dir()
    return root


def _copy(dest: Path, version: str | None = None) -> Path:
    """The checkout's collection (its plugins and galaxy.yml) as a collection directory
    under ``dest`` (a collections path); with ``version``, galaxy.yml says that one."""
    coll = dest / "ansible_collections/specops/infra"
    coll.mkdir(parents=True)
    shutil.copytree(INFRA / "plugins", coll / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(INFRA / "meta", coll / "meta")
    galaxy = yaml.safe_load((INFRA / "galaxy.yml").read_text())
    galaxy["version"] = version or galaxy["version"]
    (coll / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
    return coll


def specops_cmd(
    packages: Path, cwd: Path, *argv: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -S -m specops ARGV`` with the packages above and src/ on the path only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    clean |= {"HOME": str(cwd / "home"), "PYTHONPATH": f"{REPO / 'src'}:{packages}", **env}
    (cwd / "home").mkdir(exist_ok=True)
    (cwd / "p.json").write_text('{"method": "ngram", "num_draft_tokens": 3}')
    return subprocess.run([sys.executable, "-S", "-m", "specops", *argv], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_the_version_needs_nothing_but_the_package(packages: Path, tmp_path: Path) -> None:
    done = specops_cmd(packages, tmp_path, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"specops {VERSION}\n", "")


def test_an_absent_collection_is_one_line_naming_the_install_command(
    packages: Path, tmp_path: Path
) -> None:
    done = specops_cmd(packages, tmp_path, *RENDER)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("specops: error: the collection specops.infra is not installed")
    assert f"ansible-galaxy collection install specops-infra-{VERSION}.tar.gz" in line
    assert f"{tmp_path}/home/.ansible/collections" in line  # where Ansible looked
    assert "docs/install.md" in line


@pytest.mark.parametrize("where", ["default", "environment", "ansible.cfg"])
def test_the_collection_is_found_where_ansible_finds_it(
    packages: Path, tmp_path: Path, where: str
) -> None:
    env: dict[str, str] = {}
    if where == "default":
        _copy(tmp_path / "home/.ansible/collections")
    elif where == "environment":
        _copy(tmp_path / "elsewhere")
        env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path / "elsewhere")
    else:
        _copy(tmp_path / "site/collections")
        (tmp_path / "site/ansible.cfg").write_text("[defaults]\ncollections_path = collections\n")
    cwd = tmp_path / "site" if where == "ansible.cfg" else tmp_path
    cwd.mkdir(exist_ok=True)
    done = specops_cmd(packages, cwd, *RENDER, **env)
    assert done.returncode == 0, done.stderr
    assert "--speculative-config" in done.stdout


def test_a_collection_of_another_version_is_refused(packages: Path, tmp_path: Path) -> None:
    coll = _copy(tmp_path / "home/.ansible/collections", version="9.9.9")
    done = specops_cmd(packages, tmp_path, *RENDER)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert f"specops {VERSION} runs with the collection specops.infra {VERSION}" in line
    assert f"at {coll}, is 9.9.9" in line
