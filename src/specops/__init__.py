"""specops: Proxmox VE GPU hosts to benchmarked LLM servers with speculative decoding.

Controller-side code lives here (benchmark, sweep, Proxmox API, reports, the lab).
The collection ``specops.infra`` (``collections/ansible_collections/specops/infra``)
holds the code that runs on managed hosts and the logic its filters need (the
speculative translator, the inventory checks); this package imports it as
``ansible_collections.specops.infra.plugins.*``, installed where Ansible finds
collections (``scripts/setup.sh venv``: the venv's site-packages ``ansible_collections``).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
