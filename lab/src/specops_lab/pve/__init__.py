"""Proxmox VE stand-in for the lab (a TEST STAND-IN: see README.md)."""

from __future__ import annotations

__all__: list[str] = []
