"""Which card is free, and which cards a model name means: one rule for every layer.

GPU passthrough (``lxc_gpu``), the vfio release (``vfio``) and the migration preflight
(``specops.migrate.preflight``) all choose cards through this module, on the GPU facts
of ``gpu.gather_facts`` (``ansible_facts.specops_gpu``: each card a mapping).

**Model names.** A wanted model is the product name exactly as the facts report it
(``gpus[].name``, e.g. ``NVIDIA RTX A6000``; case and repeated spaces do not matter)
or a PCI ``vendor:device`` id (``10de:2230``). Nothing else matches: ``A6000`` or
``5090`` is refused with the names that would match, never taken as a substring
(``RTX 6000`` must not pick an ``RTX PRO 6000``).

**Free.** A card may be taken only when:

- no running VM holds it: a ``hostpciN`` entry (``host=`` or a cluster ``mapping=``)
  or an ``args:`` ``-device vfio-pci,host=...`` of a VM whose QEMU runs (the facts'
  ``holders``; a VM counts as running when the node's pidfile says so, or the caller's
  view, e.g. the PVE API's, says so);
- no process has its vfio device open (``open_by``: ``/dev/vfio/<group>`` and friends,
  read from ``/proc/*/fd``), a QEMU started outside PVE included;
- nothing in its IOMMU group is held by a running VM or open (the group moves as one);
- a card assigned to a *stopped* VM only with ``allow_stopped_vm_cards`` (that VM's
  next start would take the card back: the vfio release then holds PVE's VM lock).

Stdlib only: this runs on the PVE node (Python >= 3.7, like ``gpu``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError

__all__ = [
    "CardState",
    "GpuSelectError",
    "Selection",
    "card_state",
    "matches_model",
    "matching_cards",
    "model_rule",
    "select_free",
]

_PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")

Card = Mapping[str, Any]


class GpuSelectError(ValidationError, ValueError):
    """A request no card can meet; ``field`` names the input, ``problem`` says why."""


def model_rule() -> str:
    """The matching rule in words, for error messages and docs."""
    return (
        "the product name exactly as the GPU facts report it (e.g. 'NVIDIA RTX A6000') "
        "or a PCI vendor:device id (e.g. '10de:2230')"
    )


def _norm(text: str) -> str:
    return " ".join(str(text).split()).lower()


def matches_model(card: Card, model: str) -> bool:
    """Whether ``card`` is ``model``: its exact product name or its vendor:device id."""
    wanted = _norm(model)
    if not wanted:
        return False
    if _PCI_ID.match(wanted):
        return str(card.get("pci_id", "")).lower() == wanted
    return _norm(str(card.get("name", ""))) == wanted


def matching_cards(
    cards: Sequence[Card], model: str, *, node: str = "this node", where: str = "gpu_model"
) -> list[Card]:
    """The cards that are ``model``; GpuSelectError (naming what would match) if none."""
    if not _norm(model):
        raise GpuSelectError(where, f"is empty: give {model_rule()}")
    found = [c for c in cards if matches_model(c, model)]
    if found:
        return found
    have = sorted({f"'{c.get('name')}' ({c.get('pci_id')})" for c in cards})
    near = _near(model, cards)
    hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    raise GpuSelectError(
        where,
        f"no card named {model!r} on {node}{hint} (have: {', '.join(have) or 'none'}): "
        f"give {model_rule()}",
    )


def _near(model: str, cards: Sequence[Card]) -> list[str]:
    """The card names nearest to ``model``, nearest first (at most three): those that
    contain it (``RTX A6000`` in ``NVIDIA RTX A6000``) or spell it closely."""
    wanted = _norm(model)
    names = sorted({str(c.get("name", "")) for c in cards if c.get("name")})
    close = set(difflib.get_close_matches(wanted, [_norm(n) for n in names], n=3, cutoff=0.8))
    found = [n for n in names if wanted in _norm(n) or _norm(n) in close]

    def nearness(name: str) -> tuple[float, str]:
        return (-difflib.SequenceMatcher(None, wanted, _norm(name)).ratio(), name)

    return sorted(found, key=nearness)[:3]


@dataclass(frozen=True)
class CardState:
    """Whether one card may be taken, and why not."""

    address: str
    usable: bool
    reasons: tuple[str, ...] = ()  # why it may not be taken (empty when usable)
    stopped_vms: tuple[int, ...] = ()  # stopped VMs it is assigned to


def _running(holder: Card, running_vms: Collection[int] | None) -> bool:
    if holder.get("running"):
        return True
    return running_vms is not None and int(holder["vmid"]) in running_vms


def _holder_text(holder: Card) -> str:
    via = holder.get("via") or ("mapping" if holder.get("mapping") else "host")
    what = f"mapping {holder.get('mapping')}" if via == "mapping" else f"{via}="
    if via == "args":
        what = "args: -device vfio-pci"
    return f"{holder.get('config')}:{holder.get('line')} {holder.get('key')} via {what}"


def _opener_text(opener: Card) -> str:
    who = f"VM {opener['vmid']}'s QEMU" if opener.get("vmid") is not None else "process"
    cmd = f" {opener.get('command')}" if opener.get("command") else ""
    return f"{who} (pid {opener.get('pid')}{cmd}) has {opener.get('path')} open"


def _group_blockers(
    card: Card, cards: Sequence[Card], running_vms: Collection[int] | None
) -> list[str]:
    """Running VMs holding another device of the card's IOMMU group."""
    foreign = set(card.get("iommu_group_foreign") or [])
    if not foreign:
        return []
    found: list[str] = []
    for other in cards:
        if other is card:
            continue
        members = {str(f.get("address")) for f in other.get("functions") or []}
        shared = sorted(foreign & members)
        if not shared:
            continue
        vms = sorted(
            {int(h["vmid"]) for h in other.get("holders") or [] if _running(h, running_vms)}
        )
        if vms:
            found.append(
                f"{card.get('address')} shares IOMMU group {card.get('iommu_group')} with "
                f"{', '.join(shared)}, held by running VM {', '.join(map(str, vms))}"
            )
    return found


