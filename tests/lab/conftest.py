"""Fixtures for the lab PVE stand-in: a two-node lab cluster, a rootfs template, the API."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specops.lab.pve.layout import Cluster
from specops.lab.pve.testing import (
    TEMPLATE_NAME,
    ApiHandle,
    make_test_cluster,
    running_api,
    stop_lab_containers,
)


def _cache_dir() -> Path:
    return Path(os.environ.get("SPECOPS_CACHE", "/var/cache/specops"))


@pytest.fixture(scope="session")
def rootfs_tarball() -> Path:
    """The Debian bookworm minbase rootfs (systemd, python3) of `scripts/setup.sh image`.

    Built here with debootstrap (about a minute, cached) when the set-up step has not run.
    """
    tarball = _cache_dir() / TEMPLATE_NAME
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None or shutil.which("lxc-start") is None:
        pytest.skip("needs debootstrap and lxc (scripts/setup.sh packages)")
    build = _cache_dir() / f".{TEMPLATE_NAME}.build.{os.getpid()}"
    build.mkdir(parents=True)
    try:
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=systemd,systemd-sysv,python3,dbus",
                "bookworm",
                str(build / "rootfs"),
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
        subprocess.run(
            ["tar", "-C", str(build / "rootfs"), "-cf", str(build / TEMPLATE_NAME), "."],
            check=True,
            timeout=300,
        )
        (build / TEMPLATE_NAME).replace(tarball)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return tarball


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
