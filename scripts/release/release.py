#!/usr/bin/env python3
"""specops's releases: one version for the wheel, the collection, ``specops --version``
and the changelog, moved by one command; the release notes generated; a tag per release.

    scripts/release/release.py version               the one version (fails when a copy differs)
    scripts/release/release.py check                 what tests/unit/test_release.py checks: the
                                             copies agree, version_added of every module
                                             and plugin is right, fragments only for
                                             unreleased changes
    scripts/release/release.py bump major|minor|patch|X.Y.Z
                                             write the next version into every copy
                                             (galaxy.yml, pyproject.toml, specops.__version__)
    scripts/release/release.py release [--date D]    release the version the copies hold: the
                                             fragments move into changelogs/changelog.yaml
                                             (antsibull-changelog), CHANGELOG.md is
                                             generated; then commit
    scripts/release/release.py notes [VERSION] [--output FILE]
                                             one release's notes (Markdown, generated from
                                             changelog.yaml)
    scripts/release/release.py dist [--output-path DIR]
                                             the release's artefacts: the collection
                                             tarball, the wheel, constraints.txt (the
                                             controller's lock for pip -c), the notes,
                                             SHA256SUMS
    scripts/release/release.py tag                   on a clean, released commit: the annotated tag
                                             v<version> (its message the notes) and the
                                             built collection committed on the branch
                                             ``collection`` with the tag
                                             collection-v<version> (what a git install
                                             names: docs/install.md); prints the push

The version between two releases is the next one's (a build of main says what it will
be released as; its unreleased changes are the fragments), and a released version has
no fragments left: bump after a release, before the next change's fragment.

Which copy holds the version: :data:`COPIES` (one line each). ``version_added`` of a
module or plugin is the release it first shipped in: a released version must list it
among its new modules or plugins (changelog.yaml), the version being prepared lists it
when ``release`` runs (antsibull-changelog reads version_added), a later one is refused.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import yaml

__all__ = [
    "COPIES",
    "REPO",
    "ReleaseError",
    "bump",
    "next_version",
    "plugin_versions",
    "problems",
    "versions",
]

REPO = Path(__file__).resolve().parents[2]
INFRA = Path("collections/ansible_collections/specops/infra")
# Each copy of the version: file -> the line that holds it (group 1 is the version).
COPIES: dict[str, re.Pattern[str]] = {
    f"{INFRA}/galaxy.yml": re.compile(r"^version: *['\"]?([^'\"\s#]+)['\"]? *$", re.M),
    "pyproject.toml": re.compile(r'^version = "([^"]+)"$', re.M),
    "src/specops/__init__.py": re.compile(r'^__version__ = "([^"]+)"$', re.M),
    # the execution environments install the wheel by its file name
    "execution-environment.yml": re.compile(
        r"^ +- specops @ file:///output/specops/specops-([^-\s]+)-py3-none-any\.whl$", re.M
    ),
    "ee/upstream/execution-environment.yml": re.compile(
        r"^ +- specops @ file:///output/specops/specops-([^-\s]+)-py3-none-any\.whl$", re.M
    ),
    # a site repository's files (docs/install.md) name the release's artefacts
    "docs/site/requirements.yml": re.compile(
        r"^  - name: \./dist/specops-infra-(\S+)\.tar\.gz$", re.M
    ),
    "docs/site/requirements.txt": re.compile(r"^\./dist/specops-(\S+)-py3-none-any\.whl$", re.M),
}
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
# Plugin types whose version_added the changelog records (module: releases.X.modules;
# the others: releases.X.plugins.<type>); their directories under plugins/.
PLUGIN_DIRS = {"module": "modules", "filter": "filter", "cache": "cache", "vars": "vars",
               "lookup": "lookup", "callback": "callback", "inventory": "inventory",
               "connection": "connection", "test": "test"}  # fmt: skip
COLLECTION_BRANCH = "collection"


class ReleaseError(RuntimeError):
    """A release step refused (the message says why and what to run)."""


def _key(version: str) -> tuple[int, int, int]:
    match = SEMVER.match(version)
    if match is None:
        raise ReleaseError(f"{version!r} is not a version X.Y.Z")
    return int(match[1]), int(match[2]), int(match[3])


def versions(repo: Path = REPO) -> dict[str, str]:
    """Each copy's version (file -> version)."""
    out = {}
    for rel, pattern in COPIES.items():
        found = pattern.findall((repo / rel).read_text(encoding="utf-8"))
        if len(found) != 1:
            raise ReleaseError(f"{rel}: expected one version line, found {len(found)}")
        out[rel] = found[0]
    return out


