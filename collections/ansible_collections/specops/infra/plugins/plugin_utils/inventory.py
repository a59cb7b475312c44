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
VM, an address that is on the node) is checked by :func:`node_card_problems` on the node's
GPU facts, read before the first change (``playbooks/preflight-nodes.yml``).

Each serving container's engine is checked as a whole (``module_utils/serving_check.py``,
stated once by its ``inference_engine_*`` variables): the model's pin (the rule the
``inference_engine`` role applies, ``engine_build.model_pin``), the recorded flag list of
that version, the speculative profile, every engine argument, TP x PP against its cards,
``CUDA_VISIBLE_DEVICES``, the context length and the memory fraction.

The roles' own rules run here too, on the controller, when the preflight names the
roles directory (``roles``): their defaults (the model pins) under the host's
variables; each variable the inventory sets is validated against the
``meta/argument_specs.yml`` option that declares it, with Ansible's own
``ArgumentSpecValidator``; and a secret (an option the specs mark ``no_log``, or an
``inference_service_environment`` key the unit refuses) written in plain text is named
with the way to fix it.

It also derives what follows from those relations: :func:`vfio_release_request` says
which cards a PVE node gives from vfio-pci to the host, namely exactly those its
serving containers ask for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultHelper, is_encrypted_file
from ansible_collections.specops.infra.plugins.module_utils.errors import (
    ValidationError,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu import PciAddress
from ansible_collections.specops.infra.plugins.module_utils.gpu_catalogue import CATALOGUE
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    card_state,
    matching_cards,
    select_free,
)
from ansible_collections.specops.infra.plugins.module_utils.service_unit import SECRET_KEY
from ansible_collections.specops.infra.plugins.module_utils.serving_check import (
    Serving,
    serving_problems,
)
from ansible_collections.specops.infra.plugins.module_utils.vfio import (
    VfioReleaseError,
    parse_request,
)

