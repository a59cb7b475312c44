"""The ``specops lab`` command group.

Sub-areas of the lab (the vLLM server, the Proxmox stand-in, ...) each keep their
commands in their own module, listed in :data:`LAB_MODULES`. Such a module exposes
``register(subparsers)`` and sets ``func`` on its parsers, exactly like a top-level
command module, so adding a sub-area is one line here.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

__all__ = ["LAB_MODULES", "register"]

# Modules that add ``specops lab <area> ...`` commands, in help order.
LAB_MODULES: tuple[str, ...] = ("specops.lab.vllm_cli",)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``specops lab`` and every sub-area's commands under it."""
    lab = subparsers.add_parser(
        "lab", help="lab stand-ins on this machine", description=__doc__.splitlines()[0]
    )
    lab.set_defaults(func=lambda _args: _help(lab))
    sub = lab.add_subparsers(dest="lab_area", metavar="AREA")
    for name in LAB_MODULES:
        importlib.import_module(name).register(sub)
