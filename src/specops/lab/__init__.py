"""The lab: stand-ins for what this machine cannot run (Proxmox VE) over real parts (LXC)."""

from __future__ import annotations

__all__: list[str] = []
