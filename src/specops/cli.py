"""The ``specops`` command line.

Each feature module that has commands exposes ``register(subparsers)``; this file only
lists them. A :class:`~specops.errors.SpecopsError` becomes a one-line message and exit
code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from specops import __version__
from specops.errors import SpecopsError

__all__ = ["main"]

# Modules that contribute subcommands, in help order. Each has
# ``register(subparsers: argparse._SubParsersAction) -> None`` and sets
# ``func`` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "specops.lab.cli",
    "specops.speculative.cli",
    "specops.bench.cli",
    "specops.migrate.cli",
    "specops.tune.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specops", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return func(args)
    except SpecopsError as exc:
        print(f"specops: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
