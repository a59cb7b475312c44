"""Where the lab keeps things on this machine: one home for each path.

- the cache (``$SPECOPS_CACHE``, default ``/var/cache/specops``): the base image's
  rootfs tarball, the vLLM CPU venv, the tiny model, the wheelhouse;
- the lab (``$SPECOPS_LAB_DIR``, default ``/var/lib/specops/lab``): node roots, the
  stand-in cluster, the API's state;
- inside a lab node's root: what the lab keeps beside the kernel's view
  (``LAB_ETC``) and the initramfs and next kernel command line the node boots with.

Read the environment when asked (not at import), so a test or a command that moves
the cache moves it everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "BOOT_CMDLINE",
    "INITRAMFS_DIR",
    "LAB_ETC",
    "TEMPLATE_NAME",
    "UNREACHABLE_FAULT",
    "cache_root",
    "lab_dir",
    "template_tarball",
]

TEMPLATE_NAME = "debian-bookworm-rootfs.tar"
# Relative to a lab node's root. What the lab keeps about the node beside the kernel's
# view (etc/specops-lab/): the node's NVIDIA majors, what its installer stand-in and
# boot emulation read.
LAB_ETC = Path("etc") / "specops-lab"
# The initramfs the node boots with: the modprobe configuration it carries (written at
# a tree build and by the node's update-initramfs stand-in), and the next boot's kernel
# command line (written by its update-grub / proxmox-boot-tool stand-ins).
INITRAMFS_DIR = Path("boot") / "specops-lab-initramfs"
BOOT_CMDLINE = Path("boot") / "specops-lab-cmdline"
# A lab fault (issue 34): while this file is under a node's root, the node's connection
# (specops.lab.node) cannot reach it, as when its network or sshd is gone. Remove the file
# and the node answers again.
UNREACHABLE_FAULT = LAB_ETC / "fault-unreachable"


def cache_root() -> Path:
    """``$SPECOPS_CACHE`` or ``/var/cache/specops``."""
    return Path(os.environ.get("SPECOPS_CACHE") or "/var/cache/specops")


def lab_dir() -> Path:
    """``$SPECOPS_LAB_DIR`` or ``/var/lib/specops/lab``."""
    return Path(os.environ.get("SPECOPS_LAB_DIR") or "/var/lib/specops/lab")


def template_tarball() -> Path:
    """The Debian bookworm rootfs that ``scripts/setup.sh image`` debootstraps once."""
    return cache_root() / TEMPLATE_NAME
