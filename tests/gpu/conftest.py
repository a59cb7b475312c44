"""GPU facts tests: build simulated host trees from tests/fixtures/hosts/*.yml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops_lab import hosttree

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


@pytest.fixture
def host_tree(tmp_path: Path) -> Callable[[str], Path]:
    """``host_tree("a6000-3090")`` builds that description under a fresh tmp root."""

    def build(name: str) -> Path:
        spec = hosttree.load_spec(HOSTS / f"{name}.yml")
        return hosttree.build_tree(spec, tmp_path / name)

    return build


@pytest.fixture
def host_facts(host_tree: Callable[[str], Path]) -> Callable[[str], gpu.HostGpuFacts]:
    def facts(name: str) -> gpu.HostGpuFacts:
        return gpu.gather_facts(gpu.HostRoots.under(host_tree(name)))

    return facts
