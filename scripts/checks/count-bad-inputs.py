#!/usr/bin/env python3
"""Count the bad-input test rows by where they are refused and by family.

Reads the tables themselves (each test module's row dictionary, imported as pytest
imports it), so the counts in docs/bad-input.md are what the suite runs:

    .venv/bin/python scripts/checks/count-bad-inputs.py [--markdown]

Each table is (where the input is refused, the test file, its table, how a row names
its family).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def _first(label: str) -> Callable[[Any], str]:
    return lambda row: f"{label}: {row[0]}"


def _attr(label: str) -> Callable[[Any], str]:
    return lambda row: f"{label}: {row.family}"


def _named(family: str) -> Callable[[Any], str]:
    return lambda _row: family


# (where, test file under tests/, table name, the family of a row)
TABLES: tuple[tuple[str, str, str, Callable[[Any], str]], ...] = (
    ("controller preflight", "unit/test_inventory_gpu_requests.py", "ROWS",
     _first("GPU request")),
    ("controller preflight", "unit/test_inventory_role_rules.py", "ROWS",
     _first("roles' rules")),
    ("controller preflight", "unit/test_inventory_role_rules.py", "SYNTAX_ROWS",
     _named("inventory file syntax (ansible-playbook)")),
    ("controller preflight", "unit/test_migrate_inputs.py", "ROWS",
     _first("migrate.yml's first play")),
    ("node facts pass", "unit/test_node_card_facts.py", "ROWS", _first("cards on the node")),
    ("CLI", "unit/test_cli_bad_input.py", "ROWS", _attr("specops")),
    ("CLI", "unit/test_check_lab_inventory.py", "SYNTAX_ROWS",
     _named("inventory file syntax (check-lab-inventory.py)")),
)  # fmt: skip


def _module(relative: str) -> ModuleType:
    path = TESTS / relative
    spec = importlib.util.spec_from_file_location(f"_count_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _plugins_package() -> None:
    """The tables' modules import the suite's helpers as pytest's rootdir makes them
    importable (``plugins.problems``): the package is registered from its file, as
    :func:`_module` loads the tables; ``specops`` and the collection come from the
    installed venv (``scripts/setup.sh venv``), no path is added."""
    if "plugins" in sys.modules:
        return
    init = TESTS / "plugins" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "plugins", init, submodule_search_locations=[str(init.parent)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["plugins"] = module
    spec.loader.exec_module(module)


def counts() -> dict[tuple[str, str], int]:
    """(where, family) -> the number of rows."""
    _plugins_package()
    found: Counter[tuple[str, str]] = Counter()
    modules: dict[str, ModuleType] = {}
    for where, relative, table, family in TABLES:
        module = modules.setdefault(relative, _module(relative))
        for row in getattr(module, table).values():
            found[(where, family(row))] += 1
    return dict(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    found = counts()
    order = {where: i for i, (where, *_rest) in enumerate(TABLES)}
    rows = sorted(found.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    if args.markdown:
        print("| where refused | family | rows |\n| --- | --- | ---: |")
    for (where, family), n in rows:
        print(f"| {where} | {family} | {n} |" if args.markdown else f"{where}\t{family}\t{n}")
    by_where = Counter[str]()
    for (where, _family), n in found.items():
        by_where[where] += n
    total = sum(found.values())
    summary = ", ".join(f"{w} {n}" for w, n in sorted(by_where.items(), key=lambda i: order[i[0]]))
    print(f"\n{total} rows: {summary}" if args.markdown else f"total\t{total}\t({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
