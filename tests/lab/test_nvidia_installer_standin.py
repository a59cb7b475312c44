"""The NVIDIA installer stand-in's command line, naming and early refusals.

Its installs write to /usr and /var (as the real installer), so they are exercised in
the nvidia_driver molecule container only; here: what needs no write outside tmp."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specops_lab import nvidia_installer_standin as standin


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--silent", "--dkms", "-m=kernel-open"],
            {"silent": True, "dkms": True, "flavour": "open"},
        ),
        (["-s", "-m", "kernel"], {"s": True, "flavour": "proprietary"}),
        (
            ["--kernel-module-type=open", "--no-kernel-module"],
            {"flavour": "open", "no-kernel-module": True},
        ),
        (["-M", "proprietary", "--uninstall"], {"flavour": "proprietary", "uninstall": True}),
    ],
)
def test_real_flags_are_understood(argv: list[str], expected: dict[str, object]) -> None:
    assert standin._parse(argv) == expected


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--silent", "--frobnicate"], 'Unrecognized option: "--frobnicate"'),
        (["-m=kernel-closed"], "Invalid kernel module build directory: 'kernel-closed'"),
        (["--kernel-module-type=free"], "Invalid kernel module type: 'free'"),
    ],
)
def test_unknown_flags_are_refused(argv: list[str], problem: str) -> None:
    with pytest.raises(standin.InstallerError, match=problem.replace("(", r"\(")):
        standin._parse(argv)


def test_runfile_is_named_like_the_real_one_and_reports_its_version(tmp_path: Path) -> None:
    run = standin.make_runfile("580.126.09", tmp_path)
    assert run.name == "NVIDIA-Linux-x86_64-580.126.09.run"
    assert os.access(run, os.X_OK)
    out = subprocess.run(
        [sys.executable, str(run), "--version"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0
    assert "version 580.126.09" in out.stdout
    bad = subprocess.run(
        [sys.executable, str(run), "--bogus"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1
    assert 'Unrecognized option: "--bogus"' in bad.stderr
    with pytest.raises(ValueError, match=r"version: must look like 580\.126\.09"):
        standin.make_runfile("latest", tmp_path)


def test_module_install_refused_without_headers_of_the_simulated_kernel(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "the installer (and its stand-in) needs root: run the tests as root"
    hw = tmp_path / "hw"
    (hw / "proc" / "sys" / "kernel").mkdir(parents=True)
    (hw / "proc" / "sys" / "kernel" / "osrelease").write_text("6.8.99-1-pve\n")
    run = standin.make_runfile("580.126.09", tmp_path)
    out = subprocess.run(
        [sys.executable, str(run), "--silent", "-m=kernel-open"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SPECOPS_LAB_HARDWARE_ROOT": str(hw)},
    )
    assert out.returncode == 1
    assert "kernel source tree for the currently running kernel (6.8.99-1-pve)" in out.stderr
    assert not (hw / "sys").exists()
