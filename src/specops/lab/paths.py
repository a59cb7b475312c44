"""Where the lab keeps things on this machine: one home for each path.

- the cache (``$SPECOPS_CACHE``, default ``/var/cache/specops``): the base image's
  rootfs tarball, the vLLM CPU venv, the tiny model, the wheelhouse;
- the lab (``$SPECOPS_LAB_DIR``, default ``/var/lib/specops/lab``): node roots, the
  stand-in cluster, the API's state.

Read the environment when asked (not at import), so a test or a command that moves
the cache moves it everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TEMPLATE_NAME", "cache_root", "lab_dir", "template_tarball"]

TEMPLATE_NAME = "debian-bookworm-rootfs.tar"


def cache_root() -> Path:
    """``$SPECOPS_CACHE`` or ``/var/cache/specops``."""
    return Path(os.environ.get("SPECOPS_CACHE") or "/var/cache/specops")


def lab_dir() -> Path:
    """``$SPECOPS_LAB_DIR`` or ``/var/lib/specops/lab``."""
    return Path(os.environ.get("SPECOPS_LAB_DIR") or "/var/lib/specops/lab")


def template_tarball() -> Path:
    """The Debian bookworm rootfs that ``scripts/setup.sh image`` debootstraps once."""
    return cache_root() / TEMPLATE_NAME
