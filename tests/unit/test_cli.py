from __future__ import annotations

import argparse

import pytest

from specops import cli
from specops.errors import ValidationError


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
