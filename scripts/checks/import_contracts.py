"""An import-linter contract type that import-linter lacks: "these import only the stdlib".

Registered in ``pyproject.toml`` (``[tool.importlinter] contract_types``) and run by
``lint-imports`` in the lint phase of ``scripts/test.sh``. The collection's
``module_utils`` run on managed hosts, where nothing but Python's standard library can
be assumed: a ``stdlib_only`` contract keeps them importing only the standard library
(``sys.stdlib_module_names`` of the Python that runs the check), each other and the
modules ``allowed_modules`` names (``ansible.module_utils``: Ansible ships it with every
module). An import of anything else, ``specops``, the rest of ``ansible`` or a
third-party package, breaks it, with the importing line named.

Option ``source_modules``: the modules (packages: all their descendants) that may
import only the standard library and each other. Option ``allowed_modules`` (optional):
external modules they may import too, with their submodules; the graph squashes an
external package to its top-level name, so the import's own line is what is matched.

The graph must be built with ``include_external_packages = true`` so that standard
library imports are in it at all.
"""

from __future__ import annotations

import re
import sys
from typing import Any, cast

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.imports import Module

__all__ = ["StdlibOnlyContract"]


def _within(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


class StdlibOnlyContract(Contract):
    type_name = "stdlib_only"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        # import-linter replaces the field descriptor with the parsed value.
        sources = {m.name for m in cast("list[Module]", self.source_modules)}
        checked: set[str] = set()
        for source in sources:
            if source not in graph.modules:
                raise ValueError(f"stdlib_only: {source} is not in the graph (root_packages?)")
            checked |= {source} | graph.find_descendants(source)
        stdlib = set(sys.stdlib_module_names)
        allowed = cast("list[str]", self.allowed_modules or [])
        # ``import a.b``, ``from a.b import c``, ``from a.b.c import (`` for each allowed a.b
        allowed_line = re.compile(
            r"^\s*(?:from|import)\s+(?:"
            + "|".join(re.escape(m) for m in allowed or ["(?!)"])
            + r")(?:\.|\s|$)"
        )
        broken: list[dict[str, Any]] = []
        for importer in sorted(checked):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if _within(imported, sources):
                    continue
                # External modules are squashed into the graph under their top-level name.
                if graph.is_module_squashed(imported) and imported.split(".")[0] in stdlib:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                if graph.is_module_squashed(imported):  # only the lines of other modules
                    details = [d for d in details if not allowed_line.match(d["line_contents"])]
                    if not details:
                        continue
                broken.append(
                    {
                        "importer": importer,
                        "imported": imported,
                        "lines": sorted({d["line_number"] for d in details}),
                    }
                )
            if verbose:
                output.verbose_print(verbose, f"stdlib_only: checked {importer}")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            lines = ", ".join(f"l.{n}" for n in item["lines"])
            output.print_error(
                f"{item['importer']} imports {item['imported']} ({lines}): only the"
                " standard library, these modules themselves and the allowed modules may"
                " be imported here"
            )
            output.new_line()