__all__ = [
    "CONTAINER_GPU_VARS",
    "MAX_GPUS",
    "NODE_GPU_VARS",
    "REMOVED_VARS",
    "REQUIRED_GROUPS",
    "NodeRelease",
    "gpu_request_problems",
    "inventory_problems",
    "node_card_problems",
    "role_defaults",
    "secret_problems",
    "spec_options",
    "type_problems",
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
# Variables an older inventory may still set, and what states the fact now (one truth:
# an inventory that still sets them would believe it chose something it did not).
_ONCE = "the engine is stated once, by inference_engine ({}); remove this variable"
REMOVED_VARS = {
    "inference_service_engine": _ONCE.format("inference_engine_engine"),
    "inference_service_engine_version": _ONCE.format(
        "inference_engine_version; empty takes the model's pin"
    ),
    "inference_service_engine_capabilities": _ONCE.format("inference_engine_capabilities"),
}


def _model_problem(model: str) -> str | None:
    """Why ``model`` names no card (None when it does): the node's rule
    (``gpu_select.matching_cards``) over the catalogue's products; a PCI id of a card
    the catalogue lacks is the node's to find."""
    if _PCI_ID.match(model):
        return None
    products = [{"name": p.name, "pci_id": p.pci_id} for p in CATALOGUE]
    try:
        matching_cards(products, model, node="the GPU catalogue")
    except GpuSelectError as exc:  # the nearest names first, then the catalogue
        return exc.problem + "; a card the catalogue lacks is asked for by its PCI id"
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
    host: str,
    hv: Mapping[str, Any],
    nodes: Sequence[str],
    vmids: dict[int, str],
    defaults: Mapping[str, Any] | None = None,
    *,
    cards_known: bool = True,
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
    if hv.get("inference_engine_engine"):
        serving = Serving.from_vars(hv, defaults or {})
        if not cards_known:  # a card request that is refused: no count to divide
            serving = replace(serving, cards=None)
        problems.extend(f"{host}: {name}: {text}" for name, text in serving_problems(serving))
    return problems


# ---------------------------------------------------------------------------------------
# The roles' own rules, on the controller (``roles``: the repository's roles directory).

_LOADER = DataLoader()


@cache
def _role_file(roles: Path, role: str, name: str) -> Any:
    """A role's YAML file as Ansible loads it (templates trusted, as in a play)."""
    path = roles / role / name
    return _LOADER.load_from_file(str(path), trusted_as_template=True) if path.exists() else None


def role_defaults(roles: Path) -> dict[str, Any]:
    """The serving roles' defaults (``inference_engine``'s model pins among them): what a
    host's engine check reads under the host's own variables."""
    merged: dict[str, Any] = {}
    for role in ("inference_engine", "inference_service"):
        merged.update(_role_file(roles, role, "defaults/main.yml") or {})
    return merged


@cache
def spec_options(roles: Path) -> dict[str, dict[str, Any]]:
    """Every role variable its ``meta/argument_specs.yml`` declares (entry point
    ``main``), with its option spec; variable names are role-prefixed, so one role each."""
    import yaml  # noqa: PLC0415 (only the preflight reads the specs)

    options: dict[str, dict[str, Any]] = {}
    for path in sorted(roles.glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(path.read_text()) or {}
        main = (specs.get("argument_specs") or {}).get("main") or {}
        options.update((main.get("options") or {}).items())
    return options


def _validator_spec(option: Mapping[str, Any]) -> dict[str, Any]:
    """An option spec as ArgumentSpecValidator takes it: the documentation keys dropped,
    at every level, and the top level not ``required`` (only set variables are checked)."""
    spec = {k: v for k, v in option.items() if k not in ("description", "version_added")}
    if isinstance(spec.get("options"), Mapping):
        spec["options"] = {k: _validator_spec(v) for k, v in spec["options"].items()}
    return spec


def type_problems(
    host: str, values: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Each variable of ``values`` that a role's argument spec declares, validated by
    Ansible's own ``ArgumentSpecValidator`` (types, choices, sub-options: what
    ``validate_argument_spec`` checks when the role starts). One stricter rule: a string
    where a list or a mapping is declared is refused, where Ansible would split it at
    commas (``'--tp-size 2 --x'`` becomes one word) or parse ``k=v``. A vaulted value is
    not read (the role checks it once decrypted)."""
    problems: list[str] = []
    for var in sorted(v for v in values if v in options):
        value, option = values[var], options[var]
        if VaultHelper.get_ciphertext(value, with_tags=False):
            continue  # vaulted: a secret; reading it here would decrypt it
        kind = option.get("type")
        if kind in ("list", "dict") and isinstance(value, str) and "{{" not in value:
            form = "a YAML list, one item each" if kind == "list" else "a YAML mapping"
            problems.append(f"{host}: {var}: must be {form}, not one string (got {value!r})")
            continue
        spec = {var: {**_validator_spec(option), "required": False}}
        result = ArgumentSpecValidator(spec).validate({var: value})
        for error in result.errors:
            problems.append(f"{host}: {var}: {' '.join(str(error).split())}")
    return problems


# A template that reads a secret from the controller's environment or a file keeps it
# out of the inventory; any other template is followed to the variables it reads.
_SAFE_SOURCE = re.compile(
    r"""\b(?:lookup|query|q)\(\s*['"](?:ansible\.builtin\.)?(?:env|file|unvault)['"]"""
)
_QUOTED = re.compile(r"""'[^']*'|"[^"]*\"""")
_NOT_A_VARIABLE = re.compile(r"\|\s*[\w.]+|\.\w+|\b\w+\s*\(")  # filters, attributes, calls
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_JINJA_WORDS = frozenset(
    ("and", "or", "not", "in", "is", "if", "else", "true", "false", "none", "True", "False",
     "None", "recursive")
)  # fmt: skip


def _origin(value: Any) -> tuple[str, int | None] | None:
    """Where an inventory value was written (file, line), from the origin tag Ansible's
    loader puts on it; None when unknown (a value not loaded by Ansible)."""
    try:
        from ansible._internal._datatag._tags import Origin  # noqa: PLC0415
    except ImportError:  # pragma: no cover (ansible-core < 2.19 is refused before)
        return None
    tag = Origin.get_tag(value)
    return (tag.path, tag.line_num) if tag is not None and tag.path else None


def _from_encrypted_file(value: Any) -> bool:
    """Whether ``value`` was written in a vault-encrypted file (group_vars/all/vault.yml)."""
    origin = _origin(value)
    if origin is None:
        return False
    try:
        with open(origin[0], "rb") as fh:
            return bool(is_encrypted_file(fh))
    except OSError:
        return False


def _plain_source(
    name: str, value: Any, raw: Mapping[str, Any], depth: int = 0
) -> tuple[str, Any] | None:
    """Where the secret ``name`` (raw value ``value``) is written in plain text: the
    variable and its value, itself or one its template reads; None when it is kept out
    of the inventory's plain text: empty, vaulted (``!vault``, or written in a
    vault-encrypted file), a template that looks the environment or a file up, or one
    whose variables are all kept so (the ``vault_*`` convention: a variable of the vault
    file), or are not the inventory's (``-e``, undefined: nothing written here)."""
    if VaultHelper.get_ciphertext(value, with_tags=False):  # first: == would decrypt it
        return None
    if not isinstance(value, str):
        return None if value is None else (name, value)
    if "{{" not in value and "{%" not in value:
        return None if not value or _from_encrypted_file(value) else (name, value)
    if _SAFE_SOURCE.search(value):
        return None
    expression = _NOT_A_VARIABLE.sub(" ", _QUOTED.sub(" ", value))
    names = [n for n in dict.fromkeys(_NAME.findall(expression)) if n not in _JINJA_WORDS]
    if not names:
        return (name, value)  # only literals between the braces
    reads = (n for n in names if n in raw and n != name and depth < 5)
    sources = (_plain_source(n, raw[n], raw, depth + 1) for n in reads)
    return next((source for source in sources if source), None)


def _secret_line(host: str, name: str, source: tuple[str, Any]) -> str:
    where = _origin(source[1])
    at = f" (in {where[0]}{f':{where[1]}' if where[1] else ''})" if where else ""
    what = "a secret" if source[0] == name else f"reads {source[0]}, a secret"
    encrypt = (
        f"ansible-vault encrypt_string --name {source[0]}"
        if "." not in source[0]
        else "ansible-vault encrypt_string"
    )
    return (
        f"{host}: {name}: {what} in plain text{at}: encrypt it ({encrypt}, and paste the "
        "!vault value in its place), or read it from the controller's environment "
        "(\"{{ lookup('ansible.builtin.env', 'NAME') }}\") or a vaulted file"
    )


def secret_problems(
    host: str, raw: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Each secret the host's raw (unrendered) variables hold in plain text: an option a
    role's argument spec marks ``no_log`` (a mapping's values each), unless
    :func:`_plain_source` finds it kept; and an ``inference_service_environment`` key
    the unit refuses (``service_unit.SECRET_KEY``: readable by every local user). The
    value is never shown."""
    problems: list[str] = []
    for var in sorted(v for v in raw if options.get(v, {}).get("no_log")):
        value = raw[var]
        if VaultHelper.get_ciphertext(value, with_tags=False):
            continue
        items = (
            [(f"{var}.{k}", v) for k, v in value.items()]
            if isinstance(value, Mapping)
            else [(var, value)]
        )
        for name, item in items:
            source = _plain_source(name, item, raw)
            if source:
                problems.append(_secret_line(host, name, source))
    environment = raw.get("inference_service_environment")
    if isinstance(environment, Mapping):
        for key in sorted(str(k) for k in environment if SECRET_KEY.search(str(k))):
            problems.append(
                f"{host}: inference_service_environment.{key}: a secret in the unit's "
                "Environment= (readable by every local user): move it to "
                "inference_service_secret_environment, vaulted or from the environment"
            )
    return problems


_BATCH = re.compile(r"(?P<n>[0-9]+)(?P<pct>%?)")


def batching_problems(host: str, hv: Mapping[str, Any]) -> list[str]:
    """``specops_host_batch`` (nodes, or a percentage of them) and
    ``specops_host_max_fail_percentage`` (0-100), playbooks/host.yml's batches."""
    problems = []
    if "specops_host_batch" in hv:
        value = hv["specops_host_batch"]
        m = _BATCH.fullmatch(str(value).strip()) if not isinstance(value, bool) else None
        n = int(m["n"]) if m else 0
        if m is None or n < 1 or (m["pct"] and n > 100):
            problems.append(
                f"{host}: specops_host_batch: {value!r} is not a batch size (valid: a number"
                " of nodes >= 1, or a percentage of the nodes '1%'..'100%', which never goes"
                " below one node)"
            )
    if "specops_host_max_fail_percentage" in hv:
        value = hv["specops_host_max_fail_percentage"]
        ok = not isinstance(value, bool) and str(value).strip().isdigit()
        if not ok or not 0 <= int(str(value).strip()) <= 100:
            problems.append(
                f"{host}: specops_host_max_fail_percentage: {value!r} is not a percentage"
                " (valid: an integer 0..100; 0 stops the fleet at the first failed node)"
            )
    return problems


def inventory_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    *,
    raw: Mapping[str, Mapping[str, Any]] | None = None,
    roles: Path | str | None = None,
) -> list[str]:
    """Every problem of the inventory, one line each; empty when it is deployable.

    ``hostvars``: each host's variables as the roles will see them (rendered). ``raw``:
    the same unrendered, as the inventory wrote them (to tell a template that reads a
    vaulted variable from a secret written out; default ``hostvars``). ``roles``: the
    roles directory; given, the roles' own rules run too (their defaults under each
    serving host's engine check, :func:`type_problems`, :func:`secret_problems`). A
    host's problems are listed together (the nodes' first, then each container's)."""
    problems = [
        f"inventory: group {g} is missing (see inventory/example/hosts.yml)"
        for g in REQUIRED_GROUPS
        if g not in groups
    ]
    if problems:
        return problems
    by_host: dict[str, list[str]] = {}
    defaults: dict[str, Any] = {}
    if roles is not None:
        if not (Path(roles) / "inference_engine" / "tasks" / "preflight.yml").is_file():
            return [f"preflight: roles={roles}: not the specops roles directory"]
        by_host = _role_rule_problems(groups, hostvars, raw or hostvars, Path(roles))
        defaults = role_defaults(Path(roles))
        for host in groups["pve_nodes"]:
            problems.extend(by_host.pop(host, []))
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
        problems.extend(by_host.pop(host, []))
        gpu: list[str] = []
        if str(hv.get("lxc_gpu_passthrough_state", "present")) != "absent":
            gpu = gpu_request_problems(host, hv, CONTAINER_GPU_VARS)
        problems.extend(_serving_problems(host, hv, nodes, vmids, defaults, cards_known=not gpu))
        problems.extend(gpu)
        if gpu:
            bad_gpus.add(str(hv.get("pve_container_node")))
    problems.extend(p for p in _node_problems(groups, hostvars, bad_gpus) if p not in problems)
    return problems


def _node_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    bad_gpus: set[str],
) -> list[str]:
    """Each PVE node's batching settings and the cards it releases (its own request, or
    what its containers ask for together); ``bad_gpus``: nodes whose containers' requests
    were already refused."""
    problems: list[str] = []
    for node in groups["pve_nodes"]:
        if node in groups["serving"]:
            continue  # named by the caller
        hv = hostvars.get(node, {})
        problems.extend(batching_problems(node, hv))
        if any(k in hv for k in NODE_GPU_VARS):  # the node's own request stands
            problems.extend(gpu_request_problems(node, hv, NODE_GPU_VARS))
        elif node not in bad_gpus:
            try:  # what its containers ask for together: one way, one model
                vfio_release_request(groups, hostvars, node)
            except ValidationError as exc:
                problems.append(str(exc))
    return problems


def _role_rule_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    raw: Mapping[str, Mapping[str, Any]],
    roles: Path,
) -> dict[str, list[str]]:
    """The roles' rules for every host of pve_nodes and serving, per host: types from the
    argument specs and plain-text secrets."""
    options = spec_options(roles)
    problems: dict[str, list[str]] = {}
    both = set(groups["pve_nodes"]) & set(groups["serving"])
    for host in dict.fromkeys([*groups["pve_nodes"], *groups["serving"]]):
        if host in both:
            continue  # named by the caller
        lines = [
            f"{host}: {old}: no longer read: {new}"
            for old, new in REMOVED_VARS.items()
            if old in raw.get(host, {})
        ]
        lines += type_problems(host, hostvars.get(host, {}), options)
        lines += secret_problems(host, raw.get(host, {}), options)
        problems[host] = lines
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


