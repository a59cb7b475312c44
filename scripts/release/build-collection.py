#!/usr/bin/env python3
"""Build the collection specops.infra as Galaxy gets it, from the repository's layout.

    scripts/release/build-collection.py [--output-path DIR] [--stage-only]

One source: the checkout keeps its top-level layout (``roles/``, ``playbooks/``,
``deploy.yml``, the plugins in ``collections/ansible_collections/specops/infra``), and
this step stages the collection from it in a temporary directory:

- the infra collection's own files (``plugins/``, ``meta/``, ``galaxy.yml``,
  ``README.md``, ``CHANGELOG.md``, ``changelogs/``), without its ``tests/``, and the
  repository's ``LICENSE`` (Apache-2.0, as galaxy.yml says);
- ``roles/`` (every product role);
- ``playbooks/`` (with the ``tasks/`` and ``vars/`` they import) and the root
  ``deploy.yml`` as ``playbooks/deploy.yml``, its ``import_playbook: playbooks/<x>.yml``
  rewritten to ``<x>.yml`` (the one path that differs once the file moves), so that
  ``ansible-playbook specops.infra.deploy`` runs. A playbook whose name has a hyphen (no
  FQCN can name it) has an alias with underscores beside it in ``playbooks/``, which
  imports it (``specops.infra.speculative_apply``); the build refuses one without.

In a checkout, ``scripts/setup.sh venv`` makes the same shape out of links under
``.cache/collections`` (first in the checkout's ``collections_path``), so that the
checkout runs the playbooks by the names an installed collection has
(``specops.infra.verify``); the collection's directory itself never holds them.

Role references stay short names: ansible-core (2.19) looks a role named in a playbook of
a collection up in that collection first, so ``role: benchmark`` in
``specops.infra.serve`` is ``specops.infra.benchmark``, as it is ``roles/benchmark``
through ``roles_path`` in a checkout (tests/unit/test_collection_build.py runs the
installed collection's playbooks).

Then ``ansible-galaxy collection build`` of the staged directory; ``galaxy.yml``'s
``build_ignore`` is the second guard against tests, lab, results and caches. Prints the
tarball's path. tests/unit/test_product_package.py builds through :func:`build`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["INFRA", "REPO", "BuildError", "build", "stage"]

REPO = Path(__file__).resolve().parents[2]
INFRA = Path("collections/ansible_collections/specops/infra")
# What never goes into the stage (caches, build outputs, test output).
SKIP = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", "build", "output", ".plugin-cache.yaml", ".*cache"
)
# The collection's own entries; anything else at its root (tests/, ...) stays out.
INFRA_ENTRIES = ("plugins", "meta", "galaxy.yml", "README.md", "CHANGELOG.md", "changelogs")
IMPORT_LINE = re.compile(r"^(\s*(?:-\s+)?ansible\.builtin\.import_playbook:\s*)(\S+)\s*$")


class BuildError(RuntimeError):
    """The repository's layout does not give a collection (the message says why)."""


def _rewrite_deploy(text: str, playbooks: Path) -> str:
    """deploy.yml as playbooks/deploy.yml: ``playbooks/<x>.yml`` becomes ``<x>.yml``."""
    out: list[str] = []
    imports = 0
    for line in text.splitlines(keepends=True):
        match = IMPORT_LINE.match(line)
        if match is not None:
            target = match.group(2)
            if not target.startswith("playbooks/"):
                raise BuildError(
                    f"deploy.yml imports {target!r}: expected playbooks/<name>.yml (the "
                    "collection carries playbooks/ only)"
                )
            moved = target.removeprefix("playbooks/")
            if not (playbooks / moved).is_file():
                raise BuildError(f"deploy.yml imports {target!r}, which does not exist")
            out.append(f"{match.group(1)}{moved}\n")
            imports += 1
        else:
            out.append(line)
    if imports == 0:
        raise BuildError("deploy.yml imports no playbook (ansible.builtin.import_playbook)")
    return "".join(out)


