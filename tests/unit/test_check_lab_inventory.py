"""scripts/checks/check-lab-inventory.py: the lab inventory is the example's plus explained
wiring."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def _script():
    return load_script("checks/check-lab-inventory.py")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "inventory", tmp_path / "inventory", symlinks=True)
    return tmp_path


def test_the_repository_explains_every_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main([str(REPO)]) == 0
    out = capsys.readouterr().out
    assert "pve_nodes: specops_host_root: lab only" in out
    assert "keys where inventory/lab differs from inventory/example" in out


def test_an_unexplained_key_fails_and_is_named(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overlay = copy / "inventory/lab/group_vars/serving/lab.yml"
    overlay.write_text(overlay.read_text() + "inference_service_host: 127.0.0.1\n")
    assert _script().main([str(copy)]) == 1
    err = capsys.readouterr().err
    assert "serving: inference_service_host differs from the example with no reason" in err


def test_a_stale_reason_and_a_second_overlay_fail(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allow = copy / "inventory/lab/differences.yml"
    allow.write_text(allow.read_text() + "  inference_service_port: no longer differs\n")
    (copy / "inventory/lab/group_vars/pve_nodes/more.yml").write_text("---\nx: 1\n")
    host = copy / "inventory/lab/host_vars/lab-ct801.yml"
    host.write_text(host.read_text() + "specops_extra_knob: 1\n")
    assert _script().main([str(copy)]) == 1
    err = capsys.readouterr().err
    assert "serving: inference_service_port is listed in differences.yml but does not differ" in err
    assert (
        "group_vars/pve_nodes: only the example link and one overlay (lab.yml); also has more.yml"
        in err
    )
    assert "host_vars/serving: specops_extra_knob differs from the example with no reason" in err


# row id -> (the file broken, its text, where the error is: line:column)
SYNTAX_ROWS = {
    "overlay": ("inventory/lab/group_vars/serving/lab.yml", "a: [1, 2\nb: 1\n", "2:2"),
    "host-vars": ("inventory/lab/host_vars/lab-ct801.yml", "a: 1\n  b: 2\n", "2:4"),
    "example-group-vars": ("inventory/example/group_vars/all/host.yml", "a: 'open\n", "2:1"),
    "allowlist": ("inventory/lab/differences.yml", "- [\n", "2:1"),
}


@pytest.mark.parametrize(("relative", "text", "line"), SYNTAX_ROWS.values(), ids=SYNTAX_ROWS)
def test_a_file_that_does_not_parse_is_named_with_its_line(
    copy: Path, capsys: pytest.CaptureFixture[str], relative: str, text: str, line: str
) -> None:
    """Issue 36: a YAML syntax error in the inventory was a traceback naming no file."""
    (copy / relative).write_text(text)
    assert _script().main([str(copy)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"PROBLEM {copy / relative}:{line}: YAML syntax error: "), err