def the_version(repo: Path = REPO) -> str:
    found = versions(repo)
    if len(set(found.values())) != 1:
        raise ReleaseError(f"the copies disagree: {found}; scripts/release/release.py bump X.Y.Z")
    return next(iter(found.values()))


def changelog(repo: Path = REPO) -> dict[str, dict[str, object]]:
    data = yaml.safe_load((repo / INFRA / "changelogs/changelog.yaml").read_text())
    return dict(data.get("releases") or {})


def fragments(repo: Path = REPO) -> list[str]:
    folder = repo / INFRA / "changelogs/fragments"
    return sorted(p.name for p in folder.glob("*.y*ml")) if folder.is_dir() else []


def next_version(current: str, part: str) -> str:
    """``part`` (major, minor, patch) of ``current`` raised, or ``part`` itself."""
    major, minor, patch = _key(current)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    if part == "patch":
        return f"{major}.{minor}.{patch + 1}"
    _key(part)
    return part


def bump(part: str, repo: Path = REPO) -> str:
    """Write the next version into every copy; refuses one not above the latest release
    (or the current version, when that is not released yet)."""
    current = the_version(repo)
    new = next_version(current, part)
    released = changelog(repo)
    floor = max([current, *released], key=_key) if current in released else current
    if _key(new) <= _key(floor) and not (current not in released and new == current):
        raise ReleaseError(f"{new} is not above {floor} (released: {', '.join(released)})")
    for rel, pattern in COPIES.items():
        path = repo / rel
        text = path.read_text(encoding="utf-8")
        match = pattern.search(text)
        assert match is not None  # versions() found it
        path.write_text(text[: match.start(1)] + new + text[match.end(1) :], encoding="utf-8")
    return new


# ------------------------------------------------------------------ version_added


