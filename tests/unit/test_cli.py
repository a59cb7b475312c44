from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from plugins.terminal import python_module_argv

from specops import cli
from specops.errors import ValidationError

REPO = Path(__file__).resolve().parents[2]


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    assert "usage: specops" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("specops ")


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


def test_every_command_is_registered_by_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    """The command -> module table is what the modules register (help lists them all)."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    for command in cli.COMMANDS:
        assert command in listed
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        assert exc.value.code == 0
        assert f"usage: specops {command}" in capsys.readouterr().out


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
    """`specops sweep` and `specops rollout` used to exit 0 having done nothing."""
    groups = _groups(cli.build_parser())
    assert ("sweep",) in groups
    assert ("rollout",) in groups
    assert ("lab", "vllm") in groups
    for path in groups:
        with pytest.raises(SystemExit) as exc:
            cli.main(list(path))
        assert exc.value.code == 2, path
        err = capsys.readouterr().err
        assert f"usage: specops {' '.join(path)}" in err, (path, err)
        assert "required" in err, (path, err)


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
            env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'collections'}"},
        )  # fmt: skip
        server.settimeout(60)
        conn, _ = server.accept()  # the client is inside its first request now
        with conn:
            proc.send_signal(signum)
            _out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    # the last line says so, and how to go on (a bench run keeps its finished cells)
    last = err.strip().splitlines()[-1]
    assert last.startswith("specops: interrupted"), err
    assert f"specops bench run --resume {tmp_path}" in last, err
    assert proc.returncode == code
