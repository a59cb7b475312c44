"""Inventory validation: what every playbook's preflight checks before anything changes.

Roles validate their own inputs through ``meta/argument_specs.yml``; this module checks
what no single role can see: how hosts relate. A serving container names its PVE node
(``pve_container_node``, which must be in ``pve_nodes``) and its vmid
(``pve_container_vmid``, unique in the fleet); its speculative profile must be one its
engine can serve. Each problem is one line that names the host and the variable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specops.errors import SpecopsError, ValidationError
from specops.speculative import Engine, SpeculativeProfile, known_versions, to_argv
from specops.speculative.engines import ENGINE_NAMES

__all__ = ["REQUIRED_GROUPS", "inventory_problems"]

REQUIRED_GROUPS = ("pve_nodes", "serving")


def _serving_problems(
    host: str, hv: Mapping[str, Any], nodes: Sequence[str], vmids: dict[int, str]
) -> list[str]:
    problems: list[str] = []
    node = hv.get("pve_container_node")
    if node is None:
        problems.append(f"{host}: pve_container_node is not set (one of: {', '.join(nodes)})")
    elif node not in nodes:
        problems.append(
            f"{host}: pve_container_node: {node!r} is not in group pve_nodes "
            f"(have: {', '.join(nodes) or 'none'})"
        )
    vmid = hv.get("pve_container_vmid")
    if vmid is None:
        problems.append(f"{host}: pve_container_vmid is not set (an integer 100-999999999)")
    elif not isinstance(vmid, int) or isinstance(vmid, bool) or not 100 <= vmid <= 999999999:
        problems.append(f"{host}: pve_container_vmid: must be an integer 100-999999999 ({vmid!r})")
    elif vmid in vmids:
        problems.append(f"{host}: pve_container_vmid: {vmid} is also used by {vmids[vmid]}")
    else:
        vmids[vmid] = host
    engine = hv.get("inference_service_engine")
    version = hv.get("inference_service_engine_version")
    if "inference_service_speculative" in hv and engine and version:
        try:
            caps = [str(c) for c in hv.get("inference_service_engine_capabilities") or ()]
            profile = SpeculativeProfile.from_mapping(
                hv["inference_service_speculative"], prefix="inference_service_speculative"
            )
            # A version with no recorded flag list (vLLM 0.20.1, a PR build) is checked
            # on the node against the installed build's own flags; here, its shape only.
            if str(engine) not in ENGINE_NAMES or _recorded(str(engine), str(version)):
                to_argv(profile, Engine.parse(str(engine), str(version), caps))
        except ValidationError as exc:
            # The translator names profile fields ``speculative.*``: say the variable.
            field = exc.field
            if field.startswith("speculative"):
                field = "inference_service_speculative" + field.removeprefix("speculative")
            problems.append(f"{host}: {field}: {exc.problem}")
        except SpecopsError as exc:
            problems.append(f"{host}: {exc}")
    return problems


def _recorded(engine: str, version: str) -> bool:
    """Whether ``engine`` ``version`` has a recorded flag list (else the node checks it)."""
    known = known_versions(engine)
    return version in known or sum(v.startswith(version + ".") for v in known) == 1


def inventory_problems(
    groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Every problem of the inventory, one line each; empty when it is deployable."""
    problems = [
        f"inventory: group {g} is missing (see inventory/example/hosts.yml)"
        for g in REQUIRED_GROUPS
        if g not in groups
    ]
    if problems:
        return problems
    nodes = list(groups["pve_nodes"])
    vmids: dict[int, str] = {}
    for host in groups["serving"]:
        problems.extend(_serving_problems(host, hostvars[host], nodes, vmids))
    return problems
