"""The argument-spec gate must catch drift between defaults and specs."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml
from plugins.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "checks" / "check-argument-specs.py"


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    return load_script(f"checks/{SCRIPT.name}")


def make_role(
    root: Path, name: str, defaults: dict[str, object], options: dict[str, object]
) -> Path:
    role = root / name
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    specs = {"argument_specs": {"main": {"options": options}}}
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(specs))
    return role


def test_agreeing_role_passes(checker: ModuleType, tmp_path: Path) -> None:
    role = make_role(
        tmp_path,
        "demo",
        {"demo_port": 8000},
        {
            "demo_port": {"type": "int", "default": 8000, "description": "Port."},
            "demo_vmid": {"type": "int", "required": True, "description": "CT id."},
        },
    )
    assert checker.check_role(role) == []


def test_drift_is_reported_by_name(checker: ModuleType, tmp_path: Path) -> None:
    role = make_role(
        tmp_path,
        "demo",
        {"demo_port": 8000, "port2": 1, "demo_missing": True},
        {
            "demo_port": {"type": "int", "default": 8080, "description": "Port."},
            "demo_opt": {"type": "str", "description": "Optional with no default."},
            "port2": {"type": "int", "default": 1},
        },
    )
    problems = checker.check_role(role)
    assert any("demo_port default differs" in p for p in problems)
    assert any("port2 lacks the role prefix" in p for p in problems)
    assert any("demo_missing has no entry" in p for p in problems)
    assert any("demo_opt is optional in argument_specs but has no default" in p for p in problems)
    assert any("port2 has no description" in p for p in problems)


def test_missing_spec_file(checker: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "bare" / "defaults").mkdir(parents=True)
    assert checker.check_role(tmp_path / "bare") == ["bare: meta/argument_specs.yml is missing"]