def card_state(
    card: Card,
    cards: Sequence[Card] = (),
    *,
    allow_stopped_vm_cards: bool = False,
    running_vms: Collection[int] | None = None,
) -> CardState:
    """The rule of this module for one card (see the module docstring).

    ``cards``: every card of the node (for the IOMMU group check). ``running_vms``: an
    extra view of which VMs run (the PVE API's); a VM running in either view counts.
    """
    address = str(card.get("address"))
    reasons: list[str] = []
    holders = list(card.get("holders") or [])
    running = [h for h in holders if _running(h, running_vms)]
    running_ids = sorted({int(h["vmid"]) for h in running})
    if running_ids:
        reasons.append(
            f"{address} held by running VM {', '.join(map(str, running_ids))} "
            f"({'; '.join(_holder_text(h) for h in running)})"
        )
    openers = list(card.get("open_by") or [])
    held = card.get("held_by_running_vm")
    if (
        held is not None
        and int(held) not in running_ids
        and all(o.get("vmid") != held for o in openers)
    ):
        reasons.append(f"{address} held by running VM {held}")
    for opener in openers:
        reasons.append(f"{address} in use: {_opener_text(opener)}")
    reasons.extend(_group_blockers(card, cards, running_vms))
    stopped = tuple(sorted({int(h["vmid"]) for h in holders} - set(running_ids)))
    if stopped and not reasons and not allow_stopped_vm_cards:
        reasons.append(
            f"{address} is assigned to stopped VM {', '.join(map(str, stopped))} "
            f"({'; '.join(_holder_text(h) for h in holders if int(h['vmid']) in stopped)}): "
            "set allow_stopped_vm_cards to take it (that VM will not start with it)"
        )
    return CardState(address, not reasons, tuple(reasons), stopped)


@dataclass
class Selection:
    """The outcome of :func:`select_free`."""

    model: str
    count: int
    chosen: list[str] = field(default_factory=list)  # addresses, in choice order
    notes: list[str] = field(default_factory=list)  # one line per card considered
    refused: list[str] = field(default_factory=list)  # why each unusable card is
    states: dict[str, CardState] = field(default_factory=dict)
    matching: int = 0
    stopped_only: int = 0  # cards only a stopped VM keeps (usable with the override)

    @property
    def ok(self) -> bool:
        return len(self.chosen) >= self.count


def select_free(
    cards: Sequence[Card],
    model: str,
    count: int,
    *,
    node: str = "this node",
    allow_stopped_vm_cards: bool = False,
    running_vms: Collection[int] | None = None,
    taken: Mapping[str, str] | None = None,
    prefer: Iterable[str] = (),
    eligible: Callable[[Card], str | None] | None = None,
) -> Selection:
    """Up to ``count`` free cards of ``model`` (GpuSelectError when none is ``model``).

    Order: the ``prefer`` addresses (cards the caller already has, so a re-run keeps
    them), then cards no VM is assigned to, then (with ``allow_stopped_vm_cards``)
    cards of stopped VMs; each group by address. ``taken`` maps addresses the caller
    may not use to the reason (another container has them); ``eligible`` returns why
    the caller cannot use a card (e.g. not on the nvidia driver), or None.
    """
    if count < 1:
        raise GpuSelectError("gpu_count", f"must be at least 1 (got {count})")
    matching = matching_cards(cards, model, node=node)
    preferred = set(prefer)
    taken = taken or {}
    selection = Selection(model=model, count=count, matching=len(matching))
    ranked: list[tuple[int, str]] = []
    for card in sorted(matching, key=lambda c: str(c.get("address"))):
        address = str(card.get("address"))
        state = card_state(
            card, cards, allow_stopped_vm_cards=allow_stopped_vm_cards, running_vms=running_vms
        )
        selection.states[address] = state
        not_mine = eligible(card) if eligible is not None else None
        if state.usable and address in taken and address not in preferred:
            not_mine = not_mine or f"{address} {taken[address]}"
        if not state.usable or not_mine:
            plain = card_state(card, cards, allow_stopped_vm_cards=True, running_vms=running_vms)
            if plain.usable and state.stopped_vms and not not_mine:
                selection.stopped_only += 1
            why = not_mine or "; ".join(state.reasons)
            selection.notes.append(why)
            selection.refused.append(why)
            continue
        driver = card.get("driver") or "no driver"
        rank = 0 if address in preferred else (2 if state.stopped_vms else 1)
        extra = f", assigned to stopped VM {', '.join(map(str, state.stopped_vms))}"
        selection.notes.append(f"{address} free ({driver}{extra if state.stopped_vms else ''})")
        ranked.append((rank, address))
    selection.chosen = [address for _rank, address in sorted(ranked)[:count]]
    return selection
