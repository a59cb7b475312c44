"""specops: Proxmox VE GPU hosts to benchmarked LLM servers with speculative decoding.

Controller-side code lives here (benchmark, sweep, Proxmox API, reports, the lab).
Code that runs on managed hosts lives in the local collection ``specops.infra``
(``collections/ansible_collections/specops/infra``).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["__version__"]

__version__ = "0.1.0"

# The one place that makes the checkout's collection importable for controller code
# (``ansible_collections.specops.infra.plugins.module_utils.*``) however the CLI was
# started: Ansible and pytest find it on their own; ``python -m specops`` does not.
_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if (_COLLECTIONS / "ansible_collections" / "specops").is_dir() and str(
    _COLLECTIONS
) not in sys.path:
    sys.path.append(str(_COLLECTIONS))
