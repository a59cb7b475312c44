"""Fixtures for the lab PVE stand-in: a two-node lab cluster, a rootfs template, the API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specops_lab.pve.layout import Cluster
from specops_lab.pve.testing import (
    ApiHandle,
    make_test_cluster,
    running_api,
    stop_lab_containers,
)


@pytest.fixture
def lab_cluster(tmp_path: Path, rootfs_tarball: Path) -> Iterator[Cluster]:
    """Two lab nodes (pvetest-a, pvetest-b) with the template in their local storage."""
    cluster = make_test_cluster(tmp_path, rootfs_tarball)
    try:
        yield cluster
    finally:
        stop_lab_containers(cluster)


@pytest.fixture
def lab_cluster_v1(tmp_path: Path, rootfs_tarball: Path) -> Iterator[Cluster]:
    """Like ``lab_cluster`` but the emulated hosts run cgroup v1 (PVE 6)."""
    cluster = make_test_cluster(tmp_path, rootfs_tarball, cgroup="v1")
    try:
        yield cluster
    finally:
        stop_lab_containers(cluster)


@pytest.fixture(scope="module")
def api_cluster(
    tmp_path_factory: pytest.TempPathFactory, rootfs_tarball: Path
) -> Iterator[Cluster]:
    cluster = make_test_cluster(tmp_path_factory.mktemp("pveapi"), rootfs_tarball)
    try:
        yield cluster
    finally:
        stop_lab_containers(cluster)


@pytest.fixture(scope="module")
def pve_api(api_cluster: Cluster) -> Iterator[ApiHandle]:
    """The REST stand-in on a free 127.0.0.1 port for ``api_cluster``."""
    with running_api(api_cluster.dir) as handle:
        yield handle
