"""A lab for migration tests: the two lab hosts (tests/fixtures/hosts/lab-converged/)
brought up by ``specops lab up`` in a lab dir under the test's basetemp, with the API
stand-in on a free 127.0.0.1 port; torn down (API stopped, this area's containers
stopped and removed) at the end."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import free_port
from specops_lab.up import LabPaths, down, up

REPO = Path(__file__).resolve().parents[2]
VMIDS = (701, 702, 703)


@dataclass(frozen=True)
class MigrateLab:
    paths: LabPaths
    port: int
    cluster: Cluster

    @property
    def secret(self) -> str:
        return self.paths.token_secret_file.read_text().strip()

    @property
    def cert(self) -> Path:
        return self.paths.pki_dir / "pve-ssl.pem"


def _remove_my_containers(cluster: Cluster) -> None:
    for node in cluster.nodes.values():
        for vmid in VMIDS:
            name = node.lxc_name(vmid)
            subprocess.run(
                ["lxc-stop", "-n", name, "-P", str(node.lxcpath), "-k"],
                capture_output=True,
                check=False,
                timeout=60,
            )
            shutil.rmtree(node.lxcpath / name, ignore_errors=True)


def make_migrate_lab(
    tmp_path_factory: pytest.TempPathFactory, template: Path
) -> Iterator[MigrateLab]:
    """Bring the lab up for one test module; tear it down after."""
    paths = LabPaths(tmp_path_factory.mktemp("migrate-lab"))
    port = free_port()
    up(
        paths,
        hardware_dir=REPO / "tests" / "fixtures" / "hosts" / "lab-converged",
        template=template,
        port=port,
        with_network=False,
    )
    cluster = Cluster.load(paths.cluster_dir)
    try:
        yield MigrateLab(paths, port, cluster)
    finally:
        down(paths)
        _remove_my_containers(cluster)
        for node in cluster.nodes.values():
            shutil.rmtree(node.host_path("/var/lib/vz/images"), ignore_errors=True)
