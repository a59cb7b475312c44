"""``specops lab``: the lab's command group.

Each lab area adds its subcommands through ``register(lab_subparsers)``; list the
module in ``LAB_COMMAND_MODULES`` (one line per area).
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["LAB_COMMAND_MODULES", "register"]

LAB_COMMAND_MODULES: tuple[str, ...] = (
    "specops_lab.pve.cli",
    "specops_lab.hosttree",
    "specops_lab.vllm_cli",
    "specops_lab.oracle.cli",
    "specops_lab.up",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = subparsers.add_parser("lab", help="lab stand-ins and test servers")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="AREA", required=True)
    for name in LAB_COMMAND_MODULES:
        importlib.import_module(name).register(lab_sub)