# ---------------------------------------------------------------------------------------
# What only the node knows: its cards (the facts pass before the first change).

_ALLOW_STOPPED = "vfio_release_allow_stopped_vm_cards"


def _reasons(state_reasons: Sequence[str]) -> str:
    """A card's reasons (``gpu_select.card_state``), the stopped-VM override named as the
    inventory variable that sets it."""
    text = "; ".join(state_reasons)
    return text.replace("set allow_stopped_vm_cards", f"set {_ALLOW_STOPPED}: true")


def _free_text(cards: Sequence[Mapping[str, Any]], allow_stopped: bool) -> str:
    free = [
        f"{c.get('address')} {c.get('name')}"
        for c in cards
        if card_state(c, cards, allow_stopped_vm_cards=allow_stopped).usable
    ]
    return ", ".join(free) or "none"


def node_card_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    node: str,
    facts: Mapping[str, Any],
    *,
    allow_stopped_vm_cards: bool = False,
) -> list[str]:
    """Whether every serving container placed on ``node`` can get its cards, from the
    node's GPU facts (``gpu.gather_facts``, ``ansible_facts.specops_gpu``), by the rule
    the node applies later (``gpu_select``: a card a running VM or a process holds is
    never taken; one a stopped VM keeps only with ``vfio_release_allow_stopped_vm_cards``):

    - each address of ``lxc_gpu_passthrough_gpus`` is an NVIDIA card of the node, free;
    - ``lxc_gpu_passthrough_gpu_model`` is a model the node has, and the counts of the
      node's containers asking for it (summed, as ``vfio_release_request`` sums them) are
      not above the node's cards of that model, nor above its free ones.

    One line per problem, ``<node>: <container>: <variable>: ...``, saying what would be
    valid. A request the controller preflight refuses (malformed, two models on a node)
    is not judged again here. Reads only."""
    cards = [dict(c) for c in facts.get("gpus") or []]
    by_slot = {str(c.get("slot")): c for c in cards}
    have = ", ".join(f"{c.get('address')} {c.get('name')}" for c in cards) or "no NVIDIA card"
    problems: list[str] = []
    models: dict[str, list[tuple[str, int]]] = {}
    for host in sorted(str(h) for h in groups.get("serving", ())):
        hv = hostvars.get(host, {})
        if hv.get("pve_container_node") != node:
            continue
        try:
            addresses, model, count = _wanted(host, hv)
        except ValidationError:
            continue  # the controller preflight names it
        if model:
            models.setdefault(" ".join(model.split()).lower(), []).append((host, count))
            continue
        if not addresses:
            continue  # no card (CPU-only, or lxc_gpu_passthrough_state absent)
        for i, text in enumerate(hv.get("lxc_gpu_passthrough_gpus") or ()):
            where = f"{node}: {host}: lxc_gpu_passthrough_gpus[{i}]"
            try:
                slot = PciAddress.parse_hostpci(str(text)).slot
            except ValueError:
                continue  # malformed: the controller preflight names it
            card = by_slot.get(slot)
            if card is None:
                problems.append(
                    f"{where}: {text} is not an NVIDIA card on {node} (the node has: {have})"
                )
                continue
            state = card_state(card, cards, allow_stopped_vm_cards=allow_stopped_vm_cards)
            if not state.usable:
                problems.append(
                    f"{where}: {_reasons(state.reasons)}; free cards on {node}: "
                    f"{_free_text(cards, allow_stopped_vm_cards)}"
                )
    for asks in models.values():
        problems.extend(_model_problems(node, cards, asks, hostvars, allow_stopped_vm_cards))
    return problems


