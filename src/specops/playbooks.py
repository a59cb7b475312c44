"""How the controller runs Ansible: the installed collection's playbooks by name.

Every command that runs a playbook (``specops doctor``: ``specops.infra.verify``; the
sweep's applier: ``specops.infra.speculative_apply``) runs Ansible's own command
(:func:`ansible_tool`) with a playbook named by its FQCN, in the operator's working
directory and environment: Ansible then finds the ``ansible.cfg`` (``ANSIBLE_CONFIG``,
``./ansible.cfg``, ``~/.ansible.cfg``), the inventory and the collection as the
operator's own ``ansible-playbook`` does there. Nothing here is a path made from where
this package is installed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from specops.errors import SpecopsError

__all__ = ["ansible_tool"]


def ansible_tool(name: str) -> str:
    """``ansible-playbook`` (or ``name``) of this interpreter's environment (the venv the
    wheel went into), else the one on ``PATH``."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise SpecopsError(
            f"{name} not found beside {sys.executable} nor on PATH (ansible-core, which the"
            " specops wheel requires, installs it: pip install the wheel into this venv)"
        )
    return found
