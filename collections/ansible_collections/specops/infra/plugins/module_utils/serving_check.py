"""One serving container's engine, checked as a whole before anything changes.

The controller preflight (``plugin_utils/inventory.py``) runs :func:`serving_problems`
for every host of group ``serving``, from the inventory alone: the engine the
container's ``inference_engine_*`` variables state (stated once: ``inference_service``
reads the same), its version as the model's pin resolves it, and against that version's
RECORDED flag list (``engine/flag_lists/``; on the node the installed build's own parser
checks the same arguments again before the unit changes):

- the model's pin (an exact release, not older than its ``min``, with its reason);
- a version with no recorded flag list (what to do: extract it);
- the speculative profile (the translator, the one route to the engine's flags);
- every ``inference_service_engine_args`` flag and its arity, type and choices, with the
  nearest flags for a misspelt one (all problems at once, not the first);
- tensor x pipeline (x data, where the data-parallel ranks do not share the tensor-parallel
  cards) parallel size equal to the cards the container gets;
- ``CUDA_VISIBLE_DEVICES`` showing the server exactly those cards, as the container's
  CUDA numbers them (ordinals 0..N-1 or UUIDs; never the host's minors);
- the context length within the model's ``max_position_embeddings`` when it is known (a
  local model directory readable here, or ``max_position_embeddings`` recorded with the
  model's pin);
- the share of GPU memory the engine takes, a fraction 0 < x <= 1;
- the drafter, when the target and the drafter are readable on this machine (a
  directory, or a hub id in its hub cache): the node's drafter preflight
  (``drafter_check``: the known drafters' pinned mask token, target layers, layer types
  and block), before anything is fetched.

Each problem is ``(variable, text)``; the caller puts the host in front. Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.drafter_check import (
    DRAFTER_METHODS,
    HUB_ID,
    default_hub_cache,
    resolve,
)
from ansible_collections.specops.infra.plugins.module_utils.drafter_check import (
    check as drafter_check,
)
from ansible_collections.specops.infra.plugins.module_utils.engine.build import model_pin
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import descriptor
from ansible_collections.specops.infra.plugins.module_utils.engine.source import (
    EngineSourceError,
    parse_patches,
)
from ansible_collections.specops.infra.plugins.module_utils.errors import (
    SpecopsError,
    ValidationError,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import (
    Engine,
    known_versions,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import to_argv

__all__ = [
    "ARGS", "CUDA", "VERSION", "Serving", "human_int", "serving_problems",
    "visible_devices_problems",
]  # fmt: skip

ARGS = "inference_service_engine_args"
CUDA = "inference_service_cuda_visible_devices"
VERSION = "inference_engine_version"
PROFILE = "inference_service_speculative"
_PARALLEL = (
    ("tensor_parallel_size", "TP"), ("pipeline_parallel_size", "PP"),
    ("data_parallel_size", "DP"),
)  # fmt: skip
_EXTRACT = (
    "extract its flag list from the engine's own source with"
    " scripts/tools/extract-engine-flags.py (docs/speculative.md, 'Flag lists: where they come"
    " from'), or pin a version that has one"
)


@dataclass(frozen=True)
class Serving:
    """What the inventory says one container serves (the variables, as written)."""

    engine: str
    version: str = ""
    model: str = ""
    model_revision: str = "main"
    pins: Mapping[str, Any] = field(default_factory=dict)
    git_ref: str = ""
    git_patches: Any = ()
    capabilities: Sequence[str] = ()
    profile: Mapping[str, Any] | None = None
    args: Sequence[Any] = ()
    cuda_visible_devices: str = ""
    environment: Mapping[str, Any] = field(default_factory=dict)
    # Cards the container gets (lxc_gpu_passthrough_gpu_count or its address list);
    # None when it asks for none. ``cards_var`` names where the count comes from.
    cards: int | None = None
    cards_var: str = "lxc_gpu_passthrough_gpu_count"
    # The drafter preflight's inputs (inference_service_drafter_*), and this machine's
    # hub cache: a drafter readable here is checked here, before the node fetches it.
    drafter_preflight: bool = True
    drafter_known: Mapping[str, Any] = field(default_factory=dict)
    drafter_sha256: str = ""
    hub_cache: str = ""

    @classmethod
    def from_vars(cls, hv: Mapping[str, Any], defaults: Mapping[str, Any]) -> Serving:
        """From a host's variables over the roles' defaults (inference_engine's pins)."""

        def get(name: str, default: Any = None) -> Any:
            value = hv.get(name, defaults.get(name, default))
            return default if value is None else value

        cards: int | None = None
        where = "lxc_gpu_passthrough_gpu_count"
        if str(get("lxc_gpu_passthrough_state", "present")) != "absent":
            addresses = get("lxc_gpu_passthrough_gpus", [])
            if isinstance(addresses, list) and addresses:
                cards, where = len(addresses), "lxc_gpu_passthrough_gpus"
            elif str(get("lxc_gpu_passthrough_gpu_model", "")).strip():
                count = get("lxc_gpu_passthrough_gpu_count", 1)
                cards = int(count) if str(count).strip().isdigit() else None
        environment = get("inference_service_environment", {})
        return cls(
            engine=str(get("inference_engine_engine", "")),
            version=str(get("inference_engine_version", "") or ""),
            model=str(get("inference_engine_model", "") or ""),
            model_revision=str(get("inference_engine_model_revision", "main") or "main"),
            pins=get("inference_engine_model_pins", {}),
            git_ref=str(get("inference_engine_git_ref", "") or ""),
            git_patches=get("inference_engine_git_patches", []),
            capabilities=[str(c) for c in get("inference_engine_capabilities", []) or []],
            profile=get(PROFILE, None),
            args=get(ARGS, []),
            cuda_visible_devices=str(get(CUDA, "") or ""),
            environment=environment if isinstance(environment, Mapping) else {},
            cards=cards,
            cards_var=where,
            drafter_preflight=bool(get("inference_service_drafter_preflight", True)),
            drafter_known=get("inference_service_drafter_known", {}) or {},
            drafter_sha256=str(get("inference_service_drafter_config_sha256", "") or ""),
            hub_cache=default_hub_cache(),
        )


def human_int(text: str) -> int | None:
    """An engine's human-readable integer (``131072``, ``128k`` = 128000, ``128K`` =
    131072, ``1m``, ``1M``), or None for anything else (``auto``, ``-1``: the engine's own)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*", str(text))
    if match is None:
        return None
    scale = {"": 1, "k": 10**3, "K": 2**10, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}
    return int(float(match.group(1)) * scale[match.group(2)])


def _max_positions(s: Serving) -> tuple[int | None, str]:
    """The model's context limit and where it was read, or None."""
    if s.model.startswith("/"):
        try:
            with open(os.path.join(s.model, "config.json"), encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError):
            config = None
        if isinstance(config, Mapping):
            text = config.get("text_config")
            text = text if isinstance(text, Mapping) else config
            value = text.get("max_position_embeddings")
            if isinstance(value, int) and not isinstance(value, bool):
                return value, f"{s.model}/config.json"
    entry = s.pins.get(s.model) if isinstance(s.pins, Mapping) else None
    value = entry.get("max_position_embeddings") if isinstance(entry, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value, "its entry in inference_engine_model_pins"
    return None, ""


def _flag(values: Mapping[str, list[str]], dest: str) -> str | None:
    found = values.get(dest)
    return found[-1] if found else None


def _sizes(values: Mapping[str, list[str]]) -> dict[str, int]:
    out = {}
    for dest, label in _PARALLEL:
        text = _flag(values, dest)
        out[label] = int(text) if text is not None and text.strip().lstrip("-").isdigit() else 1
    return out


def _spelled(args: Sequence[str], flags: Mapping[str, Any], dest: str) -> str:
    """How ``args`` spell the flag of ``dest`` (the operator's own word), else the first."""
    names = [n for n, spec in flags.items() if getattr(spec, "dest", None) == dest]
    used = [a.partition("=")[0] for a in args if a.partition("=")[0] in names]
    return used[-1] if used else (sorted(names, key=len)[0] if names else dest)


def serving_problems(s: Serving) -> list[tuple[str, str]]:
    """Every problem of one container's engine, as ``(variable, text)``, in the order the
    inventory states them (the pin, the profile, the arguments, the cards)."""
    try:
        built = descriptor(s.engine, "inference_engine_engine")
    except ValueError:
        return []  # the argument spec names a wrong engine (its choices)
    problems: list[tuple[str, str]] = []
    problems += _patch_problems(s)
    pin = model_pin(s.engine, s.version, s.model, s.pins, git_ref=s.git_ref)
    if pin.problem:
        # The version is wrong: no flag list of it decides anything (fix it first).
        return [*problems, (VERSION, pin.problem)]
    if not isinstance(s.args, list | tuple) or any(_templated(a) for a in s.args):
        args = None  # one string (its type is refused) or a template: the role's to judge
    else:
        args = [str(a) for a in s.args]
    engine: Engine | None = None
    if s.version and s.git_ref and s.version not in known_versions(s.engine):
        pass  # a branch build on a release without a list: its own parser, on the node
    else:
        try:
            engine = Engine.parse(s.engine, pin.version, list(s.capabilities))
        except ValidationError as exc:
            if exc.field == "engine.version":
                known = ", ".join(known_versions(s.engine))
                problems.append((
                    VERSION,
                    f"{s.engine} {pin.version} has no recorded flag list (known: {known}):"
                    f" nothing can check its arguments before the build; {_EXTRACT}",
                ))  # fmt: skip
            else:
                problems.append(("inference_engine_capabilities", exc.problem))
    problems += _profile_problems(s, engine)
    problems += _drafter_problems(s)
    if engine is not None and args is not None:
        problems += _arg_problems(s, engine, args, built.platform == "cpu")
    return problems


def _patch_problems(s: Serving) -> list[tuple[str, str]]:
    """Pull requests applied on a base: well formed, and with a base to go on."""
    if _templated(s.git_patches) or not s.git_patches:
        return []
    try:
        parse_patches(s.git_patches)
    except EngineSourceError as exc:
        name, _sep, text = str(exc).partition(": ")
        return [(name, text)]
    if not s.git_ref:
        return [(
            "inference_engine_git_patches",
            "apply to a git build: set inference_engine_git_ref, the base they go on (a tag"
            " such as refs/tags/v0.20.1, a branch or a pull request)",
        )]  # fmt: skip
    return []


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _profile_problems(s: Serving, engine: Engine | None) -> list[tuple[str, str]]:
    """The profile through the translator; without a flag list (a branch build on a
    release without one), its shape only: the build's own flags judge it on the node."""
    if s.profile is None or _templated(s.profile):
        return []
    try:
        profile = SpeculativeProfile.from_mapping(s.profile, prefix=PROFILE)
        if engine is not None:
            to_argv(profile, engine)
    except ValidationError as exc:
        name = exc.field
        if name.startswith("speculative"):
            name = PROFILE + name.removeprefix("speculative")
        return [(name, exc.problem)]
    except SpecopsError as exc:
        return [(PROFILE, str(exc))]
    return []


def _drafter_problems(s: Serving) -> list[tuple[str, str]]:
    """The drafter preflight (``drafter_check.check``, the node's own) when both the
    target and the drafter are readable here: a directory on this machine, or a hub id
    in its hub cache. Otherwise the node checks them after the download."""
    if not s.drafter_preflight or not isinstance(s.profile, Mapping) or _templated(s.profile):
        return []
    try:
        profile = SpeculativeProfile.from_mapping(s.profile, prefix=PROFILE)
    except SpecopsError:
        return []  # named by the profile check
    if profile.draft_model is None or profile.method not in DRAFTER_METHODS:
        return []
    target, _why = resolve(s.model, s.model_revision, s.hub_cache) if s.model else (None, "")
    drafter, _why = resolve(profile.draft_model, profile.draft_model_revision, s.hub_cache)
    if target is None or drafter is None:
        return []
    known = s.drafter_known if isinstance(s.drafter_known, Mapping) else {}
    report = drafter_check(
        profile.method, target, drafter,
        drafter_id=profile.draft_model if HUB_ID.match(profile.draft_model) else "",
        window=profile.draft_window, num_draft_tokens=profile.num_draft_tokens,
        known=known, config_sha256=s.drafter_sha256,
    )  # fmt: skip
    where = f"{PROFILE}.draft_model"
    return [(where, f"{f.message} (in {drafter}/config.json)") for f in report.findings]


def _arg_problems(s: Serving, engine: Engine, args: list[str], cpu: bool) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    spec_words = [
        i for i, a in enumerate(args) if a.startswith("--speculative") or a.startswith("--spec-")
    ]
    for i in spec_words:
        problems.append((
            f"{ARGS}[{i}]",
            f"{args[i]} is rendered from the speculative profile; set it in {PROFILE}",
        ))  # fmt: skip
    flags = engine.flags
    found, values = flags.scan(
        [a for i, a in enumerate(args) if i not in spec_words], ARGS, unknown_ok=bool(s.git_ref)
    )
    for exc in found:
        problems.append((exc.field, exc.problem))
    d = descriptor(s.engine)
    problems += _card_problems(
        s, flags.flags, args, values, dp_within_tp=d.dp_within_tp_dest, cpu=cpu
    )
    problems += _context_problems(s, flags.flags, args, values, d.context_dest)
    fraction_text = _flag(values, d.memory_fraction_dest)
    if fraction_text is not None:
        try:
            fraction = float(fraction_text)
        except ValueError:
            fraction = -1.0
        if not 0 < fraction <= 1:
            name = _spelled(args, flags.flags, d.memory_fraction_dest)
            problems.append((
                ARGS,
                f"{name} {fraction_text}: the share of each card's memory the engine takes;"
                " valid: a fraction 0 < x <= 1 (such as 0.88)",
            ))  # fmt: skip
    return problems


def _card_problems(
    s: Serving,
    flags: Mapping[str, Any],
    args: list[str],
    values: Mapping[str, list[str]],
    *,
    dp_within_tp: str,
    cpu: bool,
) -> list[tuple[str, str]]:
    if cpu or not s.cards:
        return []  # a CPU build, or a container without cards: nothing to divide
    problems: list[tuple[str, str]] = []
    sizes = _sizes(values)
    shared = bool(dp_within_tp) and dp_within_tp in values
    product = sizes["TP"] * sizes["PP"] * (1 if shared else sizes["DP"])
    if product != s.cards:
        used = " x ".join(f"{k} {v}" for k, v in sizes.items() if k != "DP" or not shared)
        tp_flag = _spelled(args, flags, "tensor_parallel_size")
        dp = " (DP ranks with DP attention share the TP cards)" if shared else ""
        problems.append((
            ARGS,
            f"{used} = {product} card(s), but the container gets {s.cards} ({s.cards_var});"
            f" valid: TP x PP{'' if shared else ' x DP'} = {s.cards}{dp}, such as"
            f" {tp_flag} {s.cards}, or ask for {product} card(s)",
        ))  # fmt: skip
    visible = s.cuda_visible_devices or str(s.environment.get("CUDA_VISIBLE_DEVICES", "") or "")
    where = CUDA if s.cuda_visible_devices else "inference_service_environment.CUDA_VISIBLE_DEVICES"
    if visible.strip():
        problems += [(where, text) for text in visible_devices_problems(visible, s.cards,
                                                                        s.cards_var)]  # fmt: skip
    return problems


# A GPU's UUID as nvidia-smi -L prints it (CUDA takes a unique prefix), or a MIG
# instance's (``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<gi>/<ci>``).
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


def visible_devices_problems(visible: str, cards: int, cards_var: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of a server in a container that gets ``cards`` cards.

    Inside the container CUDA numbers the cards it can open 0..cards-1 (in its order:
    ``CUDA_DEVICE_ORDER``, fastest first by default, PCI bus order with ``PCI_BUS_ID``),
    whatever their host minors: the node of the host's card 2 stays ``/dev/nvidia2``
    (``devN`` entries and mount lines keep the host's path), but it is CUDA device 0
    when it is the container's only card. An index is therefore an ordinal 0..cards-1,
    never the host's minor or the host's nvidia-smi index; a UUID (``GPU-...``,
    ``MIG-...``) names a card wherever it is. CUDA stops at the first index it does not
    have: only the devices before it are visible ("If an invalid index is encountered,
    only devices with indices that appear before the invalid index in the list are
    visible", CUDA Programming Guide, "CUDA Environment Variables"), so ``2,3`` on two
    cards shows the server none and the engine fails at start.
    """
    ids = [p.strip() for p in visible.split(",")]
    example = ",".join(str(i) for i in range(cards))
    if any(not p for p in ids) or len(set(ids)) != len(ids):
        return [f"{visible!r} is not a list of distinct device ids (valid: {example!r})"]
    wrong = [p for p in ids if not (p.isdigit() and int(p) < cards) and not _UUID.match(p)]
    if wrong:
        return [
            f"{visible!r}: {', '.join(repr(p) for p in wrong)} not among the container's"
            f" {cards} card(s) ({cards_var}): inside it CUDA numbers its cards"
            f" 0..{cards - 1} whatever their host minors (/dev/nvidiaN keeps the host's N),"
            f" and stops at the first index it lacks; valid: ordinals such as {example!r},"
            " GPU-/MIG- UUIDs (nvidia-smi -L), or empty (every card the container has)"
        ]
    if len(ids) != cards:
        return [
            f"{visible!r} shows the server {len(ids)} card(s) of the {cards} the"
            f" container gets ({cards_var}); valid: {cards} ids such as {example!r},"
            " or empty (every card the container has)"
        ]
    return []


def _context_problems(
    s: Serving,
    flags: Mapping[str, Any],
    args: list[str],
    values: Mapping[str, list[str]],
    dest: str,
) -> list[tuple[str, str]]:
    text = _flag(values, dest) if dest else None
    if text is None:
        return []
    wanted = human_int(text)
    if wanted is None:
        return []
    limit, source = _max_positions(s)
    if limit is None or wanted <= limit:
        return []
    name = _spelled(args, flags, dest)
    return [(
        ARGS,
        f"{name} {text} is more than {s.model}'s max_position_embeddings ({limit}, from"
        f" {source}); valid: at most {limit}",
    )]  # fmt: skip
