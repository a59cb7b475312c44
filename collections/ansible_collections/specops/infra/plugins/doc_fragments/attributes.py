"""Documentation fragment specops.infra.attributes: what the module attributes mean.

Every module of the collection extends it and says, under ``attributes``, how far it
supports check mode and diff mode (ansible-doc shows both; tests/unit/test_module_docs.py
checks each module has them).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run with C(--check) and then reports whether it would change
      anything, changing nothing.
  diff_mode:
    description: Returns what it changed (or, with C(--check), would change) as a diff
      with C(--diff).
"""
