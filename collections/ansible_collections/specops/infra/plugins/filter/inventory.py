"""Filter ``specops.infra.inventory_problems``: the preflight's inventory validation.

    {{ groups | specops.infra.inventory_problems(hostvars) }}

Returns a list of one-line problems (empty when the inventory is deployable). The
logic is ``specops.inventory``'s; this file only adapts it to Ansible's hostvars.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specops.inventory import inventory_problems as _problems

__all__ = ["FilterModule"]

# The variables the checks read; only these are templated out of hostvars.
_KEYS = (
    "pve_container_node",
    "pve_container_vmid",
    "inference_service_engine",
    "inference_service_engine_version",
    "inference_service_engine_capabilities",
    "inference_service_speculative",
)


def inventory_problems(groups: Mapping[str, Sequence[str]], hostvars: Any) -> list[str]:
    hosts = {str(h) for g in groups.values() for h in g}
    plain: dict[str, dict[str, Any]] = {}
    for host in hosts:
        hv = hostvars[host]
        plain[host] = {k: hv[k] for k in _KEYS if k in hv}
    return _problems({str(k): [str(h) for h in v] for k, v in groups.items()}, plain)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"inventory_problems": inventory_problems}
