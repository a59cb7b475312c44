"""Every module's DOCUMENTATION, EXAMPLES and RETURN is valid YAML (ansible-doc and
ansible-lint read it; a parse error there is only printed, never fatal to the lint), and
says how far it supports check mode and diff mode (``attributes``, what ansible-doc
users read; issue 50), in agreement with its code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted(
    (Path(__file__).resolve().parents[2] / "collections/ansible_collections/specops/infra")
    .joinpath("plugins/modules")
    .glob("*.py")
)


def _blocks(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in (
                    "DOCUMENTATION",
                    "EXAMPLES",
                    "RETURN",
                ):
                    out[target.id] = str(node.value.value)
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documentation_parses(path: Path) -> None:
    blocks = _blocks(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert doc["short_description"]
    yaml.safe_load(blocks["EXAMPLES"])
    yaml.safe_load(blocks["RETURN"])


def test_a_colon_in_a_plain_description_is_caught() -> None:
    broken = "module: x\ndescription:\n  - runs when I(restart) is\n    true: a graceful stop\n"
    with pytest.raises(yaml.YAMLError, match="mapping values are not allowed"):
        yaml.safe_load(broken)


SUPPORT = {"full", "partial", "none", "N/A"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_attributes_say_check_and_diff_mode_as_the_code_does(path: Path) -> None:
    doc = yaml.safe_load(_blocks(path)["DOCUMENTATION"])
    assert "specops.infra.attributes" in doc.get("extends_documentation_fragment", [])
    attributes = doc.get("attributes") or {}
    assert set(attributes) >= {"check_mode", "diff_mode"}, path.name
    check, diff = attributes["check_mode"]["support"], attributes["diff_mode"]["support"]
    assert {check, diff} <= SUPPORT
    code = path.read_text(encoding="utf-8")
    assert (check != "none") == ("supports_check_mode=True" in code), path.name
    # diff mode: the module returns a before/after diff exactly when it says so
    returns_diff = '"diff"' in code or "diff=" in code
    assert (diff in {"full", "partial"}) == returns_diff, path.name
