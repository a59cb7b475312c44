"""Filters over the whole inventory (logic in ``plugin_utils/inventory.py``; this file only
adapts it to Ansible's hostvars).

    {{ groups | specops.infra.inventory_problems(hostvars, roles=playbook_dir ~ '/../roles') }}
    {{ groups | specops.infra.vfio_release_request(hostvars, inventory_hostname) }}
    {{ groups | specops.infra.node_card_problems(hostvars, inventory_hostname,
                                                 ansible_facts.specops_gpu) }}

``inventory_problems``: one-line problems (empty when the inventory is deployable).
With ``roles`` (the roles directory) the roles' own rules run too. The preflight sees
hostvars rendered; to tell a secret read from vault or the environment from one written
out it also reads each host's variables unrendered, through Ansible's
``HostVars.raw_get`` (the inventory's own values: a ``!vault`` object stays one, a
template stays its text, each with the file it came from). The argument specs' types
are checked on the variables written as literals, taken from those raw values; a value
written as a template is left to the role (it renders where the role runs).
``vfio_release_request``: the cards a PVE node gives from vfio-pci to the host, those
its serving containers ask for (``addresses``, ``model``, ``count``, ``containers``).
``node_card_problems``: whether the containers placed on a PVE node can get their cards,
from the node's GPU facts (one line per problem; empty when they can).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import SpecopsError
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    CONTAINER_GPU_VARS,
    NODE_GPU_VARS,
    spec_options,
)
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    inventory_problems as _problems,
)
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    node_card_problems as _card_problems,
)
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    vfio_release_request as _release,
)

__all__ = ["FilterModule"]

# The variables the checks read; only these are templated out of hostvars.
_KEYS = (
    "pve_container_node",
    "pve_container_vmid",
    "inference_engine_engine",
    "inference_engine_version",
    "inference_engine_model",
    "inference_engine_model_pins",
    "inference_engine_git_ref",
    "inference_engine_git_patches",
    "inference_engine_capabilities",
    "inference_service_speculative",
    "inference_service_engine_args",
    "inference_service_cuda_visible_devices",
    "inference_service_environment",
    "inference_service_drafter_preflight",
    "inference_service_drafter_known",
    "inference_service_drafter_config_sha256",
    *CONTAINER_GPU_VARS,
    "lxc_gpu_passthrough_state",
    *NODE_GPU_VARS,
)


def _templated(value: Any) -> bool:
    """Whether ``value`` holds a template anywhere (a string with ``{{`` or ``{%``)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    if isinstance(value, Sequence):
        return any(_templated(v) for v in value)
    return False


def inventory_problems(
    groups: Mapping[str, Sequence[str]], hostvars: Any, roles: str | None = None
) -> list[str]:
    hosts = {str(h) for g in groups.values() for h in g}
    options = spec_options(Path(roles)) if roles else {}
    plain: dict[str, dict[str, Any]] = {}
    raw: dict[str, dict[str, Any]] = {}
    for host in hosts:
        hv = hostvars[host]
        plain[host] = {k: hv[k] for k in _KEYS if k in hv}
        if roles:
            raw[host] = dict(hostvars.raw_get(host))
            # The argument specs' types are checked on values written as literals (what
            # an operator gets wrong): those need no rendering. A value written as a
            # template is left to the role, which renders it where it runs (rendering
            # it inside this filter can fail for a template that is fine in a task).
            for k in options.keys() & raw[host].keys():
                if k not in plain[host] and not _templated(raw[host][k]):
                    plain[host][k] = raw[host][k]
    return _problems(
        {str(k): [str(h) for h in v] for k, v in groups.items()},
        plain,
        raw=raw or None,
        roles=roles,
    )


# What a container's card request is made of (vfio_release_request).
_GPU_KEYS = (
    "pve_container_node",
    "lxc_gpu_passthrough_gpus",
    "lxc_gpu_passthrough_gpu_model",
    "lxc_gpu_passthrough_gpu_count",
    "lxc_gpu_passthrough_state",
)


def vfio_release_request(
    groups: Mapping[str, Sequence[str]], hostvars: Any, node: str
) -> dict[str, Any]:
    serving = [str(h) for h in groups.get("serving", [])]
    plain: dict[str, dict[str, Any]] = {}
    for host in serving:
        hv = hostvars[host]  # once per host: each lookup builds the host's variables
        plain[host] = {k: hv[k] for k in _GPU_KEYS if k in hv}
    try:
        return _release({"serving": serving}, plain, str(node)).as_vars()
    except SpecopsError as exc:
        # Ansible shows a filter's exception as the task's failure message.
        raise ValueError(str(exc)) from None


def node_card_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Any,
    node: str,
    facts: Mapping[str, Any],
    allow_stopped_vm_cards: bool = False,
) -> list[str]:
    serving = [str(h) for h in groups.get("serving", [])]
    plain: dict[str, dict[str, Any]] = {}
    for host in serving:
        hv = hostvars[host]
        plain[host] = {k: hv[k] for k in _GPU_KEYS if k in hv}
    return _card_problems(
        {"serving": serving},
        plain,
        str(node),
        facts,
        allow_stopped_vm_cards=bool(allow_stopped_vm_cards),
    )


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "inventory_problems": inventory_problems,
            "node_card_problems": node_card_problems,
            "vfio_release_request": vfio_release_request,
        }