def _documentation(path: Path) -> dict[str, object]:
    """A plugin's documentation: a Python plugin's DOCUMENTATION string, or the
    ``DOCUMENTATION`` of a filter's or test's YAML file."""
    if path.suffix == ".py":
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION"
                            for t in node.targets)):  # fmt: skip
                return dict(yaml.safe_load(str(node.value.value)) or {})
        return {}
    return dict((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("DOCUMENTATION") or {})


def plugin_versions(repo: Path = REPO) -> dict[tuple[str, str], str | None]:
    """(type, name) -> version_added, for every documented module and plugin."""
    out: dict[tuple[str, str], str | None] = {}
    for kind, folder in PLUGIN_DIRS.items():
        root = repo / INFRA / "plugins" / folder
        if not root.is_dir():
            continue
        docs = (
            sorted(root.glob("*.yml"))
            if kind in {"filter", "test"}
            else sorted(p for p in root.glob("*.py") if p.name != "__init__.py")
        )
        for path in docs:
            doc = _documentation(path)
            if doc:
                added = doc.get("version_added")
                out[(kind, str(doc.get("name") or path.stem))] = (
                    None if added is None else str(added)
                )
    return out


def _listed(release: dict[str, object]) -> set[tuple[str, str]]:
    out = {("module", str(m["name"])) for m in release.get("modules") or []}  # type: ignore[attr-defined]
    plugins = release.get("plugins") or {}
    for kind, entries in plugins.items():  # type: ignore[attr-defined]
        out |= {(str(kind), str(e["name"])) for e in entries or []}
    return out


def problems(repo: Path = REPO) -> list[str]:
    """Everything a release would get wrong, one line each (empty when right)."""
    out: list[str] = []
    try:
        version = the_version(repo)
    except ReleaseError as exc:
        return [str(exc)]
    released = changelog(repo)
    pending = fragments(repo)
    if version in released and pending:
        out.append(
            f"version {version} is released, yet changelogs/fragments/ holds unreleased"
            f" changes ({', '.join(pending)}): scripts/release/release.py bump minor (or patch)"
        )
    shipped = {f for r in released.values() for f in r.get("fragments") or []}  # type: ignore[attr-defined]
    out += [f"fragment {f} is already in a release: remove it" for f in pending if f in shipped]
    listed = {item: v for v, r in released.items() for item in _listed(r)}
    for (kind, name), added in sorted(plugin_versions(repo).items()):
        what = f"{kind} {name}"
        if added is None:
            out.append(f"{what}: no version_added (the release it first ships in: {version})")
            continue
        if not SEMVER.match(added):
            out.append(f"{what}: version_added {added!r} is not X.Y.Z")
            continue
        if _key(added) > _key(version):
            out.append(f"{what}: version_added {added} is newer than the collection's {version}")
        elif added in released and listed.get((kind, name)) != added:
            out.append(
                f"{what}: version_added {added}, but changelog.yaml lists it under "
                f"{listed.get((kind, name)) or 'no release'}"
            )
        elif added not in released and added != version:
            out.append(f"{what}: version_added {added} is no release (released: "
                       f"{', '.join(released)}; preparing {version})")  # fmt: skip
    known = plugin_versions(repo)
    out += [f"changelog.yaml lists {k} {n} under {v}, which the collection does not have"
            for (k, n), v in sorted(listed.items()) if (k, n) not in known]  # fmt: skip
    return out


# ------------------------------------------------------------------ steps


def _run(argv: list[str], **kwargs: object) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise ReleaseError(f"{' '.join(argv[:3])} ... failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")  # fmt: skip
    return str(proc.stdout)


def _load_script(name: str) -> ModuleType:
    path = REPO / "scripts" / name
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    if spec is None or spec.loader is None:
        raise ReleaseError(f"{path}: not a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def release(date: str | None = None, repo: Path = REPO) -> str:
    """antsibull-changelog release of the version the copies hold."""
    version = the_version(repo)
    if version in changelog(repo):
        raise ReleaseError(f"{version} is released already: scripts/release/release.py bump first")
    found = problems(repo)
    if found:
        raise ReleaseError("not releasable:\n  " + "\n  ".join(found))
    if not fragments(repo):
        raise ReleaseError(f"no changelog fragment: {version} would release nothing")
    _run(
        [str(repo / "scripts/release/changelog.sh"), "release", *(["--date", date] if date else [])]
    )
    return version


def notes(version: str | None = None, repo: Path = REPO) -> str:
    """One release's notes, generated from changelog.yaml (Markdown)."""
    version = version or the_version(repo)
    if version not in changelog(repo):
        raise ReleaseError(f"{version} is not released (scripts/release/release.py release)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "notes.md"
        _run([str(repo / "scripts/release/changelog.sh"), "generate", version, "--only-latest",
              "--output", str(out), "--output-format", "md"])  # fmt: skip
        return out.read_text(encoding="utf-8")


def dist(out: Path, repo: Path = REPO) -> list[Path]:
    """The release's artefacts in ``out``: tarball, wheel, notes (when released), sums."""
    version = the_version(repo)
    out.mkdir(parents=True, exist_ok=True)
    made = [Path(_load_script("release/build-collection.py").build(repo, out)),
            Path(_load_script("release/build-wheel.py").build(repo, out))]  # fmt: skip
    # the controller's lock as pip constraints: a site's venv gets the versions CI tested
    constraints = out / "constraints.txt"
    constraints.write_text(_load_script("release/lock.py").constraints(repo / "requirements.lock"))
    made.append(constraints)
    if version in changelog(repo):
        path = out / f"release-notes-{version}.md"
        path.write_text(notes(version, repo), encoding="utf-8")
        made.append(path)
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in made)
    (out / "SHA256SUMS").write_text(sums, encoding="utf-8")
    return [*made, out / "SHA256SUMS"]


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return _run(["git", "-C", str(repo), *args], env=env).strip()


def publish_collection(version: str, repo: Path = REPO) -> str:
    """The built collection (scripts/release/build-collection.py's stage: what the tarball holds)
    as one commit on the branch ``collection`` (whose tip is the latest release), tagged
    ``collection-v<version>``: a git install of it yields the tarball's content. The
    source commit is its second parent (``git log collection`` reaches the sources)."""
    head = _git(repo, "rev-parse", "HEAD")
    git_dir = _git(repo, "rev-parse", "--absolute-git-dir")
    with tempfile.TemporaryDirectory(prefix="specops-publish-") as tmp:
        coll = _load_script("release/build-collection.py").stage(repo, Path(tmp) / "stage")
        # the stage as a tree of this repository, through an index of its own
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        staged = ["git", f"--git-dir={git_dir}", f"--work-tree={coll}"]
        _run([*staged, "add", "--all", "--force", "."], cwd=coll, env=env)
        tree = _run([*staged, "write-tree"], cwd=coll, env=env).strip()
    parents = [head]
    tip = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q",
                          f"refs/heads/{COLLECTION_BRANCH}"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if tip:
        parents.insert(0, tip)
    args = [a for p in parents for a in ("-p", p)]
    message = f"specops.infra {version}, built from {head[:12]} by scripts/release/release.py"
    commit = _git(repo, "commit-tree", tree, *args, "-m", message)
    _git(repo, "update-ref", f"refs/heads/{COLLECTION_BRANCH}", commit, *([tip] if tip else []))
    tag = f"collection-v{version}"
    _git(repo, "tag", "-a", tag, "-m", f"specops.infra {version} (the built collection)", commit)
    return tag


def tag(repo: Path = REPO) -> list[str]:
    """The release's tags (see the module's doc); refuses anything but a clean commit
    whose version is released."""
    version = the_version(repo)
    if version not in changelog(repo):
        raise ReleaseError(f"{version} is not released: scripts/release/release.py release, commit")
    found = problems(repo)
    if found:
        raise ReleaseError("not releasable:\n  " + "\n  ".join(found))
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        raise ReleaseError(f"the working tree has uncommitted changes:\n{dirty}")
    name = f"v{version}"
    for ref in (name, f"collection-v{version}"):
        if _git(repo, "tag", "-l", ref):
            raise ReleaseError(f"tag {ref} exists already")
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as fh:
        fh.write(f"specops {version}\n\n{notes(version, repo)}")
    try:
        _git(repo, "tag", "-a", name, "-F", fh.name)
    finally:
        os.unlink(fh.name)
    return [name, publish_collection(version, repo)]


# ------------------------------------------------------------------ command line


def _commands(argv: list[str] | None) -> Iterator[str]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    sub.add_parser("check")
    b = sub.add_parser("bump")
    b.add_argument("part", help="major, minor, patch or X.Y.Z")
    r = sub.add_parser("release")
    r.add_argument("--date", help="the release date (YYYY-MM-DD; default today)")
    n = sub.add_parser("notes")
    n.add_argument("version", nargs="?")
    n.add_argument("--output", type=Path)
    d = sub.add_parser("dist")
    d.add_argument("--output-path", type=Path, default=REPO / "dist")
    sub.add_parser("tag")
    args = parser.parse_args(argv)
    if args.command == "version":
        yield the_version()
    elif args.command == "check":
        found = problems()
        if found:
            raise ReleaseError("\n".join(found))
        yield f"{the_version()}: the copies agree, version_added and fragments are right"
    elif args.command == "bump":
        new = bump(args.part)
        yield f"{new}: written into {', '.join(COPIES)}"
    elif args.command == "release":
        version = release(args.date)
        yield (f"{version} released in changelogs/changelog.yaml and CHANGELOG.md: commit,"
               " then scripts/release/release.py tag")  # fmt: skip
    elif args.command == "notes":
        text = notes(args.version)
        if args.output:
            args.output.write_text(text, encoding="utf-8")
            yield str(args.output)
        else:
            yield text.rstrip("\n")
    elif args.command == "dist":
        yield from (str(p) for p in dist(args.output_path))
    else:
        tags = tag()
        yield (f"tagged {', '.join(tags)} (and branch {COLLECTION_BRANCH}); publish: git push"
               f" origin {COLLECTION_BRANCH} {' '.join(tags)}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    try:
        for line in _commands(argv):
            print(line)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
