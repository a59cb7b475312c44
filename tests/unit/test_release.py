"""Releases (issue 50): one version, moved by one command (scripts/release/release.py bump);
``version_added`` of every module and plugin right against the changelog; changelog
fragments only for unreleased changes; a release's tags, the built collection on the
branch ``collection`` that a git install reads, with the tarball's content.

The checks run on this checkout (they must hold for every commit) and, planted, on a
copy of what they read, so that each can be seen to fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from plugins.scripts import REPO, load_script

rel = load_script("release/release.py")
INFRA = rel.INFRA


def test_this_checkout_is_releasable() -> None:
    """Every copy says one version, every module and plugin's version_added is a release
    that lists it (or the version being prepared), and fragments exist only while the
    version is not released."""
    assert rel.problems() == []
    version = rel.the_version()
    released = rel.changelog()
    assert version in released or all(rel._key(version) > rel._key(v) for v in released), (
        "an unreleased version must be above every release"
    )


def test_every_module_and_plugin_has_its_version_added() -> None:
    found = rel.plugin_versions()
    kinds = {k for k, _ in found}
    assert {"module", "filter", "cache", "vars"} <= kinds  # the scan is not blind
    assert ("module", "pve_container") in found
    assert ("filter", "speculative_launch") in found
    assert [item for item, v in found.items() if v is None] == []


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """What the checks read, copied: the version's copies, the changelog, the plugins."""
    root = tmp_path / "repo"
    for name in (
        *rel.COPIES,
        f"{INFRA}/changelogs/changelog.yaml",
        f"{INFRA}/changelogs/config.yaml",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    (root / INFRA / "changelogs/fragments").mkdir()
    for path in (REPO / INFRA / "changelogs/fragments").glob("*.yml"):
        shutil.copy2(path, root / INFRA / "changelogs/fragments" / path.name)
    shutil.copytree(REPO / INFRA / "plugins", root / INFRA / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    assert rel.problems(root) == []
    return root


def _set_version_added(repo: Path, module: str, value: str | None) -> None:
    path = repo / INFRA / "plugins/modules" / f"{module}.py"
    text = path.read_text()
    new = "" if value is None else f'version_added: "{value}"\n'
    path.write_text(re.sub(r'^version_added: "[^"]*"\n', new, text, count=1, flags=re.M))


def test_a_version_added_newer_than_the_collection_fails(repo: Path) -> None:
    version = rel.the_version(repo)
    major, minor, _ = rel._key(version)
    _set_version_added(repo, "gpu_facts", f"{major}.{minor + 1}.0")
    assert rel.problems(repo) == [
        f"module gpu_facts: version_added {major}.{minor + 1}.0 is newer than the"
        f" collection's {version}"
    ]


def test_a_version_added_missing_from_the_changelog_fails(repo: Path) -> None:
    """A module said to be in a release that does not list it (engine_flags was: 0.3.0
    on a 0.1.0 collection whose changelog named neither it nor service_unit)."""
    first = min(rel.changelog(repo), key=rel._key)
    data = yaml.safe_load((repo / INFRA / "changelogs/changelog.yaml").read_text())
    modules = data["releases"][first]["modules"]
    data["releases"][first]["modules"] = [m for m in modules if m["name"] != "gpu_facts"]
    (repo / INFRA / "changelogs/changelog.yaml").write_text(yaml.safe_dump(data))
    assert rel.problems(repo) == [
        f"module gpu_facts: version_added {first}, but changelog.yaml lists it under no release"
    ]


def test_a_missing_version_added_fails(repo: Path) -> None:
    _set_version_added(repo, "gpu_facts", None)
    version = rel.the_version(repo)
    assert rel.problems(repo) == [
        f"module gpu_facts: no version_added (the release it first ships in: {version})"
    ]


def test_fragments_of_a_released_version_fail(repo: Path) -> None:
    """The tarball said 0.1.0 and carried six fragments written after 0.1.0: a released
    version has none; the next change bumps first."""
    latest = max(rel.changelog(repo), key=rel._key)
    for name, pattern in rel.COPIES.items():
        path = repo / name
        text = path.read_text()
        match = pattern.search(text)
        assert match
        path.write_text(text[: match.start(1)] + latest + text[match.end(1) :])
    (repo / INFRA / "changelogs/fragments/x.yml").write_text("bugfixes:\n  - x.\n")
    found = rel.problems(repo)
    assert any(f"version {latest} is released, yet changelogs/fragments/" in p
               and "scripts/release/release.py bump minor" in p for p in found), found  # fmt: skip


def test_copies_that_disagree_fail(repo: Path) -> None:
    path = repo / "pyproject.toml"
    path.write_text(re.sub(r'^version = "[^"]+"$', 'version = "9.9.9"', path.read_text(),
                           count=1, flags=re.M))  # fmt: skip
    (problem,) = rel.problems(repo)
    assert problem.startswith("the copies disagree:")
    assert "scripts/release/release.py bump" in problem


def test_bump_writes_every_copy_and_refuses_going_back(repo: Path) -> None:
    version = rel.the_version(repo)
    major, minor, patch = rel._key(version)
    assert rel.next_version(version, "patch") == f"{major}.{minor}.{patch + 1}"
    assert rel.next_version(version, "minor") == f"{major}.{minor + 1}.0"
    assert rel.next_version(version, "major") == f"{major + 1}.0.0"
    new = rel.bump("major", repo)
    assert set(rel.versions(repo).values()) == {new}
    with pytest.raises(rel.ReleaseError, match=r"is not above"):
        rel.bump("0.0.1", repo)
    with pytest.raises(rel.ReleaseError, match=r"is not a version X.Y.Z"):
        rel.bump("next", repo)


def test_the_cli_prints_the_one_version() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts/release/release.py"), "version"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    cli = subprocess.run([sys.executable, "-m", "specops", "--version"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert cli.stdout == f"specops {done.stdout}"


@pytest.mark.slow
def test_a_git_install_of_the_release_yields_the_tarball(tmp_path: Path) -> None:
    """``scripts/release/release.py tag`` commits the built collection on the branch
    ``collection`` (tag collection-v<version>); ``ansible-galaxy collection install
    git+<repository>,collection-v<version>`` then installs exactly what the tarball does
    (FILES.json: every file and its sha256). Done in a clone of this checkout's HEAD."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-tags", str(REPO), str(clone)],
                   check=True)  # fmt: skip
    version = rel.the_version(clone)
    tag = rel.publish_collection(version, clone)
    assert tag == f"collection-v{version}"
    log = subprocess.run(["git", "-C", str(clone), "log", "--format=%P", "-1", "collection"],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert log == [head]  # the first publish: its parent is the source commit
    tarball = load_script("release/build-collection.py").build(clone, tmp_path / "dist")
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["HOME"] = str(tmp_path)
    installed = {}
    for name, source in (("git", f"git+file://{clone},{tag}"), ("tarball", str(tarball))):
        argv = [str(galaxy), "collection", "install", "--force", "--no-deps",
                "-p", str(tmp_path / name), source]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        coll = tmp_path / name / "ansible_collections/specops/infra"
        installed[name] = (json.loads((coll / "FILES.json").read_text()),
                           json.loads((coll / "MANIFEST.json").read_text()))  # fmt: skip
    git_files, git_manifest = installed["git"]
    tar_files, tar_manifest = installed["tarball"]
    names = {f["name"] for f in tar_files["files"]}
    assert {"playbooks/deploy.yml", "roles/pve_container/tasks/main.yml", "LICENSE"} <= names
    assert git_files == tar_files
    assert git_manifest["collection_info"] == tar_manifest["collection_info"]
