"""nvidia_userspace: the container's libnvidia-ml version, its installer, NVML's answer."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.specops.infra.plugins.module_utils.nvidia_userspace import (
    classify_nvidia_smi,
    kernel_module_version,
    read_state,
    verify,
)

LIB = "usr/lib/x86_64-linux-gnu"


def _lib(root: Path, version: str, *, soname: bool) -> None:
    d = root / LIB
    d.mkdir(parents=True, exist_ok=True)
    (d / f"libnvidia-ml.so.{version}").write_text("lib\n")
    if soname:
        link = d / "libnvidia-ml.so.1"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(f"libnvidia-ml.so.{version}")


def test_nothing_installed(tmp_path: Path) -> None:
    state = read_state(str(tmp_path), str(tmp_path))
    assert state.version is None
    assert state.installer == "none"
    assert state.kernel_module_version is None


def test_run_install_with_left_over(tmp_path: Path) -> None:
    _lib(tmp_path, "570.172.08", soname=False)
    _lib(tmp_path, "580.126.09", soname=True)
    (tmp_path / "var/lib/nvidia").mkdir(parents=True)
    (tmp_path / "var/lib/nvidia/100").write_text("x")
    state = read_state(str(tmp_path), str(tmp_path))
    assert state.version == "580.126.09"  # the soname link decides
    assert state.versions == ["570.172.08", "580.126.09"]
    assert state.installer == "run"
    problems = verify(state, None, "580.126.09")
    assert len(problems) == 1
    assert problems[0].startswith("left-over libnvidia-ml of 570.172.08 beside 580.126.09")


def test_packages_named(tmp_path: Path) -> None:
    _lib(tmp_path, "535.216.01", soname=True)
    info = tmp_path / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "libnvidia-ml1:amd64.list").write_text(f"/{LIB}/libnvidia-ml.so.535.216.01\n")
    (info / "bash.list").write_text("/bin/bash\n")
    state = read_state(str(tmp_path), str(tmp_path))
    assert state.installer == "packages"
    assert state.packages == ["libnvidia-ml1"]


def test_kernel_version_from_sys_or_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
    )
    assert kernel_module_version(str(tmp_path)) == "580.159.04"
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/version").write_text("580.126.09\n")
    assert kernel_module_version(str(tmp_path)) == "580.126.09"


def test_nvml_answers_and_messages_name_both_versions(tmp_path: Path) -> None:
    mismatch = classify_nvidia_smi(
        18,
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 575.64\n",
    )
    assert mismatch.mismatch
    assert mismatch.library_version == "575.64"
    ok = classify_nvidia_smi(0, "580.126.09\n580.126.09\n")
    assert ok.ok
    assert ok.driver_version == "580.126.09"
    assert not classify_nvidia_smi(6, "No devices were found").ok

    _lib(tmp_path, "575.64.05", soname=True)
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/version").write_text("590.48.01\n")
    state = read_state(str(tmp_path), str(tmp_path))
    assert verify(state, ok, "575.64.05") == [
        "nvidia-smi reports driver 580.126.09, host kernel module 575.64.05 wanted "
        "(userspace 575.64.05)"
    ]
    (problem,) = verify(state, mismatch, "575.64.05")
    assert "Driver/library version mismatch with userspace 575.64.05" in problem
    assert "host kernel module 575.64.05" in problem
    assert "the container sees kernel module 590.48.01" in problem
    problem = verify(state, None, "580.126.09")[0]
    assert problem.startswith("userspace 575.64.05 installed, host kernel module 580.126.09 wanted")
    assert os.path.islink(tmp_path / LIB / "libnvidia-ml.so.1")
