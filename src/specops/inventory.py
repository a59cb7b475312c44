"""Inventory validation: what every playbook's preflight checks before anything changes.

Roles validate their own inputs through ``meta/argument_specs.yml``; this module checks
what no single role can see: how hosts relate. A serving container names its PVE node
(``pve_container_node``, which must be in ``pve_nodes``) and its vmid
(``pve_container_vmid``, unique in the fleet); its speculative profile must be one its
engine can serve. Each problem is one line that names the host and the variable.

GPU requests are checked here too, with the code the node runs later
(``module_utils/vfio.parse_request``: addresses, address or model; ``gpu_select``'s one
model rule, matched against the GPU catalogue): a container's
``lxc_gpu_passthrough_gpus`` / ``_gpu_model`` / ``_gpu_count`` and a node's
``vfio_release_addresses`` / ``_model`` / ``_count``. A model is a catalogue product
name (did-you-mean when near one) or any PCI ``vendor:device`` id; a count an integer
1-16 (``MAX_GPUS``). What only the node knows (enough free cards of that model, none held by a
VM) is left to the node.

It also derives what follows from those relations: :func:`vfio_release_request` says
which cards a PVE node gives from vfio-pci to the host, namely exactly those its
serving containers ask for.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.gpu_catalogue import CATALOGUE
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    matching_cards,
)
from ansible_collections.specops.infra.plugins.module_utils.vfio import (
    VfioReleaseError,
    parse_request,
)

from specops.errors import SpecopsError, ValidationError
from specops.speculative import Engine, SpeculativeProfile, known_versions, to_argv
from specops.speculative.engines import ENGINE_NAMES

__all__ = [
    "CONTAINER_GPU_VARS",
    "MAX_GPUS",
    "NODE_GPU_VARS",
    "REQUIRED_GROUPS",
    "NodeRelease",
    "gpu_request_problems",
    "inventory_problems",
    "vfio_release_request",
]

REQUIRED_GROUPS = ("pve_nodes", "serving")
MAX_GPUS = 16  # cards one request may ask for (no PVE node holds more; 64 is a typo)

# A request's three variables: (addresses, model, count), a container's and a node's.
CONTAINER_GPU_VARS = (
    "lxc_gpu_passthrough_gpus", "lxc_gpu_passthrough_gpu_model", "lxc_gpu_passthrough_gpu_count",
)  # fmt: skip
NODE_GPU_VARS = ("vfio_release_addresses", "vfio_release_model", "vfio_release_count")
_PCI_ID = re.compile(r"^\s*[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\s*$")


def _model_problem(model: str) -> str | None:
    """Why ``model`` names no card (None when it does): the node's rule
    (``gpu_select.matching_cards``) over the catalogue's products; a PCI id of a card
    the catalogue lacks is the node's to find."""
    if _PCI_ID.match(model):
        return None
    products = [{"name": p.name, "pci_id": p.pci_id} for p in CATALOGUE]
    try:
        matching_cards(products, model, node="the GPU catalogue")
    except GpuSelectError as exc:
        problem = exc.problem
        if "did you mean" not in problem:
            near = difflib.get_close_matches(model, [p.name for p in CATALOGUE], n=1, cutoff=0.7)
            problem += f"; did you mean {near[0]!r}?" if near else ""
        return problem + "; a card the catalogue lacks is asked for by its PCI id"
    return None


def _count_problem(count: Any) -> str | None:
    """Why ``count`` is no card count (None when it is): an integer 1-MAX_GPUS; a string
    of digits counts (``-e`` gives strings)."""
    value = count
    if isinstance(count, str) and count.strip().isdigit():
        value = int(count)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
        return f"must be an integer 1-{MAX_GPUS} (got {count!r})"
    return None


