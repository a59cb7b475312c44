"""The operator's install carries no lab code: the product's wheel (``pip wheel .``) and
the collection specops.infra's tarball (scripts/build_collection.py: roles/, playbooks/
and the plugins, then ``ansible-galaxy collection build``) hold nothing of the lab (lab/,
the distribution specops-lab: the PVE stand-in and its API schema, the node, PCI and
installer stand-ins, the vLLM CPU lab).

Both are built from a copy of what their builds read, in a temporary directory (the
checkout gets no build/ or egg-info), in a few seconds; the scans are proven not blind by
a planted lab module.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "collections/ansible_collections/specops/infra"
BUILD = load_script("build_collection.py")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "output")

# A member whose path names the lab, or a lab module by its name.
LAB_PATH = re.compile(
    r"(^|/)(specops_lab|lab)(/|$)|pve_schema|pve_jsonschema|pve_formats|pve-9\.1-api-schema"
    r"|standin|hosttree|tiny_model_builder|tune_nodes|pci_identities"
)
# Text that imports or names the lab's package (not a variable such as specops_lab_network).
LAB_TEXT = re.compile(rb"\bspecops_lab\b")


def lab_members(members: dict[str, bytes]) -> list[str]:
    """The members (path -> content) that are lab code: by path or by content. A role's
    README.md may name the lab's stand-ins in prose (how its molecule scenario tests it):
    text, not code, so only its path counts."""
    return sorted(name for name, data in members.items()
                  if LAB_PATH.search(name)
                  or (not name.endswith(".md") and LAB_TEXT.search(data)))  # fmt: skip


def build_wheel(tree: Path, out: Path) -> dict[str, bytes]:
    """The product's wheel, built from ``tree`` as ``pip wheel .`` builds it."""
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out), "."],
        cwd=tree, check=False, capture_output=True, text=True,
    )  # fmt: skip
    # (setuptools >= 70.1 builds wheels by itself: requirements.txt, scripts/setup.sh venv)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = out.glob("specops-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {name: z.read(name) for name in z.namelist()}


def build_collection(repo: Path, out: Path) -> dict[str, bytes]:
    """The collection's tarball, built from ``repo`` by scripts/build_collection.py (the
    one build step: stage roles/, playbooks/ and the collection, then
    ``ansible-galaxy collection build``)."""
    return tarball_members(BUILD.build(repo, out))


def tarball_members(tarball: Path) -> dict[str, bytes]:
    members = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isfile() else None
            if data is not None:
                members[member.name] = data.read()
    return members


@pytest.fixture(scope="module")
def product_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the product's build reads (pyproject.toml, src/), with lab/ beside it as in
    the checkout: a build that reached into lab/ would show."""
    tree = tmp_path_factory.mktemp("product")
    shutil.copy2(REPO / "pyproject.toml", tree)
    shutil.copytree(REPO / "src", tree / "src", ignore=SKIP, symlinks=True)
    shutil.copytree(REPO / "templates", tree / "templates", ignore=SKIP)
    shutil.copytree(REPO / "lab", tree / "lab", ignore=SKIP)
    return tree


def test_the_product_wheel_carries_no_lab_code(product_tree: Path, tmp_path: Path) -> None:
    members = build_wheel(product_tree, tmp_path)
    assert "specops/cli.py" in members  # the product is there
    # ... with its report templates (templates/, linked as src/specops/templates): an
    # installed specops renders its reports (the consumer deploy found them missing)
    templates = {f"specops/templates/{p.relative_to(REPO / 'templates')}"
                 for p in (REPO / "templates").rglob("*.j2")}  # fmt: skip
    assert len(templates) >= 5
    assert templates <= set(members), sorted(templates - set(members))
    assert lab_members(members) == []
    (entry_points,) = (n for n in members if n.endswith(".dist-info/entry_points.txt"))
    assert b"specops.commands" not in members[entry_points]  # no command from the product
    (metadata,) = (n for n in members if n.endswith(".dist-info/METADATA"))
    version = re.search(rb"^Version: (\S+)$", members[metadata], re.M)
    assert version is not None
    galaxy = yaml.safe_load((INFRA / "galaxy.yml").read_text())
    assert version.group(1).decode() == galaxy["version"]  # one version: wheel = collection


def test_the_wheel_scan_finds_planted_lab_code(product_tree: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(product_tree, tree)
    shutil.copy2(tree / "lab/src/specops_lab/pve_schema.py", tree / "src/specops/pve_schema.py")
    (tree / "src/specops/bench/uses_lab.py").write_text("from specops_lab import paths\n")
    found = lab_members(build_wheel(tree, tmp_path / "out"))
    assert found == ["specops/bench/uses_lab.py", "specops/pve_schema.py"]


def test_the_infra_collection_carries_no_lab_code(collection_tarball: Path) -> None:
    members = tarball_members(collection_tarball)
    assert "plugins/module_utils/gpu_catalogue.py" in members
    assert "roles/pve_container/tasks/main.yml" in members
    assert "playbooks/deploy.yml" in members
    assert lab_members(members) == []


def test_the_collection_scan_finds_planted_lab_code(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(INFRA, repo / INFRA.relative_to(REPO), ignore=SKIP)
    for name in ("roles", "playbooks"):
        shutil.copytree(REPO / name, repo / name, ignore=SKIP)
    shutil.copy2(REPO / "deploy.yml", repo)
    (repo / INFRA.relative_to(REPO) / "plugins/module_utils/lab_cards.py").write_text(
        "from specops_lab.hosttree import MODELS\n"
    )
    (repo / "roles/benchmark/tasks/lab.yml").write_text("# uses specops_lab\n")
    members = build_collection(repo, tmp_path / "out")
    assert lab_members(members) == ["plugins/module_utils/lab_cards.py",
                                    "roles/benchmark/tasks/lab.yml"]  # fmt: skip
