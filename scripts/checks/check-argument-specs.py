#!/usr/bin/env python3
"""Keep every role's defaults/main.yml and meta/argument_specs.yml in agreement.

For each role: every default has a spec entry with the same value as its `default`,
every spec option without `required: true` has a default, and every public variable
carries the role's prefix. Prints one line per problem; exits 1 if there is any.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path) -> Any:
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def check_role(role: Path) -> list[str]:
    name = role.name
    problems: list[str] = []
    defaults = load(role / "defaults" / "main.yml") or {}
    specs = load(role / "meta" / "argument_specs.yml")
    if specs is None:
        return [f"{name}: meta/argument_specs.yml is missing"]
    options: dict[str, Any] = specs.get("argument_specs", {}).get("main", {}).get("options", {})
    for key in defaults:
        if not key.startswith(f"{name}_"):
            problems.append(f"{name}: default {key} lacks the role prefix '{name}_'")
        if key not in options:
            problems.append(f"{name}: default {key} has no entry in argument_specs")
        elif "default" not in options[key]:
            problems.append(f"{name}: argument_specs {key} has no default (defaults has one)")
        elif options[key]["default"] != defaults[key]:
            problems.append(
                f"{name}: {key} default differs: defaults/main.yml={defaults[key]!r} "
                f"argument_specs={options[key]['default']!r}"
            )
    for key, spec in options.items():
        if not spec.get("description"):
            problems.append(f"{name}: argument_specs {key} has no description")
        if key not in defaults and not spec.get("required", False):
            problems.append(f"{name}: {key} is optional in argument_specs but has no default")
    return problems


def main() -> int:
    roles = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
    problems = [line for role in roles for line in check_role(role)]
    for line in problems:
        print(line)
    print(f"checked {len(roles)} role(s): {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
