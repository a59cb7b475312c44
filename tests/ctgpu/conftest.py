"""Container GPU tests: host facts of the lab hosts, built as simulated trees."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops_lab import hosttree

REPO = Path(__file__).resolve().parents[2]
# The lab nodes in known states (the lab itself starts them in the hard real state).
HARDWARE = REPO / "tests" / "fixtures" / "hosts" / "lab-converged"


def build_host(name: str, root: Path, *, node: str | None = None, **changes: Any) -> Path:
    """Build ``tests/fixtures/hosts/lab-converged/<name>.yml`` under ``root`` (node name
    overridable)."""
    spec = hosttree.load_spec(HARDWARE / f"{name}.yml")
    if node is not None:
        changes["node"] = node
    if changes:
        spec = dataclasses.replace(spec, **changes)
    return hosttree.build_tree(spec, root)


def facts_of(root: Path) -> dict[str, Any]:
    result: dict[str, Any] = gpu.gather_facts(gpu.HostRoots.under(root)).to_dict()
    return result


@pytest.fixture(scope="session")
def host_builder() -> Callable[..., Path]:
    """``build_host`` for tests that build a lab host under a root of their own."""
    return build_host


@pytest.fixture(scope="session")
def pve_b_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Lab host pve-b: 4x RTX PRO 6000 on nvidia (minors 0-3), uvm 511, PVE 8.4, cgroup v2."""
    return build_host("pve-b", tmp_path_factory.mktemp("ctgpu-hw") / "pve-b")


@pytest.fixture(scope="session")
def pve_b_facts(pve_b_root: Path) -> dict[str, Any]:
    return facts_of(pve_b_root)


@pytest.fixture(scope="session")
def pve_a_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Lab host pve-a: A6000s on vfio-pci, 3090s held by running VMs, no driver loaded."""
    root = tmp_path_factory.mktemp("ctgpu-hw-a") / "pve-a"
    return facts_of(build_host("pve-a", root))


@pytest.fixture
def ct_root(pve_b_root: Path, tmp_path: Path) -> Callable[[int, str], Path]:
    """A node root with pve-b's proc/dev (symlinked) and a fresh etc/pve/lxc/<vmid>.conf."""

    def make(vmid: int, text: str) -> Path:
        root = tmp_path / "node"
        if not root.exists():
            root.mkdir()
            for sub in ("proc", "dev", "sys"):
                (root / sub).symlink_to(pve_b_root / sub)
            (root / "etc" / "pve" / "lxc").mkdir(parents=True)
        (root / "etc" / "pve" / "lxc" / f"{vmid}.conf").write_text(text)
        return root

    return make
