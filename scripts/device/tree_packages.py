"""Run a script of this tree on the tree's own packages when nothing is installed.

The device machine's python3 runs ``scripts/device/serve-gpu-device.py`` and
``scripts/device/gpu-doctor-device.py`` from a copied tree, with no venv: the script runs
again with the tree's ``src/``, ``lab/src`` and ``collections/`` on PYTHONPATH (no
``sys.path`` edit). Under the venv's python (``scripts/setup.sh venv``) the packages are
installed and nothing happens. Imported by those scripts only when run as ``__main__``
(a script's own folder is then first on the path).

The collection's module_utils import Ansible's own (``ansible.module_utils.urls``,
``open_url``), and the device's python has no Ansible (checked 2026-12-03: Python
3.12.3, ``import ansible`` fails): a bundle carries the controller's ``ansible`` package
(pure Python) in ``device-site/``, which goes on PYTHONPATH with the tree.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

SITE = "device-site"


def run_on_the_tree(repo: Path) -> None:
    """Return when ``specops`` is importable; else exec this interpreter again on the
    same argv with the tree's packages first on PYTHONPATH."""
    if importlib.util.find_spec("specops") is not None:
        return
    tree = [str(repo / "src"), str(repo / "lab/src"), str(repo / "collections")]
    if (repo / SITE).is_dir():
        tree.append(str(repo / SITE))
    before = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([*tree, before] if before else tree)
    env = {**os.environ, "PYTHONPATH": path}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)  # noqa: S606 - the same script


# What ``import ansible.module_utils.<x>`` loads: the package's top and module_utils
# (1.6 MB of ansible-core 2.19's 16 MB; the SGLang bundle must stay under the device
# tool's 64 MiB).
ANSIBLE_PARTS = ("__init__.py", "release.py", "_vendor", "module_utils")


def carry_ansible(repo_copy: Path) -> Path:
    """Copy this interpreter's ``ansible`` package (ANSIBLE_PARTS) into
    ``<repo_copy>/device-site``."""
    spec = importlib.util.find_spec("ansible")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("ansible is not installed here: run with the venv's python")
    source = Path(next(iter(spec.submodule_search_locations)))
    target = repo_copy / SITE / "ansible"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ANSIBLE_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, ignore=skip)
        else:
            shutil.copy2(source / part, target / part)
    return target
