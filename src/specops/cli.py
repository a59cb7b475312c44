"""The ``specops`` command line.

Each feature module that has commands exposes ``register(subparsers)``; this file only
lists them. A :class:`~specops.errors.SpecopsError` becomes a one-line message and exit
code 2, never a traceback; so does a command group named without its subcommand (usage,
exit 2). Ctrl-C ends with ``specops: interrupted`` and exit 130 (128 + SIGINT), no
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from specops import __version__
from specops.errors import SpecopsError

__all__ = ["main"]

# Top-level command -> the module that registers it, in help order. Each module has
# ``register(subparsers: argparse._SubParsersAction) -> None`` and sets ``func`` on
# its parsers. A command line that names a command imports only that module (the
# rollout's per-node steps start without the lab's or the migration's imports).
COMMANDS: dict[str, str] = {
    "lab": "specops.lab.cli",
    "profile": "specops.speculative.cli",
    "bench": "specops.bench.cli",
    "migrate": "specops.migrate.cli",
    "sweep": "specops.tune.cli",
    "rollout": "specops.tune.cli",
    "doctor": "specops.doctor.cli",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specops", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in argv if not a.startswith("-")), None)
    names = (COMMANDS[first],) if first in COMMANDS else COMMAND_MODULES
    for name in names:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("specops: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_in)
    args = parser.parse_args(args_in)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:  # `specops` alone (every command group requires its subcommand)
        parser.print_help()
        return 0
    try:
        return func(args)
    except SpecopsError as exc:
        print(f"specops: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
