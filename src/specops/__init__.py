"""specops: Proxmox VE GPU hosts to benchmarked LLM servers with speculative decoding.

Controller-side code lives here (benchmark, sweep, Proxmox API, reports). The lab is
not part of it: it is its own distribution, ``specops-lab`` (under ``lab/``), which
adds ``specops lab`` through the ``specops.commands`` entry points and which this
package never imports.
The collection ``specops.infra`` (``collections/ansible_collections/specops/infra``)
holds the code that runs on managed hosts and the logic its filters need (the
speculative translator, the inventory checks); this package imports it as
``ansible_collections.specops.infra.plugins.*`` from where Ansible finds collections
(:mod:`specops.collection`: a venv's site-packages, ``ANSIBLE_COLLECTIONS_PATH``, the
``ansible.cfg`` in use, the default paths), made importable as this package loads.
"""

from __future__ import annotations

from specops.collection import ensure as _ensure

__all__ = ["__version__"]

# One version for the wheel, the collection and the changelog (scripts/release/release.py bump).
__version__ = "0.2.0"

_ensure()
