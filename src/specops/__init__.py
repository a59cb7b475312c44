"""specops: Proxmox VE GPU hosts to benchmarked LLM servers with speculative decoding.

Controller-side code lives here (benchmark, sweep, Proxmox API, reports, the lab).
Code that runs on managed hosts lives in the local collection ``specops.infra``
(``collections/ansible_collections/specops/infra``).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