def gpu_request_problems(host: str, hv: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """Every problem of one GPU request, ``names`` its (addresses, model, count)
    variables: each malformed address, an unknown model, a bad count, an address plus a
    model. One line each, naming the host and the variable."""
    addr_var, model_var, count_var = names
    problems: list[str] = []
    addresses = hv.get(addr_var) or []
    if isinstance(addresses, str) or not isinstance(addresses, Sequence):
        problems.append(f"{host}: {addr_var}: must be a list of PCI addresses (got {addresses!r})")
        addresses = []
    for i, text in enumerate(addresses):
        try:  # the node's normaliser, one address at a time so that each is named
            parse_request(addresses=[str(text)], model=None, count=None)
        except VfioReleaseError as exc:
            problems.append(f"{host}: {addr_var}[{i}]: {str(exc).split(': ', 1)[1]}")
    model = hv.get(model_var) or ""
    if not isinstance(model, str):
        problems.append(f"{host}: {model_var}: must be a product name or PCI id (got {model!r})")
        model = ""
    elif model.strip():
        why = _model_problem(model)
        if why:
            problems.append(f"{host}: {model_var}: {why}")
    if count_var in hv and (model.strip() or hv[count_var] not in (None, "")):
        why = _count_problem(hv[count_var])
        if why:
            problems.append(f"{host}: {count_var}: {why}")
    if addresses and model.strip():
        try:
            parse_request(addresses=[str(a) for a in addresses], model=model, count=1)
        except VfioReleaseError:
            problems.append(
                f"{host}: {addr_var}: give the cards by address or by {model_var}, not both"
            )
    return problems


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
    bad_gpus: set[str] = set()  # nodes with a container whose request is wrong
    for host in groups["serving"]:
        if host in nodes:  # one host cannot be both: say that, not what follows from it
            problems.append(
                f"{host}: is in both groups pve_nodes and serving: a PVE node (the host) and"
                " a serving container (an LXC on a node) are two inventory hosts; keep it in one"
            )
            continue
        hv = hostvars[host]
        problems.extend(_serving_problems(host, hv, nodes, vmids))
        if str(hv.get("lxc_gpu_passthrough_state", "present")) != "absent":
            gpu = gpu_request_problems(host, hv, CONTAINER_GPU_VARS)
            problems.extend(gpu)
            if gpu:
                bad_gpus.add(str(hv.get("pve_container_node")))
    for node in nodes:
        if node in groups["serving"]:
            continue  # named above
        hv = hostvars.get(node, {})
        if any(k in hv for k in NODE_GPU_VARS):  # the node's own request stands
            problems.extend(gpu_request_problems(node, hv, NODE_GPU_VARS))
        elif node not in bad_gpus:
            try:  # what its containers ask for together: one way, one model
                vfio_release_request(groups, hostvars, node)
            except ValidationError as exc:
                problems.append(str(exc))
    return problems


@dataclass(frozen=True)
class NodeRelease:
    """The cards a node's ``vfio_release`` gives to the host: by ``addresses``, or
    ``count`` cards of ``model``; nothing when both are empty. ``containers`` names the
    serving hosts the request comes from."""

    addresses: tuple[str, ...] = ()
    model: str = ""
    count: int = 0
    containers: tuple[str, ...] = field(default_factory=tuple)

    def as_vars(self) -> dict[str, Any]:
        """The role's variables (``vfio_release_addresses``/``_model``/``_count``)."""
        return {
            "addresses": list(self.addresses),
            "model": self.model,
            "count": self.count,
            "containers": list(self.containers),
        }


def _wanted(host: str, hv: Mapping[str, Any]) -> tuple[tuple[str, ...], str, int]:
    """What one container asks for: (addresses, model, count); empty when no card."""
    if str(hv.get("lxc_gpu_passthrough_state", "present")) == "absent":
        return (), "", 0
    gpus = hv.get("lxc_gpu_passthrough_gpus") or []
    if isinstance(gpus, str) or not isinstance(gpus, Sequence):
        raise ValidationError(
            f"{host}: lxc_gpu_passthrough_gpus", f"must be a list of PCI addresses (got {gpus!r})"
        )
    model = str(hv.get("lxc_gpu_passthrough_gpu_model") or "").strip()
    if gpus and model:
        raise ValidationError(
            f"{host}: lxc_gpu_passthrough_gpus",
            "give the cards by address or by lxc_gpu_passthrough_gpu_model, not both",
        )
    if gpus:
        return tuple(str(a).strip().lower() for a in gpus), "", 0
    if not model:
        return (), "", 0
    count = hv.get("lxc_gpu_passthrough_gpu_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        try:
            count = int(str(count))
        except ValueError:
            count = 0
        if count < 1:
            raise ValidationError(
                f"{host}: lxc_gpu_passthrough_gpu_count",
                f"must be an integer >= 1 (got {hv.get('lxc_gpu_passthrough_gpu_count')!r})",
            )
    return (), model, count


def vfio_release_request(
    groups: Mapping[str, Sequence[str]], hostvars: Mapping[str, Mapping[str, Any]], node: str
) -> NodeRelease:
    """Which cards ``node`` gives from vfio-pci to the host: the cards its serving
    containers (``pve_container_node == node``) ask for through
    ``lxc_gpu_passthrough_gpus`` (addresses, united) or ``lxc_gpu_passthrough_gpu_model``
    and ``_gpu_count`` (counts of one model, summed). Nothing when no container on the
    node asks for a card. A node whose containers ask by address and by model, or for
    two models, cannot be said as one request: that is an error naming the hosts."""
    addresses: list[str] = []
    models: dict[str, list[str]] = {}
    count = 0
    by_address: list[str] = []
    for host in sorted(groups.get("serving", ())):
        hv = hostvars.get(host, {})
        if hv.get("pve_container_node") != node:
            continue
        wanted, model, n = _wanted(host, hv)
        if wanted:
            by_address.append(host)
            addresses.extend(a for a in wanted if a not in addresses)
        elif model:
            models.setdefault(model, []).append(host)
            count += n
    containers = tuple(sorted({*by_address, *(h for hs in models.values() for h in hs)}))
    if by_address and models:
        raise ValidationError(
            f"{node}: vfio_release",
            f"its containers ask for cards by address ({', '.join(by_address)}) and by model "
            f"({', '.join(h for hs in models.values() for h in hs)}); give them all "
            "lxc_gpu_passthrough_gpus, or set vfio_release_addresses for the node",
        )
    if len(models) > 1:
        listing = "; ".join(f"{m}: {', '.join(hs)}" for m, hs in sorted(models.items()))
        raise ValidationError(
            f"{node}: vfio_release",
            f"its containers ask for more than one model ({listing}); give them "
            "lxc_gpu_passthrough_gpus (addresses), or set vfio_release_addresses for the node",
        )
    if addresses:
        return NodeRelease(addresses=tuple(addresses), containers=containers)
    if models:
        return NodeRelease(model=next(iter(models)), count=count, containers=containers)
    return NodeRelease()