def _model_problems(
    node: str,
    cards: Sequence[Mapping[str, Any]],
    asks: Sequence[tuple[str, int]],
    hostvars: Mapping[str, Mapping[str, Any]],
    allow_stopped: bool,
) -> list[str]:
    """The lines for the containers of ``node`` that ask for one model (``asks``:
    (container, count) each)."""
    model = str(hostvars[asks[0][0]].get("lxc_gpu_passthrough_gpu_model")).strip()
    total = sum(n for _h, n in asks)
    try:
        matching = matching_cards(cards, model, node=node)
    except GpuSelectError as exc:
        return [f"{node}: {h}: lxc_gpu_passthrough_gpu_model: {exc.problem}" for h, _n in asks]
    selection = select_free(cards, model, total, node=node, allow_stopped_vm_cards=allow_stopped)
    if selection.ok:
        return []
    usable = len(selection.chosen)
    held = f"; {_reasons(selection.refused)}" if selection.refused else ""
    lines = []
    for host, count in asks:
        others = [f"{h} {n}" for h, n in asks if h != host]
        together = f" ({total} with {', '.join(others)})" if others else ""
        if usable == 0:
            valid = "another model or node (none of them is free)"
        else:
            valid = f"{'counts adding up to' if others else 'a count of'} at most {usable}"
            if usable < len(matching):
                valid += f" (up to {len(matching)} once the others are freed)"
            valid += ", or another node"
        lines.append(
            f"{node}: {host}: lxc_gpu_passthrough_gpu_count: asks for {count} {model!r}"
            f"{together}; {node} has {len(matching)} of them, {usable} free{held}; "
            f"valid: {valid}"
        )
    return lines
