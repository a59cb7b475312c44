"""nvidia_userspace: the container's userspace is exactly its host module's version.

After converge (570.172.08 from packages -> 580.126.09 by .run), idempotence, and the
side effect (stale facts refused; then the host's module is 575.64.05 and the role
reinstalls), the container must hold 575.64.05 only, installed without a kernel module,
and NVML must answer.
"""

from __future__ import annotations

from typing import Any

HOST_VERSION = "575.64.05"
LIB = "/usr/lib/x86_64-linux-gnu"


def test_only_the_host_version_is_installed(host: Any) -> None:
    soname = host.file(f"{LIB}/libnvidia-ml.so.1")
    assert soname.is_symlink
    assert soname.linked_to == f"{LIB}/libnvidia-ml.so.{HOST_VERSION}"
    listing = host.check_output(f"ls {LIB}")
    versions = sorted(
        name.removeprefix("libnvidia-ml.so.")
        for name in listing.split()
        if name.startswith("libnvidia-ml.so.") and name.count(".") > 3
    )
    assert versions == [HOST_VERSION]


def test_nvml_answers_with_the_host_version(host: Any) -> None:
    cmd = host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert cmd.rc == 0, cmd.stdout + cmd.stderr
    assert "mismatch" not in cmd.stdout
    assert cmd.stdout.split() == [HOST_VERSION] * 4  # pve-b's four cards


def test_installed_without_kernel_module(host: Any) -> None:
    log = host.file("/var/log/nvidia-installer.log").content_string
    assert f"version: {HOST_VERSION}" in log
    assert "kernel module: none (--no-kernel-module)" in log
    # The host's (simulated) module was not touched by the container's installs.
    module = host.file("/var/lib/specops/lab/ctgpu-node/sys/module/nvidia/version")
    assert module.content_string.strip() == HOST_VERSION


def test_old_packages_purged(host: Any) -> None:
    """The first install replaced the packaged 570.172.08 (apt purge, no meta-package)."""
    assert not host.package("libnvidia-ml1").is_installed
    assert not host.file(f"{LIB}/libnvidia-ml.so.570.172.08").exists
