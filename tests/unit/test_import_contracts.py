"""The import contracts (pyproject.toml, [tool.importlinter]) hold, and each one breaks.

Each case copies the Python sources (src/specops, the lab's lab/src/specops_lab, the
collection's plugins, the contract config and scripts/checks/import_contracts.py) to a temporary
tree, plants one violation there and runs ``lint-imports`` on it, as the lint phase of
scripts/test.sh runs it on the repository: the run must fail and name the violation. The
unplanted copy passes, so each failure is the planted import's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path("collections/ansible_collections/specops/infra/plugins")
MODULE_UTILS = PLUGINS / "module_utils"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAB = Path("lab/src/specops_lab")


def _tree(dest: Path) -> Path:
    only_py = shutil.ignore_patterns(
        "__pycache__", "*.json", "*.md", "*.j2", "*.txt", "*.yml", "data", "flag_lists"
    )
    shutil.copytree(REPO / "src/specops", dest / "src/specops", ignore=only_py)
    shutil.copytree(REPO / LAB, dest / LAB, ignore=only_py)
    shutil.copytree(REPO / PLUGINS, dest / PLUGINS, ignore=only_py)
    # The copy alone is the collection: as a regular package it hides the collection
    # installed in the venv (scripts/setup.sh links it into site-packages), which would
    # otherwise be a second portion of the namespace package, read in its place at random.
    (dest / PLUGINS.parent / "__init__.py").touch()
    (dest / "scripts/checks").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/checks/import_contracts.py", dest / "scripts/checks")
    shutil.copy2(REPO / "pyproject.toml", dest)
    return dest


def _lint(tree: Path) -> tuple[int, str]:
    """lint-imports' exit code and its output with whitespace folded (it wraps lines)."""
    path = [tree / "src", tree / "lab/src", tree / "collections"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    run = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return run.returncode, " ".join((run.stdout + run.stderr).split())


def _plant(path: Path, line: str) -> int:
    """Plant ``line`` after the __future__ import; its line number."""
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("from __future__ import annotations\n")
    assert sep, f"{path} has no __future__ import to plant after"
    path.write_text(head + sep + line + "\n" + rest, encoding="utf-8")
    return (head + sep).count("\n") + 1


def test_the_repository_keeps_every_contract() -> None:
    rc, out = _lint(REPO)
    assert rc == 0, out
    assert "Contracts: 5 kept, 0 broken." in out


def test_an_unplanted_copy_keeps_every_contract(tmp_path: Path) -> None:
    rc, out = _lint(_tree(tmp_path))
    assert rc == 0, out


STDLIB = "module_utils (run on managed hosts) import only the standard library, Ansible's"
ONE_WAY = "the collection specops.infra never imports the controller package specops"
NO_LAB = "the product (specops, the collection specops.infra) never imports the lab specops_lab"
LAYERS = "specops: the CLI composes the commands; the core never imports the CLI"
# (file, planted line, contracts that break, message; {line}: the planted line's number)
PLANTS = {
    "module_utils-third-party": (
        MODULE_UTILS / "gpu.py",
        "import yaml",
        [STDLIB],
        "ansible_collections.specops.infra.plugins.module_utils.gpu imports yaml (l.{line})",
    ),
    "module_utils-ansible-controller": (
        MODULE_UTILS / "readiness.py",
        "from ansible.parsing.dataloader import DataLoader",
        [STDLIB],
        "module_utils.readiness imports ansible (l.{line}): only the standard library",
    ),
    "module_utils-controller-package": (
        MODULE_UTILS / "pve/conf.py",
        "from specops.errors import SpecopsError",
        [STDLIB, ONE_WAY],
        "module_utils.pve.conf imports specops.errors (l.{line})",
    ),
    "filter-imports-controller-package": (
        PLUGINS / "filter/systemd.py",
        "from specops.errors import SpecopsError",
        [ONE_WAY],
        "ansible_collections.specops.infra.plugins.filter.systemd -> specops.errors (l.{line})",
    ),
    "plugin_utils-imports-controller-package": (
        PLUGINS / "plugin_utils/inventory.py",
        "import specops.speculative",
        [ONE_WAY],
        "plugins.plugin_utils.inventory -> specops.speculative (l.{line})",
    ),
    "module-imports-controller-package": (
        PLUGINS / "modules/gpu_facts.py",
        "from specops import cli",
        [ONE_WAY],
        "ansible_collections.specops.infra.plugins.modules.gpu_facts -> specops.cli (l.{line})",
    ),
    "product-imports-lab": (
        Path("src/specops/bench/report.py"),
        "from specops_lab import paths",
        [NO_LAB],
        "specops.bench.report -> specops_lab.paths (l.{line})",
    ),
    "product-cli-imports-lab": (
        Path("src/specops/cli.py"),
        "import specops_lab.cli",
        [NO_LAB],
        "specops.cli -> specops_lab.cli (l.{line})",
    ),
    "collection-imports-lab": (
        PLUGINS / "filter/systemd.py",
        "from specops_lab import paths",
        [NO_LAB],
        "ansible_collections.specops.infra.plugins.filter.systemd -> specops_lab.paths (l.{line})",
    ),
    "core-imports-cli": (
        Path("src/specops/migrate/spec.py"),
        "import specops.cli",
        [LAYERS],
        "specops.migrate is not allowed to import specops.cli",
    ),
    "tune-cycle": (
        Path("src/specops/tune/config.py"),
        "from specops.tune import sweep",
        ["specops.tune: no import cycles between its modules"],
        "No cycles are allowed in specops.tune.",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_a_planted_violation_breaks_its_contract(tmp_path: Path, case: str) -> None:
    path, line, contracts, message = PLANTS[case]
    tree = _tree(tmp_path)
    number = _plant(tree / path, line)
    rc, out = _lint(tree)
    assert rc != 0, out
    for contract in contracts:
        assert contract in out, out
    assert out.count(" BROKEN") == len(contracts), out
    assert message.replace("{line}", str(number)) in out, out
    kept = 5 - len(contracts)
    assert f"Contracts: {kept} kept, {len(contracts)} broken." in out, out


def test_ansible_module_utils_is_allowed_in_module_utils(tmp_path: Path) -> None:
    """What every module carries (``ansible.module_utils``: open_url) keeps the contract;
    the rest of Ansible does not (``module_utils-ansible-controller`` above)."""
    tree = _tree(tmp_path)
    _plant(tree / MODULE_UTILS / "gpu.py", "from ansible.module_utils.urls import open_url")
    rc, out = _lint(tree)
    assert rc == 0, out


def test_a_new_core_module_must_be_placed_in_a_layer(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "src/specops/newfeature.py").write_text('"""A new top-level module."""\n')
    rc, out = _lint(tree)
    assert rc != 0, out
    assert "not listed as layers: - specops.newfeature" in out, out
