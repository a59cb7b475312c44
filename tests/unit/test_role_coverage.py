"""Every role has a molecule scenario, or CONTRIBUTING.md names the test that covers it
("Roles without a molecule scenario"), and that test or scenario exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _table() -> dict[str, list[str]]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("### Roles without a molecule scenario", 1)[1].split("\n## ", 1)[0]
    covered: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        tests = re.findall(r"`((?:tests|molecule)/[^`]+)`", cells[1])
        for role in re.findall(r"`([a-z_]+)`", cells[0]):
            covered[role] = tests
    return covered


def test_every_role_has_a_scenario_or_a_named_test() -> None:
    table = _table()
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    missing = [r for r in roles if not (REPO / "molecule" / r).is_dir() and r not in table]
    assert not missing, (
        f"roles with neither molecule/<role> nor a row in CONTRIBUTING.md: {missing}"
    )
    for role, tests in table.items():
        assert role in roles, f"CONTRIBUTING.md names {role!r}, which is not a role"
        assert tests, f"CONTRIBUTING.md's row for {role!r} names no test"
        for test in tests:
            assert (REPO / test).exists(), f"{role}: {test} does not exist"
