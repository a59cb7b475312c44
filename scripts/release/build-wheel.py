#!/usr/bin/env python3
"""Build the controller package's wheel (``specops-<version>-py3-none-any.whl``), as
``pip wheel .`` builds it, from a copy of what the build reads: the checkout gets no
``build/`` or ``*.egg-info``.

    scripts/release/build-wheel.py [--output-path DIR] [PROJECT]

PROJECT is the repository's root (the product, default) or ``lab`` (the lab's own
distribution, specops-lab, which only the lab's sites and images install). The build
reads :data:`INPUTS` of PROJECT (those it has): ``pyproject.toml``, ``LICENSE`` (the
wheel's ``License-File``), ``src/`` and ``templates/`` (``src/specops/templates`` is a
link to it in the checkout: the wheel carries the report templates themselves). It runs
this interpreter's setuptools without build isolation and without an index (the locked
setuptools of the venv; no download). Prints the wheel's path.

scripts/release/build-ee.py, tests/plugins/consumer.py and tests/unit/test_product_package.py
build through :func:`build`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["INPUTS", "REPO", "BuildError", "build"]

REPO = Path(__file__).resolve().parents[2]
INPUTS = ("pyproject.toml", "LICENSE", "src", "templates")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


class BuildError(RuntimeError):
    """The wheel could not be built (the message carries pip's output)."""


def build(project: Path, out: Path) -> Path:
    """The wheel of ``project`` (a directory with a pyproject.toml) in ``out``; an older
    wheel of the same distribution there is replaced."""
    if not (project / "pyproject.toml").is_file():
        raise BuildError(f"{project}: no pyproject.toml")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specops-wheel-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        for name in INPUTS:
            src = project / name
            if src.is_dir():
                shutil.copytree(src, tree / name, symlinks=True, ignore=SKIP)
            elif src.is_file():
                shutil.copy2(src, tree / name)
        made = Path(tmp) / "out"
        run = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-q", "-w", str(made), str(tree)],
            check=False, capture_output=True, text=True,
        )  # fmt: skip
        if run.returncode != 0:
            raise BuildError(f"pip wheel {project} failed:\n{run.stdout}{run.stderr}")
        (wheel,) = made.glob("*.whl")
        name = wheel.name.split("-", 1)[0]
        for old in out.glob(f"{name}-*.whl"):
            old.unlink()
        return Path(shutil.copy2(wheel, out / wheel.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("project", nargs="?", type=Path, default=REPO)
    parser.add_argument("--output-path", type=Path, default=REPO / "dist")
    args = parser.parse_args(argv)
    project = args.project if args.project.is_absolute() else REPO / args.project
    try:
        print(build(project, args.output_path))
    except BuildError as exc:
        print(f"build_wheel: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
