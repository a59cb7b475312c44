from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
from plugins.terminal import python_module_argv

import specops
from specops import cli
from specops.errors import ValidationError

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    assert "usage: specops" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"specops {specops.__version__}\n"
    # Named after a command, it is that command's (which has none): a usage error.
    assert cli.main(["bench", "--version"]) == 2
    assert "specops bench: error:" in capsys.readouterr().err


def test_validation_error_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(_: argparse.Namespace) -> int:
        raise ValidationError("speculative.num_steps", "must be >= 1 (got 0)")

    def build(argv: object = ()) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="specops")
        sub = parser.add_subparsers()
        sub.add_parser("boom").set_defaults(func=fail)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "specops: error: speculative.num_steps: must be >= 1 (got 0)\n"


def test_the_error_names_the_subcommand_and_stays_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message with line breaks (a library's) is still one line, after the command."""

    def fail(_: argparse.Namespace) -> int:
        raise ValidationError("config", "bad YAML:\n  in line 2\n\n    ^")

    def build(argv: object = ()) -> argparse.ArgumentParser:
        parser = cli._Parser(prog="specops")
        sub = parser.add_subparsers()
        group = sub.add_parser("sweep").add_subparsers()
        group.add_parser("plan").set_defaults(func=fail)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    assert cli.main(["sweep", "plan"]) == 2
    assert capsys.readouterr().err == (
        "specops sweep plan: error: config: bad YAML:; in line 2; ^\n"
    )


@pytest.mark.parametrize("traceback_wanted", [False, True])
def test_a_bug_is_one_line_and_exit_70_unless_the_traceback_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], traceback_wanted: bool
) -> None:
    """An exception no check foresaw is a bug: one line naming it, exit 70 (never 1,
    which commands give a result, nor 2, bad input); SPECOPS_TRACEBACK=1 shows it."""

    def fail(_: argparse.Namespace) -> int:
        return {"a": 1}["b"]

    def build(argv: object = ()) -> argparse.ArgumentParser:
        parser = cli._Parser(prog="specops")
        parser.add_subparsers().add_parser("boom").set_defaults(func=fail)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    if traceback_wanted:
        monkeypatch.setenv("SPECOPS_TRACEBACK", "1")
        with pytest.raises(KeyError):
            cli.main(["boom"])
        return
    monkeypatch.delenv("SPECOPS_TRACEBACK", raising=False)
    assert cli.main(["boom"]) == cli.EXIT_INTERNAL == 70
    assert capsys.readouterr().err == (
        "specops boom: internal error: KeyError: 'b' (a bug in specops; SPECOPS_TRACEBACK=1"
        " shows it)\n"
    )


def test_every_command_is_registered_by_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    """The command -> module table is what the modules register (help lists them all)."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    for command in cli.all_commands():
        assert command in listed
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        assert exc.value.code == 0
        assert f"usage: specops {command}" in capsys.readouterr().out


def test_the_lab_registers_its_command_through_the_entry_point_group() -> None:
    """`specops lab` comes from the lab's distribution (lab/pyproject.toml), not from a
    name in the product: its entry names the module that registers ``lab``."""
    table = tomllib.loads((REPO / "lab/pyproject.toml").read_text(encoding="utf-8"))
    group = table["project"]["entry-points"][cli.COMMAND_GROUP]
    assert group == {"lab": "specops_lab.cli"}
    assert "lab" not in cli.COMMANDS
    assert "specops_lab" not in (REPO / "src/specops/cli.py").read_text(encoding="utf-8")
    parser = cli._Parser(prog="specops")
    importlib.import_module(group["lab"]).register(parser.add_subparsers())
    assert parser.parse_args(["lab", "vllm", "status"]).specops_prog == "specops lab vllm status"


def test_a_command_of_an_installed_distribution_runs(tmp_path: Path) -> None:
    """Any distribution's entry in specops.commands is a command (a real dist-info on
    the path, read by importlib.metadata as an install's)."""
    info = tmp_path / "specops_hello-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specops-hello\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[specops.commands]\nhello = specops_hello\n")
    (tmp_path / "specops_hello.py").write_text(
        "def register(sub):\n"
        "    p = sub.add_parser('hello', help='says hello')\n"
        "    p.set_defaults(func=lambda args: print('hello from a distribution') or 3)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{tmp_path}"}
    run = subprocess.run(python_module_argv("specops.cli", "hello"), env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert (run.returncode, run.stdout) == (3, "hello from a distribution\n"), run.stderr
    listed = subprocess.run(python_module_argv("specops.cli", "--help"), env=env,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "says hello" in listed


def test_without_the_lab_installed_lab_is_an_unknown_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's install (the product alone): one line that says what is valid."""
    monkeypatch.setattr(cli.importlib.metadata, "entry_points", lambda group: [])
    assert cli.main(["lab", "up"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "specops: error: argument COMMAND: unknown command 'lab' (choose from profile, bench, "
        "migrate, sweep, rollout, doctor; "
    ), err
    assert "entry-point group specops.commands" in err
    assert err.count("\n") == 1, err


def _groups(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path whose parser has subcommands (``("sweep",)``, ``("lab", "vllm")``)."""
    found: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if path:
                found.append(path)
            for name, child in action.choices.items():
                found.extend(_groups(child, (*path, name)))
    return found


def test_a_group_without_its_subcommand_fails_with_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`specops sweep` and `specops rollout` used to exit 0 having done nothing; the
    usage error is one line that says where the usage is."""
    groups = _groups(cli.build_parser())
    assert ("sweep",) in groups
    assert ("rollout",) in groups
    assert ("lab", "vllm") in groups
    for path in groups:
        assert cli.main(list(path)) == 2, path
        err = capsys.readouterr().err
        name = f"specops {' '.join(path)}"
        assert err.startswith(f"{name}: error: the following arguments are required: "), err
        assert err.endswith(f" (see {name} --help)\n"), err
        assert err.count("\n") == 1, err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stop_signal_ends_without_a_traceback(tmp_path: Path, signum: int, code: int) -> None:
    """A real SIGINT (Ctrl-C) or SIGTERM (systemd, timeout) to `specops bench run`
    waiting on a server that never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            python_module_argv("specops.cli", "bench", "run", "--base-url",
             f"http://127.0.0.1:{port}", "--model", "m", "--concurrency", "1",
             "--context-lengths", "1K", "--output-len", "8", "--requests-per-cell", "1",
             "--out", str(tmp_path)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
        )  # fmt: skip
        server.settimeout(60)
        conn, _ = server.accept()  # the client is inside its first request now
        with conn:
            proc.send_signal(signum)
            _out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    # the last line says so; the server never answered its first question, so no run
    # began and no run directory was made (a run stopped later keeps its finished
    # cells and names the --resume: tests/bench/test_runner.py)
    last = err.strip().splitlines()[-1]
    assert last == f"specops: interrupted before the run began; nothing kept under {tmp_path}"
    assert list(tmp_path.iterdir()) == []
    assert proc.returncode == code