def stage(repo: Path, dest: Path) -> Path:
    """Stage the collection under ``dest``; returns its directory
    (``dest/ansible_collections/specops/infra``)."""
    infra = repo / INFRA
    coll = dest / "ansible_collections/specops/infra"
    coll.mkdir(parents=True)
    for name in INFRA_ENTRIES:
        src = infra / name
        if src.is_dir():
            shutil.copytree(src, coll / name, ignore=SKIP)
        elif src.is_file():
            shutil.copy2(src, coll / name)
        elif name != "changelogs":
            raise BuildError(f"{src}: missing (the collection needs it)")
    if (coll / "roles").exists() or (coll / "playbooks").exists():
        raise BuildError(f"{infra}: has its own roles/ or playbooks/ (they live at the root)")
    if not (repo / "LICENSE").is_file():
        raise BuildError(f"{repo / 'LICENSE'}: missing (the licence galaxy.yml names)")
    shutil.copy2(repo / "LICENSE", coll / "LICENSE")
    shutil.copytree(repo / "roles", coll / "roles", ignore=SKIP)
    shutil.copytree(repo / "playbooks", coll / "playbooks", ignore=SKIP)
    deploy = coll / "playbooks/deploy.yml"
    if deploy.exists():
        raise BuildError("playbooks/deploy.yml exists: it would hide the root deploy.yml")
    text = (repo / "deploy.yml").read_text(encoding="utf-8")
    deploy.write_text(_rewrite_deploy(text, coll / "playbooks"), encoding="utf-8")
    _alias_hyphenated(coll / "playbooks")
    return coll


def alias_text(name: str) -> str:
    """The alias of the hyphenated playbook ``name`` (``speculative-apply.yml``): the
    file ``speculative_apply.yml`` beside it holds exactly this."""
    stem = name.removesuffix(".yml").replace("-", "_")
    return (
        f"---\n# specops.infra.{stem}: {name} by a name an FQCN can hold\n"
        f"# (scripts/release/build-collection.py --aliases writes this file).\n"
        f"- name: The playbook {name}.\n  ansible.builtin.import_playbook: {name}\n"
    )


def _alias_hyphenated(playbooks: Path) -> None:
    """A playbook name with a hyphen is no FQCN (``specops.infra.speculative-apply`` does
    not resolve): each has ``<name_with_underscores>.yml`` beside it, which imports it."""
    for path in sorted(playbooks.glob("*-*.yml")):
        alias = playbooks / path.name.replace("-", "_")
        if not alias.is_file() or alias.read_text(encoding="utf-8") != alias_text(path.name):
            raise BuildError(
                f"playbooks/{path.name}: no FQCN alias playbooks/{alias.name} (or not the"
                f" one expected); write it: python3 scripts/release/build-collection.py --aliases"
            )


def write_aliases(repo: Path) -> list[Path]:
    """Write the alias of every hyphenated playbook of ``repo/playbooks``; the written."""
    out = []
    for path in sorted((repo / "playbooks").glob("*-*.yml")):
        alias = path.with_name(path.name.replace("-", "_"))
        if not alias.is_file() or alias.read_text(encoding="utf-8") != alias_text(path.name):
            alias.write_text(alias_text(path.name), encoding="utf-8")
            out.append(alias)
    return out


def galaxy_cli() -> Path:
    """ansible-galaxy of the interpreter's environment (the venv's)."""
    cli = Path(sys.executable).parent / "ansible-galaxy"
    if not cli.exists():
        found = shutil.which("ansible-galaxy")
        if found is None:
            raise BuildError("ansible-galaxy: not found beside the interpreter nor on PATH")
        cli = Path(found)
    return cli


def build(repo: Path, out: Path) -> Path:
    """Stage from ``repo`` and build; returns the tarball (``out/specops-infra-*.tar.gz``)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specops-collection-") as tmp:
        coll = stage(repo, Path(tmp))
        run = subprocess.run(
            [str(galaxy_cli()), "collection", "build", "--force", "--output-path", str(out),
             str(coll)],
            check=False, capture_output=True, text=True,
        )  # fmt: skip
        if run.returncode != 0:
            raise BuildError(f"ansible-galaxy collection build failed:\n{run.stdout}{run.stderr}")
    match = re.search(r"(\S+specops-infra-\S+\.tar\.gz)", run.stdout)
    if match is None:
        raise BuildError(f"ansible-galaxy collection build named no tarball:\n{run.stdout}")
    return Path(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-path", type=Path, default=REPO / ".cache/dist")
    parser.add_argument(
        "--stage-only", action="store_true",
        help="stage into --output-path (a collections path) and do not build",
    )  # fmt: skip
    parser.add_argument(
        "--aliases", action="store_true",
        help="write the FQCN alias of each hyphenated playbook (playbooks/x_y.yml) and stop",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.aliases:
            for path in write_aliases(REPO):
                print(path)
        elif args.stage_only:
            print(stage(REPO, args.output_path))
        else:
            print(build(REPO, args.output_path))
    except BuildError as exc:
        print(f"build_collection: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
