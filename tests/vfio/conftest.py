"""vfio_release tests: simulated host trees from tests/fixtures/hosts/*.yml and the PCI
kernel stand-in (specops_lab.pci_standin) running in a thread."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops_lab import hosttree
from specops_lab.pci_standin import PciStandin, register_driver

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


@pytest.fixture
def host_tree(tmp_path: Path) -> Callable[..., Path]:
    """``host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))``: build that
    description under a fresh root; ``nvidia`` loads the driver (module + PCI driver)."""

    def build(name: str, *, nvidia: bool = False, drivers: tuple[str, ...] = ()) -> Path:
        spec = hosttree.load_spec(HOSTS / f"{name}.yml")
        if nvidia and spec.nvidia is not None:
            spec = hosttree.with_nvidia_loaded(spec)
        root = hosttree.build_tree(spec, tmp_path / name, device_nodes=False)
        for driver in (("nvidia",) if nvidia else ()) + drivers:
            register_driver(root, driver)
        return root

    return build


def _facts_of(root: Path) -> gpu.HostGpuFacts:
    return gpu.gather_facts(gpu.HostRoots.under(root))


@pytest.fixture
def facts_of() -> Callable[[Path], gpu.HostGpuFacts]:
    return _facts_of


def _snapshot(root: Path) -> dict[str, str]:
    """Every file's content hash and every link's target under ``root``."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def snapshot() -> Callable[[Path], dict[str, str]]:
    return _snapshot


@pytest.fixture
def standin() -> Iterator[Callable[[Path], PciStandin]]:
    """Start the PCI kernel stand-in on a tree in a background thread."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(root: Path) -> PciStandin:
        s = PciStandin(root)

        def loop() -> None:
            while not stop.is_set():
                s.step()
                time.sleep(0.005)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        threads.append(t)
        return s

    yield start
    stop.set()
    for t in threads:
        t.join(timeout=2)
