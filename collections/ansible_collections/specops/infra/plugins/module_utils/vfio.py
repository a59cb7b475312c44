"""Release NVIDIA cards from vfio-pci to the host: decisions, sysfs steps, boot config.

The one home of the vfio_release logic; the ``vfio_release`` module is a thin wrapper.

- :func:`plan_release` decides, from the host's GPU facts (``gpu.gather_facts``), which
  cards and which of their PCI functions to move, and refuses (before anything is
  written) when the request cannot be met. Which cards a model means and which are
  free is ``gpu_select``'s one rule: a card a running VM or any process holds is never
  taken, one assigned to a stopped VM only with ``allow_stopped_vm_cards``.
- :func:`release_locked` holds PVE's lock of every such stopped VM (the one ``qm
  start`` takes), decides again from fresh facts under it, then releases: the VM
  cannot start between the check and the unbind.
- :func:`apply_plan` performs the kernel's documented sequence per function (unbind from
  vfio-pci, set ``driver_override``, ``drivers_probe``), waits for and verifies the new
  binding, and on any failure puts every function it touched in this run back the way it
  was, then raises.
- :func:`boot_config` renders the persistent side: cards that stay with VMs are pinned to
  vfio-pci by address at boot (a modprobe ``install`` hook that writes
  ``driver_override``), and the released cards' IDs are removed from any
  ``options vfio-pci ids=`` line and ``vfio-pci.ids=`` kernel argument, since an ID list
  grabs every identical card.

Stdlib only: this runs on managed hosts.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ansible_collections.specops.infra.plugins.module_utils.file_lock import flock_within
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    GpuCard,
    HostGpuFacts,
    PciAddress,
    PciFunction,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    card_state,
    matches_model,
    select_free,
)

__all__ = [
    "GPU_DRIVER",
    "OVERRIDE_SCRIPT",
    "VFIO_DRIVER",
    "BootConfig",
    "CardRelease",
    "FileSysfs",
    "FunctionStep",
    "ReleasePlan",
    "ReleaseRequest",
    "Sysfs",
    "VfioReleaseError",
    "apply_plan",
    "available_pci_drivers",
    "boot_config",
    "card_matches_model",
    "parse_request",
    "plan_release",
    "release_locked",
    "render_modprobe_conf",
    "render_override_script",
    "strip_ids_from_cmdline",
    "strip_ids_from_grub",
    "strip_ids_from_modprobe",
    "vm_config_locks",
    "vm_lock_file",
]

GPU_DRIVER = "nvidia"
VFIO_DRIVER = "vfio-pci"
# Host driver of a card's companion functions, by PCI class (base << 8 | sub): the HD
# audio function, the USB-C controller and its UCSI serial bus of Turing-era cards.
COMPANION_DRIVERS = {0x0403: "snd_hda_intel", 0x0C03: "xhci_hcd", 0x0C80: "nvidia-gpu"}
DISPLAY_CLASSES = (0x0300, 0x0302)
# Where the boot-time override hook is installed (the modprobe conf names it).
OVERRIDE_SCRIPT = "/usr/local/lib/specops/vfio-pci-override.sh"


class VfioReleaseError(Exception):
    """A request that cannot be met, or a release that failed (and was rolled back)."""


# --------------------------------------------------------------------------- request


@dataclass(frozen=True)
class ReleaseRequest:
    """Which cards to give to the host: by ``addresses``, or by ``model`` and ``count``."""

    addresses: tuple[str, ...] = ()
    model: str | None = None
    count: int | None = None
    allow_stopped_vm_cards: bool = False


def parse_request(
    *,
    addresses: Sequence[str] | None,
    model: str | None,
    count: int | None,
    allow_stopped_vm_cards: bool = False,
) -> ReleaseRequest:
    """Validate the inputs; errors name the option and say what would be valid."""
    addresses = list(addresses or [])
    if addresses and model:
        raise VfioReleaseError("addresses and model are mutually exclusive: give one of them")
    if model is not None and not model.strip():
        raise VfioReleaseError("model: must be a PCI ID like 10de:2230 or a product name")
    if model and (count is None or count < 1):
        raise VfioReleaseError(f"count: must be an integer >= 1 with model (got {count!r})")
    if count is not None and not model:
        raise VfioReleaseError("count: only valid together with model")
    normalised: list[str] = []
    for i, text in enumerate(addresses):
        try:
            addr = PciAddress.parse_hostpci(str(text))
        except ValueError:
            raise VfioReleaseError(
                f"addresses[{i}]: {text!r} is not a PCI address "
                "(valid: 0000:01:00.0, 0000:01:00 or 01:00)"
            ) from None
        slot = addr.slot
        if slot not in normalised:
            normalised.append(slot)
    return ReleaseRequest(
        addresses=tuple(normalised),
        model=model.strip() if model else None,
        count=count,
        allow_stopped_vm_cards=allow_stopped_vm_cards,
    )


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class FunctionStep:
    """Move one PCI function off vfio-pci (or off a stale vfio-pci override)."""

    address: str
    kind: str  # "gpu" or the companion's class kind (audio, usb, serial, other)
    current_driver: str | None
    current_override: str | None
    new_override: str | None  # None clears driver_override
    expect_driver: str | None  # None: any driver except vfio-pci, or none


@dataclass(frozen=True)
class CardRelease:
    address: str
    name: str
    pci_id: str
    steps: tuple[FunctionStep, ...]
    stopped_vm_holders: tuple[int, ...]


@dataclass(frozen=True)
class ReleasePlan:
    release: tuple[CardRelease, ...]
    already_on_host: tuple[str, ...]  # requested cards with nothing left to do
    keep_on_vfio: tuple[str, ...]  # function addresses pinned to vfio-pci at boot
    released_ids: tuple[str, ...]  # vendor:device of every function of a released card
    cards: tuple[str, ...]  # one summary line per card on the host
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def available_pci_drivers(sys_root: str | os.PathLike[str]) -> set[str]:
    """Names of the PCI drivers the kernel has registered (``bus/pci/drivers/*``)."""
    drivers = Path(sys_root) / "bus" / "pci" / "drivers"
    try:
        return {p.name for p in drivers.iterdir() if p.is_dir()}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def card_matches_model(card: GpuCard, model: str) -> bool:
    """``model`` is the card's exact product name or its PCI ID (``gpu_select``'s rule)."""
    return matches_model(asdict(card), model)


def _class_value(fn: PciFunction) -> int:
    return int(fn.class_code, 16) >> 8


def _is_gpu_function(fn: PciFunction) -> bool:
    return _class_value(fn) in DISPLAY_CLASSES


def _on_host(card: GpuCard) -> bool:
    """The card is fully the host's: GPU on nvidia, nothing on or pinned to vfio-pci."""
    gpu_fn = card.functions[0]
    if gpu_fn.driver != GPU_DRIVER:
        return False
    return all(VFIO_DRIVER not in (fn.driver, fn.driver_override) for fn in card.functions)


def _steps(card: GpuCard, drivers: set[str]) -> tuple[FunctionStep, ...]:
    steps: list[FunctionStep] = []
    for fn in card.functions:
        if _is_gpu_function(fn):
            if fn.driver == GPU_DRIVER:
                continue
            steps.append(
                FunctionStep(
                    fn.address, "gpu", fn.driver, fn.driver_override, GPU_DRIVER, GPU_DRIVER
                )
            )
            continue
        if VFIO_DRIVER not in (fn.driver, fn.driver_override):
            continue
        companion = COMPANION_DRIVERS.get(_class_value(fn))
        target = companion if companion in drivers else None
        steps.append(
            FunctionStep(fn.address, fn.class_kind, fn.driver, fn.driver_override, target, target)
        )
    return tuple(steps)


def _holder_text(card: GpuCard) -> str:
    parts = []
    for h in card.holders:
        state = "running" if h.running else "stopped"
        via = f"mapping {h.mapping}" if h.mapping else "host="
        parts.append(f"VM {h.vmid} ({state}, {h.config}:{h.line} {h.key} via {via})")
    return ", ".join(parts) if parts else "no VM"


def _summary(card: GpuCard) -> str:
    line = f"{card.address} {card.name} [{card.driver or 'unbound'}] held by {_holder_text(card)}"
    for o in card.open_by:
        who = f"VM {o.vmid}'s QEMU" if o.vmid is not None else "a process"
        line += f"; {o.path} open by {who} (pid {o.pid} {o.command})"
    return line


def _blockers(
    card: GpuCard, facts: HostGpuFacts, allow_stopped: bool
) -> tuple[list[str], tuple[int, ...]]:
    """Why ``card`` cannot be released (empty when it can) and its stopped holders."""
    cards = [asdict(c) for c in facts.gpus]
    mine = next(c for c in cards if c["address"] == card.address)
    state = card_state(mine, cards, allow_stopped_vm_cards=allow_stopped)
    problems = [
        f"{r}; never unbound while its VM runs" if "held by running VM" in r else r
        for r in state.reasons
    ]
    return problems, state.stopped_vms


def _choose_by_address(
    facts: HostGpuFacts, request: ReleaseRequest
) -> tuple[list[GpuCard], list[str], dict[str, tuple[int, ...]]]:
    cards = {c.slot: c for c in facts.gpus}
    chosen: list[GpuCard] = []
    problems: list[str] = []
    stopped_by_card: dict[str, tuple[int, ...]] = {}
    for slot in request.addresses:
        card = cards.get(slot)
        if card is None:
            problems.append(f"{slot} is not an NVIDIA card on node {facts.node}")
            continue
        chosen.append(card)
        blockers, stopped = _blockers(card, facts, request.allow_stopped_vm_cards)
        problems.extend(blockers)
        stopped_by_card[card.slot] = stopped
    return chosen, problems, stopped_by_card


def _choose_by_model(
    facts: HostGpuFacts, request: ReleaseRequest
) -> tuple[list[GpuCard], list[str], dict[str, tuple[int, ...]]]:
    model = request.model or ""
    count = request.count or 0
    cards = [asdict(c) for c in facts.gpus]
    # Cards already the host's first (a re-run keeps them), then unassigned cards, then
    # (with the override) cards of stopped VMs; never a card a running VM or a process
    # holds.
    have = [c.address for c in facts.gpus if _on_host(c)]
    try:
        selection = select_free(
            cards,
            model,
            count,
            node=str(facts.node),
            allow_stopped_vm_cards=request.allow_stopped_vm_cards,
            prefer=have,
        )
    except GpuSelectError as exc:
        raise VfioReleaseError(f"model: {exc.problem}") from None
    by_address = {c.address: c for c in facts.gpus}
    chosen = [by_address[a] for a in selection.chosen]
    stopped_by_card = {c.slot: selection.states[c.address].stopped_vms for c in chosen}
    problems: list[str] = []
    if not selection.ok:
        hint = ""
        if selection.stopped_only and not request.allow_stopped_vm_cards:
            hint = (
                f"; {selection.stopped_only} more are assigned to stopped VMs "
                "(allow_stopped_vm_cards takes them)"
            )
        refused = f": {'; '.join(selection.refused)}" if selection.refused else ""
        problems.append(
            f"asked for {count} card(s) matching {model!r}, only {len(chosen)} can be "
            f"the host's ({selection.matching} match, "
            f"{len([a for a in have if a in selection.states])} already on the host{hint})"
            f"{refused}"
        )
    return chosen, problems, stopped_by_card


def plan_release(
    facts: HostGpuFacts, request: ReleaseRequest, drivers: Iterable[str]
) -> ReleasePlan:
    """Decide what to move. Raises :class:`VfioReleaseError` listing every blocker and
    every card with its holders when the request cannot be met. Writes nothing."""
    drivers = set(drivers)
    summary = tuple(_summary(c) for c in facts.gpus)
    warnings: list[str] = []
    if request.addresses:
        chosen, problems, stopped_by_card = _choose_by_address(facts, request)
    elif request.model:
        chosen, problems, stopped_by_card = _choose_by_model(facts, request)
    else:
        raise VfioReleaseError("give addresses, or model and count")
    if problems:
        listing = "\n  ".join(summary) or "(no NVIDIA cards)"
        raise VfioReleaseError(
            "cannot release the requested cards: "
            + "; ".join(problems)
            + f"\ncards on {facts.node}:\n  {listing}"
        )

    release: list[CardRelease] = []
    done: list[str] = []
    for card in chosen:
        steps = _steps(card, drivers)
        if not steps:
            done.append(card.address)
            continue
        if card.iommu_group_foreign:
            warnings.append(
                f"{card.address}: IOMMU group {card.iommu_group} also holds "
                f"{', '.join(card.iommu_group_foreign)}; left as they are"
            )
        release.append(
            CardRelease(
                card.address, card.name, card.pci_id, steps, stopped_by_card.get(card.slot, ())
            )
        )
    if GPU_DRIVER not in drivers and any(s.kind == "gpu" for c in release for s in c.steps):
        raise VfioReleaseError(
            "the nvidia driver is not loaded (no bus/pci/drivers/nvidia): install and load it "
            "first (role nvidia_driver), then release cards to it"
        )
    released_slots = {c.slot for c in chosen}
    keep = sorted(
        fn.address
        for card in facts.gpus
        if card.slot not in released_slots
        for fn in card.functions
        if VFIO_DRIVER in (fn.driver, fn.driver_override)
    )
    released_ids = sorted({fn.pci_id for card in chosen for fn in card.functions})
    return ReleasePlan(
        release=tuple(release),
        already_on_host=tuple(done),
        keep_on_vfio=tuple(keep),
        released_ids=tuple(released_ids),
        cards=summary,
        warnings=tuple(warnings),
    )


# --------------------------------------------------------------------------- sysfs


class Sysfs(Protocol):
    """The writes and reads a release needs; :class:`FileSysfs` is the real one."""

    def driver(self, address: str) -> str | None: ...

    def override(self, address: str) -> str | None: ...

    def unbind(self, address: str, driver: str) -> None: ...

    def bind(self, address: str, driver: str) -> None: ...

    def set_override(self, address: str, value: str | None) -> None: ...

    def probe(self, address: str) -> None: ...


class FileSysfs:
    """sysfs under ``root`` (``/sys`` on a host). Each write is one ``write(2)`` of the
    address or value, as ``echo -n`` does; the kernel applies it before returning, a
    simulated tree's stand-in shortly after, so callers wait for the effect."""

    def __init__(self, root: str | os.PathLike[str] = "/sys") -> None:
        self.root = Path(root)

    def _dev(self, address: str) -> Path:
        return self.root / "bus" / "pci" / "devices" / address

    def _write(self, path: Path, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def driver(self, address: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self._dev(address) / "driver"))
        except OSError:
            return None

    def override(self, address: str) -> str | None:
        try:
            text = (self._dev(address) / "driver_override").read_text().strip()
        except OSError:
            return None
        return None if text in ("", "(null)") else text

    def unbind(self, address: str, driver: str) -> None:
        self._write(self.root / "bus" / "pci" / "drivers" / driver / "unbind", address)

    def bind(self, address: str, driver: str) -> None:
        self._write(self.root / "bus" / "pci" / "drivers" / driver / "bind", address)

    def set_override(self, address: str, value: str | None) -> None:
        # An empty write ("\n") clears the override (drivers/pci/pci-sysfs.c).
        self._write(self._dev(address) / "driver_override", value or "\n")

    def probe(self, address: str) -> None:
        self._write(self.root / "bus" / "pci" / "drivers_probe", address)


def _wait(check: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _unbound(sysfs: Sysfs, address: str) -> bool:
    return sysfs.driver(address) is None


def _step_ok(sysfs: Sysfs, step: FunctionStep) -> bool:
    bound = sysfs.driver(step.address)
    if step.expect_driver is not None:
        return bound == step.expect_driver
    return bound != VFIO_DRIVER


def _restore(sysfs: Sysfs, step: FunctionStep, timeout: float) -> str | None:
    """Put one function back as it was; returns a problem or None.

    The old driver is matched through ``driver_override`` and an explicit ``bind`` (a
    card vfio-pci took by ``ids=`` would not match it otherwise), then the old override
    value goes back; the binding stays, as the override only counts at match time."""
    addr = step.address
    now = sysfs.driver(addr)
    if now is not None and now != step.current_driver:
        sysfs.unbind(addr, now)
        if not _wait(lambda: sysfs.driver(addr) is None, timeout):
            return f"{addr}: could not unbind it from {now} while restoring"
    if step.current_driver is not None and sysfs.driver(addr) != step.current_driver:
        sysfs.set_override(addr, step.current_driver)
        sysfs.bind(addr, step.current_driver)
        if not _wait(lambda: sysfs.driver(addr) == step.current_driver, timeout):
            sysfs.set_override(addr, step.current_override)
            return f"{addr}: could not rebind it to {step.current_driver}"
    sysfs.set_override(addr, step.current_override)
    return None


def apply_plan(plan: ReleasePlan, sysfs: Sysfs, *, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Release the plan's cards one by one; returns what was done per function.

    On a failure every function touched in this run is restored (unbound from what it
    got, old ``driver_override`` back, re-probed to its old driver) and
    :class:`VfioReleaseError` says what failed and whether the restore worked.
    """
    done: list[FunctionStep] = []
    report: list[dict[str, Any]] = []
    try:
        for card in plan.release:
            # Unbind every function first: vfio-pci keeps the group's devices together.
            for step in card.steps:
                done.append(step)
                if step.current_driver is not None:
                    sysfs.unbind(step.address, step.current_driver)
                    if not _wait(partial(_unbound, sysfs, step.address), timeout):
                        raise VfioReleaseError(
                            f"{step.address}: still bound to {sysfs.driver(step.address)} "
                            f"{timeout:g}s after the unbind"
                        )
            for step in card.steps:
                sysfs.set_override(step.address, step.new_override)
                got_override = sysfs.override(step.address)
                if got_override != step.new_override:
                    raise VfioReleaseError(
                        f"{step.address}: driver_override reads {got_override!r} after "
                        f"writing {step.new_override!r}"
                    )
                sysfs.probe(step.address)
                if not _wait(partial(_step_ok, sysfs, step), timeout):
                    want = step.expect_driver or "no driver or a host driver"
                    raise VfioReleaseError(
                        f"{step.address}: bound to {sysfs.driver(step.address) or 'nothing'} "
                        f"{timeout:g}s after drivers_probe, expected {want}"
                    )
                report.append(
                    {
                        "address": step.address,
                        "card": card.address,
                        "kind": step.kind,
                        "from_driver": step.current_driver,
                        "to_driver": sysfs.driver(step.address),
                        "driver_override": step.new_override,
                    }
                )
    except (VfioReleaseError, OSError) as exc:
        problems = [p for step in reversed(done) if (p := _restore(sysfs, step, timeout))]
        restored = (
            "every function touched was restored to its previous binding"
            if not problems
            else "RESTORE FAILED: " + "; ".join(problems)
        )
        raise VfioReleaseError(f"release failed: {exc}; {restored}") from exc
    return report


# --------------------------------------------------------------------------- PVE VM lock


def vm_lock_file(root: str | os.PathLike[str], vmid: int) -> Path:
    """PVE's per-VM lock file under the node ``root`` (qemu-server ``PVE/QemuConfig.pm``
    ``config_file_lock``: ``/var/lock/qemu-server/lock-<vmid>.conf``)."""
    return Path(root) / "var" / "lock" / "qemu-server" / f"lock-{vmid}.conf"


def _vm_lock_held(vmid: int, timeout: float, path: str) -> VfioReleaseError:
    return VfioReleaseError(
        f"VM {vmid}: PVE's lock {path} is still held after {timeout:g} s "
        "(a qm start, backup or migration of that VM runs?); nothing was changed, try again"
    )


@contextlib.contextmanager
def vm_config_locks(
    root: str | os.PathLike[str], vmids: Iterable[int], timeout: float = 10.0
) -> Iterator[None]:
    """Hold PVE's config lock of each VM (ascending vmid) while the block runs.

    What PVE itself takes: qemu-server ``PVE::QemuServer::vm_start`` runs its whole
    start inside ``PVE::QemuConfig->lock_config($vmid, ...)`` (src/PVE/QemuServer.pm at
    qemu-server e6352be6), which is pve-guest-common's ``PVE::AbstractConfig::
    lock_config`` -> ``lock_config_full($vmid, 10, ...)`` -> pve-common's
    ``PVE::Tools::lock_file_full``: ``flock(LOCK_EX)`` on ``config_file_lock`` =
    ``/var/lock/qemu-server/lock-<vmid>.conf``, opened ``>>`` (created when missing),
    waiting up to 10 s. Holding the same flock makes ``qm start`` (and the API's start,
    config and migrate tasks) of that VM wait until the block ends. Refuses, naming the
    VM, when the lock stays taken for ``timeout`` seconds.
    """
    with contextlib.ExitStack() as stack:
        for vmid in sorted(set(vmids)):
            stack.enter_context(
                flock_within(
                    vm_lock_file(root, vmid),
                    timeout,
                    poll=0.05,
                    error=partial(_vm_lock_held, vmid, timeout),
                )
            )
        yield


def release_locked(
    root: str | os.PathLike[str],
    plan: ReleasePlan,
    replan: Callable[[], ReleasePlan],
    sysfs: Sysfs,
    *,
    timeout: float = 10.0,
) -> tuple[ReleasePlan, list[dict[str, Any]]]:
    """Release ``plan``'s cards; for cards a stopped VM keeps, under that VM's PVE lock.

    With the locks held, ``replan`` decides again from fresh facts (a VM that started
    since ``plan`` now holds its card and the new plan refuses it); the release goes on
    only if the fresh plan needs no lock it does not hold. Returns the plan applied
    and :func:`apply_plan`'s report.
    """
    vmids = sorted({v for card in plan.release for v in card.stopped_vm_holders})
    if not vmids:
        return plan, apply_plan(plan, sysfs, timeout=timeout)
    with vm_config_locks(root, vmids, timeout):
        fresh = replan()
        needed = {v for card in fresh.release for v in card.stopped_vm_holders}
        if not needed <= set(vmids):
            raise VfioReleaseError(
                f"the cards' holders changed while waiting for PVE's VM locks (now also VM "
                f"{', '.join(map(str, sorted(needed - set(vmids))))}); nothing was changed, "
                "run again"
            )
        return fresh, apply_plan(fresh, sysfs, timeout=timeout)


# --------------------------------------------------------------------------- boot config


_MODPROBE_IDS = re.compile(r"^(\s*options\s+vfio[-_]pci\s+)(.*)$")


def _strip_id_list(value: str, ids: set[str]) -> str:
    return ",".join(i for i in value.split(",") if i and i.lower() not in ids)


def strip_ids_from_modprobe(text: str, ids: Iterable[str]) -> str:
    """Remove ``ids`` from ``options vfio-pci ids=...`` lines (an emptied ``ids=`` goes,
    a line left with no option becomes a comment saying why)."""
    drop = {i.lower() for i in ids}
    out: list[str] = []
    for line in text.splitlines():
        match = _MODPROBE_IDS.match(line)
        if not match:
            out.append(line)
            continue
        opts = []
        changed = False
        for opt in match[2].split():
            key, sep, value = opt.partition("=")
            if key == "ids" and sep:
                kept = _strip_id_list(value, drop)
                changed = changed or kept != value
                if kept:
                    opts.append(f"ids={kept}")
                continue
            opts.append(opt)
        if not changed:
            out.append(line)
        elif opts:
            out.append(match[1] + " ".join(opts))
        else:
            out.append(f"# specops vfio_release: cards released by address; was: {line.strip()}")
    return "\n".join(out) + ("\n" if text.endswith("\n") or not text else "")


def strip_ids_from_cmdline(cmdline: str, ids: Iterable[str]) -> str:
    """Remove ``ids`` from ``vfio-pci.ids=`` / ``vfio_pci.ids=`` kernel arguments."""
    drop = {i.lower() for i in ids}
    out = []
    for token in cmdline.split():
        key, sep, value = token.partition("=")
        if sep and key in ("vfio-pci.ids", "vfio_pci.ids"):
            kept = _strip_id_list(value, drop)
            if kept:
                out.append(f"{key}={kept}")
            continue
        out.append(token)
    return " ".join(out)


_GRUB_LINE = re.compile(r'^(GRUB_CMDLINE_LINUX(?:_DEFAULT)?=)(["\']?)(.*?)\2\s*$')


def strip_ids_from_grub(text: str, ids: Iterable[str]) -> str:
    """``strip_ids_from_cmdline`` on the GRUB_CMDLINE_LINUX[_DEFAULT] lines."""
    ids = list(ids)
    out = []
    for line in text.splitlines():
        match = _GRUB_LINE.match(line)
        if match and ("vfio-pci.ids=" in line or "vfio_pci.ids=" in line):
            quote = match[2] or '"'
            out.append(f"{match[1]}{quote}{strip_ids_from_cmdline(match[3], ids)}{quote}")
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def render_override_script(addresses: Sequence[str]) -> str:
    lines = [
        "#!/bin/sh",
        "# Managed by specops (role vfio_release). Pins the PCI functions that VMs keep",
        "# to vfio-pci by address before vfio-pci (and any host GPU/audio driver) loads;",
        "# run by modprobe through /etc/modprobe.d/specops-vfio.conf. An ID list",
        "# (options vfio-pci ids=) would grab every identical card instead.",
        "set -e",
    ]
    for addr in addresses:
        lines.append(
            f"[ -e /sys/bus/pci/devices/{addr} ] && "
            f"echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override || true"
        )
    return "\n".join(lines) + "\n"


def render_modprobe_conf(script: str = OVERRIDE_SCRIPT) -> str:
    return (
        "# Managed by specops (role vfio_release): VM cards stay on vfio-pci by address.\n"
        f"install vfio-pci {script}; /sbin/modprobe --ignore-install vfio-pci $CMDLINE_OPTS\n"
        "softdep nvidia pre: vfio-pci\n"
        "softdep nouveau pre: vfio-pci\n"
        "softdep snd_hda_intel pre: vfio-pci\n"
        "softdep xhci_pci pre: vfio-pci\n"
    )


@dataclass(frozen=True)
class BootConfig:
    """Files whose content must change (path -> new text), files to remove, and the boot
    tools to run afterwards ("initramfs", "grub", "proxmox-boot-tool")."""

    files: dict[str, str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    refresh: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def boot_config(
    plan: ReleasePlan,
    *,
    current: Mapping[str, str | None],
    loader: str,
    modprobe_files: Iterable[str] = (),
    grub_file: str = "/etc/default/grub",
    kernel_cmdline_file: str = "/etc/kernel/cmdline",
    conf_file: str = "/etc/modprobe.d/specops-vfio.conf",
    script_file: str = OVERRIDE_SCRIPT,
) -> BootConfig:
    """What the boot-time configuration must become for ``plan``. Pure: ``current`` maps
    each path it may touch to its text (None when absent); ``modprobe_files`` names the
    ``/etc/modprobe.d/*.conf`` files to clean of the released IDs."""
    want: dict[str, str | None] = {}
    ids = plan.released_ids
    for path in sorted(modprobe_files):
        text = current.get(path)
        if path in (conf_file, script_file) or text is None:
            continue
        want[path] = strip_ids_from_modprobe(text, ids)
    if plan.keep_on_vfio:
        want[conf_file] = render_modprobe_conf(script_file)
        want[script_file] = render_override_script(plan.keep_on_vfio)
    else:
        want[conf_file] = None
        want[script_file] = None
    grub_text = current.get(grub_file)
    if grub_text is not None:
        want[grub_file] = strip_ids_from_grub(grub_text, ids)
    cmdline_text = current.get(kernel_cmdline_file)
    if cmdline_text is not None:
        new = strip_ids_from_cmdline(cmdline_text, ids)
        want[kernel_cmdline_file] = (
            cmdline_text if new == " ".join(cmdline_text.split()) else new + "\n"
        )

    files = {p: t for p, t in want.items() if t is not None and t != current.get(p)}
    remove = tuple(p for p, t in want.items() if t is None and current.get(p) is not None)
    refresh: list[str] = []
    if any(p not in (grub_file, kernel_cmdline_file) for p in files) or remove:
        refresh.append("initramfs")
    if grub_file in files and loader == "grub":
        refresh.append("grub")
    if kernel_cmdline_file in files and loader == "systemd-boot":
        refresh.append("proxmox-boot-tool")
    return BootConfig(files=files, remove=remove, refresh=tuple(refresh))
