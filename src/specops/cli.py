"""The ``specops`` command line.

Each feature module that has commands exposes ``register(subparsers)``; this file only
lists them. This is the one place where errors become what the operator reads: a
:class:`~specops.errors.SpecopsError` (bad input, an unreachable server) and a usage
error (an unknown option, a bad value, a command group named without its subcommand)
are one line, ``specops sweep plan: error: objective.z: must be a number (got 'high')``,
and exit 2. Ctrl-C ends with ``specops: interrupted`` and exit 130 (128 + SIGINT). Any
other exception is a bug in specops: one line naming it, exit 70 (EX_SOFTWARE), and
the traceback only with ``SPECOPS_TRACEBACK=1``. No input shows a traceback.

Every command needs the collection specops.infra where Ansible finds it
(:mod:`specops.collection`): absent, or of another version, it is one line naming the
install command and exit 2, before any command loads; ``specops --version`` alone
needs nothing but this package.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from specops import __version__
from specops.collection import CollectionError, require

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "main"]

EXIT_BAD_INPUT = 2  # usage errors and bad input (argparse's own code)
EXIT_INTERNAL = 70  # a bug (sysexits EX_SOFTWARE); never 1, which commands give a result

# Top-level command -> the module that registers it, in help order. Each module has
# ``register(subparsers: argparse._SubParsersAction) -> None`` and sets ``func`` on
# its parsers. A command line that names a command imports only that module (the
# rollout's per-node steps start without the migration's imports).
COMMANDS: dict[str, str] = {
    "profile": "specops.speculative.cli",
    "bench": "specops.bench.cli",
    "migrate": "specops.migrate.cli",
    "sweep": "specops.tune.cli",
    "rollout": "specops.tune.cli",
    "doctor": "specops.doctor.cli",
}
# Commands other installed distributions add (the lab, specops-lab, adds ``lab``): each
# entry of this entry-point group is a command name -> a module with ``register`` as
# above. specops names none of them; a built-in command's name is never replaced.
COMMAND_GROUP = "specops.commands"


def extra_commands() -> dict[str, str]:
    """The commands of :data:`COMMAND_GROUP`: name -> module, in name order."""
    found = importlib.metadata.entry_points(group=COMMAND_GROUP)
    return {ep.name: ep.module for ep in sorted(found, key=lambda ep: ep.name)
            if ep.name not in COMMANDS}  # fmt: skip


def all_commands() -> dict[str, str]:
    """Every command this install has: the built-in ones, then the installed extras."""
    return {**COMMANDS, **extra_commands()}


class UsageError(Exception):
    """A command line argparse refuses, from the (sub)command that refused it."""

    def __init__(self, prog: str, message: str) -> None:
        self.prog = prog
        super().__init__(f"{message} (see {prog} --help)")


class _Parser(argparse.ArgumentParser):
    """argparse with its errors raised, not printed (one line in :func:`main`); every
    subcommand's parser is one too (argparse makes them of their parent's class) and
    records its name, for the message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(specops_prog=self.prog)

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


class UnknownCommand(UsageError):
    """A first word that no command of this install has: a built-in one, or one another
    installed distribution adds (:data:`COMMAND_GROUP`)."""

    def __init__(self, name: str, commands: dict[str, str]) -> None:
        valid = ", ".join(commands)
        super().__init__(
            "specops",
            f"argument COMMAND: unknown command '{name}' (choose from {valid}; another "
            f"distribution's commands, such as `lab` of specops-lab, exist once it is "
            f"installed: entry-point group {COMMAND_GROUP})",
        )


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = _Parser(prog="specops", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in argv if not a.startswith("-")), None)
    # A built-in command reads no entry points (the rollout's per-node steps start fast).
    commands = COMMANDS if first in COMMANDS else all_commands()
    if first is not None and first not in commands:
        raise UnknownCommand(first, commands)
    names = (commands[first],) if first is not None else tuple(dict.fromkeys(commands.values()))
    for name in names:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if _version_only(args_in):
        print(f"specops {__version__}")
        return 0
    try:
        require(__version__)
    except CollectionError as exc:  # one line already; specops.errors needs the collection
        print(f"specops: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _main(args_in)
    except KeyboardInterrupt:
        print("specops: interrupted", file=sys.stderr)
        return 130


def _main(args_in: list[str]) -> int:
    from specops.errors import SpecopsError  # noqa: PLC0415 - the collection's, found now

    try:
        parser = build_parser(args_in)
    except UnknownCommand as exc:
        return _fail(exc.prog, "error", str(exc), EXIT_BAD_INPUT)
    try:
        args = parser.parse_args(args_in)
    except UsageError as exc:
        return _fail(exc.prog, "error", str(exc), EXIT_BAD_INPUT)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:  # `specops` alone (every command group requires its subcommand)
        parser.print_help()
        return 0
    prog = str(getattr(args, "specops_prog", "specops"))
    try:
        return func(args)
    except SpecopsError as exc:
        return _fail(prog, "error", str(exc), EXIT_BAD_INPUT)
    except Exception as exc:
        if os.environ.get("SPECOPS_TRACEBACK"):
            raise
        text = f"{type(exc).__name__}: {exc}"
        return _fail(
            prog, "internal error", f"{text} (a bug in specops; SPECOPS_TRACEBACK=1 shows it)",
            EXIT_INTERNAL,
        )  # fmt: skip


def _version_only(args: Sequence[str]) -> bool:
    """``specops --version`` (with no command): answered before the collection is looked
    for, so that an install can be checked before the collection is there."""
    return "--version" in args and all(a.startswith("-") for a in args)


def _fail(prog: str, kind: str, message: str, code: int) -> int:
    from specops.errors import one_line  # noqa: PLC0415 - the collection is there by now

    print(f"{prog}: {kind}: {one_line(message)}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
