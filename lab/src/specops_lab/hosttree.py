"""Simulated PVE host trees: sysfs, procfs, /dev and /etc/pve from a YAML description.

A hardware stand-in for tests and the lab. This machine has no NVIDIA GPU and no
vfio-pci, so the facts module and the host roles read a tree under a per-node root
(``/var/lib/specops/lab/<node>/`` by default) that looks like the kernel's:

- ``sys/devices/pci<domain>:00/[<bridge>/]<addr>/`` with ``vendor``, ``device``,
  ``class``, ``subsystem_*``, ``driver_override`` (``(null)`` when unset), a ``driver``
  symlink (``../../../../bus/pci/drivers/vfio-pci``) and an ``iommu_group`` symlink
  (``../../../../kernel/iommu_groups/14``); ``sys/bus/pci/devices/<addr>`` links to it;
  ``sys/bus/pci/drivers/<drv>/`` holds ``bind``/``unbind``/``new_id`` and a link per
  bound device; ``sys/kernel/iommu_groups/<n>/devices/<addr>`` links back (the directory
  exists but is empty without an IOMMU, as on the recorded H200 VM);
- ``sys/module/<mod>/`` per loaded module (``sys/module/nvidia/version``);
- ``proc/devices`` (char majors: 195 nvidia/nvidiactl and the host's dynamic ones),
  ``proc/driver/nvidia/{version,gpus/<addr>/information}``, ``proc/mounts``,
  ``proc/sys/kernel/{osrelease,hostname}``, ``proc/<pid>/cmdline`` of running VMs and
  described processes, and their ``proc/<pid>/fd/<n>`` links: a running VM's QEMU
  holds ``/dev/vfio/<group>`` of every card its ``hostpciN``/``args:`` name, as on a
  real node, and a described process the groups it lists (a QEMU outside PVE);
- ``dev/nvidia*`` and ``dev/nvidia-caps/*`` made with mknod and the host's majors;
- ``run/qemu-server/<vmid>.pid`` for running VMs, ``usr/share/perl5/PVE/pvecfg.pm``,
  ``etc/hostname``, ``etc/kernel/{proxmox-boot-uuids,cmdline}`` or ``etc/default/grub``;
- ``etc/pve/qemu-server/<vmid>.conf`` (through ``etc/pve/nodes/<node>/qemu-server``
  as on a real node) and ``etc/pve/mapping/pci.cfg`` sections.

``sys/`` and ``proc/`` belong to this generator and are rebuilt whole (built aside,
then swapped in); in ``dev/`` it owns ``nvidia*`` and ``nvidia-caps/`` only. Under
``etc/pve`` it merges: it writes only the VM configs and mapping sections its
description names, and refuses (before changing anything) when such a file or section
already exists with other content, unless ``replace`` is set.
The PVE stand-in shares the same node roots.

The description format is documented in ``inventory/lab/hardware/README.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    PciAddress,
    parse_hostpci_value,
    parse_qemu_args_devices,
)

from specops.errors import ValidationError
from specops_lab import pci_identities
from specops_lab.paths import BOOT_CMDLINE, INITRAMFS_DIR, LAB_ETC

__all__ = [
    "DEFAULT_LAB_ROOT",
    "MODELS",
    "CardSpec",
    "FunctionSpec",
    "HostSpec",
    "MappingSpec",
    "Model",
    "NvidiaSpec",
    "ProcessSpec",
    "VmSpec",
    "build_tree",
    "load_spec",
    "parse_spec",
    "register",
    "with_cards_released",
    "with_nvidia_loaded",
]

DEFAULT_LAB_ROOT = os.environ.get("SPECOPS_LAB_DIR", "/var/lib/specops/lab")
SCHEMA = "specops.hosttree/1"


@dataclass(frozen=True)
class Model:
    pci_id: str
    class_code: str
    subsystem_id: str
    audio_id: str | None  # the HD audio function .1 of cards with display outputs


# Description key (the catalogue id) -> PCI identity: the card's pci_id from the one GPU
# catalogue (module_utils/gpu_catalogue.py), the board's simulated class, subsystem and
# audio function from the lab's own table (specops_lab.pci_identities).
MODELS: dict[str, Model] = {
    p.id: Model(p.pci_id, ident.pci_class, ident.subsystem_id, ident.audio_pci_id)
    for p in gpu_catalogue.CATALOGUE
    for ident in (pci_identities.identity(p.id),)
}

# Character majors every Linux host lists before any GPU driver (as read on the H200
# machine, trimmed). Dynamic majors the description sets are added to these.
_BASE_CHAR_MAJORS: tuple[tuple[int, str], ...] = (
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (4, "ttyS"),
    (5, "/dev/tty"),
    (5, "/dev/console"),
    (5, "/dev/ptmx"),
    (7, "vcs"),
    (10, "misc"),
    (13, "input"),
    (128, "ptm"),
    (136, "pts"),
    (226, "drm"),
)
NVIDIA_MAJOR = 195
# Modules of spec.modules that are PCI drivers (a bus/pci/drivers/<name> directory).
PCI_DRIVER_MODULES = ("snd_hda_intel", "nouveau")
# LAB_ETC, INITRAMFS_DIR, BOOT_CMDLINE: specops_lab.paths (imported above).
_BUILD_DATE = "Thu Oct 30 00:00:00 UTC 2025"
_NVIDIA_KO_REGIONS = (
    "nvidia-nvlink",
    "nvidia-nvswitch",
    "nvidia-caps",
    "nvidia-caps-imex-channels",
)


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class FunctionSpec:
    function: int
    pci_id: str
    class_code: str
    driver: str | None
    driver_override: str | None
    subsystem_id: str | None = None


@dataclass(frozen=True)
class CardSpec:
    address: str  # DDDD:BB:DD.F of the display function
    pci_id: str
    class_code: str
    subsystem_id: str
    driver: str | None
    driver_override: str | None
    iommu_group: int | None
    minor: int | None
    functions: tuple[FunctionSpec, ...]
    bridge: str | None

    @property
    def slot(self) -> str:
        return self.address.rsplit(".", 1)[0]


@dataclass(frozen=True)
class NvidiaSpec:
    loaded: bool
    version: str
    flavour: str  # open | proprietary
    majors: dict[str, int]
    modeset: bool = True


@dataclass(frozen=True)
class VmSpec:
    vmid: int
    name: str
    running: bool
    hostpci: tuple[str, ...]
    pid: int
    extra: str = ""
    args: str = ""  # the conf's args: line (QEMU arguments, e.g. -device vfio-pci,host=)


@dataclass(frozen=True)
class ProcessSpec:
    """A process outside PVE's VMs (a hand-started QEMU) holding vfio groups open."""

    pid: int
    cmdline: tuple[str, ...]
    vfio_groups: tuple[int, ...]


@dataclass(frozen=True)
class MappingSpec:
    id: str
    description: str | None
    maps: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class HostSpec:
    node: str
    kernel_release: str
    pve_version: str | None
    pve_release: str | None
    pve_repoid: str
    efi: bool
    secure_boot: bool
    loader: str
    cmdline: str
    cgroup: int
    iommu: bool
    modules: tuple[str, ...]
    nvidia: NvidiaSpec | None
    cards: tuple[CardSpec, ...]
    others: tuple[CardSpec, ...]
    vms: tuple[VmSpec, ...]
    mappings: tuple[MappingSpec, ...]
    extra_char_majors: dict[str, int] = field(default_factory=dict)
    processes: tuple[ProcessSpec, ...] = ()
    etc_files: dict[str, str] = field(default_factory=dict)
    # Debian packages installed on the node (its dpkg database; headers and dkms matter).
    packages: tuple[str, ...] = ()


def _req(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ValidationError(f"{where}.{key}", "is required")
    return data[key]


def _as_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(where, f"must be a mapping (got {type(value).__name__})")
    return value


def _as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(where, f"must be a list (got {type(value).__name__})")
    return value


def _pci_address(value: Any, where: str) -> str:
    text = str(value).lower()
    parts = text.split(":")
    ok = (
        len(parts) == 3
        and len(parts[0]) == 4
        and len(parts[1]) == 2
        and "." in parts[2]
        and all(c in "0123456789abcdef" for c in parts[0] + parts[1] + parts[2].replace(".", ""))
        and parts[2].split(".")[1] in "01234567"
        and len(parts[2].split(".")[0]) == 2
    )
    if not ok:
        raise ValidationError(
            where, f"must be a PCI function address like 0000:01:00.0 (got {value!r})"
        )
    return text


def _pci_id(value: Any, where: str) -> str:
    text = str(value).lower()
    vendor, _, device = text.partition(":")
    if (
        len(vendor) != 4
        or len(device) != 4
        or not all(c in "0123456789abcdef" for c in vendor + device)
    ):
        raise ValidationError(where, f"must be vendor:device in hex like 10de:2230 (got {value!r})")
    return text


def _class_code(value: Any, where: str) -> str:
    text = str(value).lower()
    try:
        number = int(text, 16)
    except ValueError:
        number = -1
    if not text.startswith("0x") or not 0 <= number <= 0xFFFFFF:
        raise ValidationError(where, f"must be a PCI class like 0x030000 (got {value!r})")
    return f"0x{number:06x}"


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _card(data: Any, where: str) -> CardSpec:
    d = _as_mapping(data, where)
    address = _pci_address(_req(d, "address", where), f"{where}.address")
    if not address.endswith(".0") and "functions" in d:
        raise ValidationError(f"{where}.address", "a card's display function must be .0")
    model_key = d.get("model")
    model: Model | None = None
    if model_key is not None:
        if model_key not in MODELS:
            raise ValidationError(
                f"{where}.model",
                f"unknown model {model_key!r} (valid: {', '.join(sorted(MODELS))})",
            )
        model = MODELS[model_key]
    if model is None and "pci_id" not in d:
        raise ValidationError(where, "needs model or pci_id")
    pci_id = _pci_id(d.get("pci_id", model.pci_id if model else ""), f"{where}.pci_id")
    class_code = _class_code(
        d.get("class", model.class_code if model else "0x030000"), f"{where}.class"
    )
    subsystem = _pci_id(
        d.get("subsystem_id", model.subsystem_id if model else f"{pci_id[:4]}:0000"),
        f"{where}.subsystem_id",
    )
    driver = _opt_str(d.get("driver"))
    group = d.get("iommu_group")
    if group is not None and (not isinstance(group, int) or group < 0):
        raise ValidationError(
            f"{where}.iommu_group", f"must be an integer >= 0 or null (got {group!r})"
        )
    minor = d.get("minor")
    if minor is not None and (not isinstance(minor, int) or not 0 <= minor < 254):
        raise ValidationError(f"{where}.minor", f"must be an integer 0..253 (got {minor!r})")
    fns: list[FunctionSpec] = []
    raw_fns = d.get("functions")
    if raw_fns is None and model is not None and model.audio_id is not None:
        raw_fns = [{"function": 1, "pci_id": model.audio_id, "class": "0x040300"}]
    for j, f in enumerate(_as_list(raw_fns, f"{where}.functions")):
        fw = f"{where}.functions[{j}]"
        fd = _as_mapping(f, fw)
        number = _req(fd, "function", fw)
        if not isinstance(number, int) or not 1 <= number <= 7:
            raise ValidationError(f"{fw}.function", f"must be 1..7 (got {number!r})")
        # Siblings follow the card's binding unless told otherwise: vfio-pci takes
        # the audio function with the GPU; the nvidia driver leaves it to snd_hda_intel.
        default_driver = driver if driver == "vfio-pci" else ("snd_hda_intel" if driver else None)
        fns.append(
            FunctionSpec(
                function=number,
                pci_id=_pci_id(_req(fd, "pci_id", fw), f"{fw}.pci_id"),
                class_code=_class_code(fd.get("class", "0x040300"), f"{fw}.class"),
                driver=_opt_str(fd.get("driver", default_driver)),
                driver_override=_opt_str(fd.get("driver_override", d.get("driver_override"))),
                subsystem_id=_opt_str(fd.get("subsystem_id", subsystem)),
            )
        )
    return CardSpec(
        address=address,
        pci_id=pci_id,
        class_code=class_code,
        subsystem_id=subsystem,
        driver=driver,
        driver_override=_opt_str(d.get("driver_override")),
        iommu_group=group,
        minor=minor,
        functions=tuple(fns),
        bridge=_pci_address(d["bridge"], f"{where}.bridge") if d.get("bridge") else None,
    )


def _nvidia(data: Any, reserved: dict[str, int]) -> NvidiaSpec | None:
    if data is None:
        return None
    d = _as_mapping(data, "nvidia")
    flavour = str(d.get("flavour", "open"))
    if flavour not in ("open", "proprietary"):
        raise ValidationError("nvidia.flavour", f"must be open or proprietary (got {flavour!r})")
    majors_raw = _as_mapping(d.get("majors", {}), "nvidia.majors")
    majors: dict[str, int] = {}
    for name, value in majors_raw.items():
        if not str(name).startswith("nvidia"):
            raise ValidationError(f"nvidia.majors.{name}", "names an nvidia* char device")
        if not isinstance(value, int) or not 1 <= value <= 511 or value == NVIDIA_MAJOR:
            raise ValidationError(
                f"nvidia.majors.{name}", f"must be a dynamic major 1..511, not 195 (got {value!r})"
            )
        majors[str(name)] = value
    if "nvidia-uvm" not in majors:
        raise ValidationError("nvidia.majors.nvidia-uvm", "is required (it differs per host)")
    if len(set(majors.values())) != len(majors):
        raise ValidationError("nvidia.majors", f"majors must differ (got {majors})")
    for name, value in majors.items():
        clash = [k for k, v in reserved.items() if v == value]
        if clash:
            raise ValidationError(f"nvidia.majors.{name}", f"{value} is taken by {clash[0]}")
    # nvidia.ko itself registers these regions (open-gpu-kernel-modules: nv-caps.c,
    # nv-caps-imex.c, linux_nvswitch.c, nvlink): /proc/devices always lists them once
    # it is loaded (seen on the H200 host). Give the ones not described free majors.
    used = set(majors.values()) | set(reserved.values())
    candidate = 234
    for name in _NVIDIA_KO_REGIONS:
        if name in majors:
            continue
        while candidate in used:
            candidate += 1
        majors[name] = candidate
        used.add(candidate)
    return NvidiaSpec(
        loaded=bool(d.get("loaded", False)),
        version=str(_req(d, "version", "nvidia")),
        flavour=flavour,
        majors=majors,
        modeset=bool(d.get("modeset", True)),
    )


def _vm(data: Any, where: str) -> VmSpec:
    d = _as_mapping(data, where)
    vmid = _req(d, "vmid", where)
    if not isinstance(vmid, int) or not 100 <= vmid <= 999_999_999:
        raise ValidationError(f"{where}.vmid", f"must be an integer 100..999999999 (got {vmid!r})")
    hostpci = tuple(str(h) for h in _as_list(d.get("hostpci"), f"{where}.hostpci"))
    if len(hostpci) > 16:
        raise ValidationError(f"{where}.hostpci", "at most 16 entries (hostpci0..15)")
    args = str(d.get("args", "") or "")
    if "\n" in args:
        raise ValidationError(f"{where}.args", "one line of QEMU arguments")
    return VmSpec(
        vmid=vmid,
        name=str(d.get("name", f"vm{vmid}")),
        running=bool(d.get("running", False)),
        hostpci=hostpci,
        pid=int(d.get("pid", 10_000 + vmid)),
        extra=str(d.get("extra", "")),
        args=args,
    )


def _process(data: Any, where: str) -> ProcessSpec:
    d = _as_mapping(data, where)
    pid = _req(d, "pid", where)
    if not isinstance(pid, int) or not 2 <= pid <= 4_194_304:
        raise ValidationError(f"{where}.pid", f"must be a pid 2..4194304 (got {pid!r})")
    cmdline = d.get("cmdline", ["/usr/bin/qemu-system-x86_64"])
    if isinstance(cmdline, str):
        cmdline = cmdline.split()
    groups = _as_list(d.get("vfio_groups"), f"{where}.vfio_groups")
    if not all(isinstance(g, int) and g >= 0 for g in groups):
        raise ValidationError(f"{where}.vfio_groups", f"IOMMU group numbers (got {groups!r})")
    return ProcessSpec(pid, tuple(str(a) for a in cmdline), tuple(groups))


def _mapping(ident: str, data: Any) -> MappingSpec:
    where = f"mappings.{ident}"
    d = _as_mapping(data, where)
    maps: list[dict[str, str]] = []
    for j, m in enumerate(_as_list(_req(d, "map", where), f"{where}.map")):
        md = _as_mapping(m, f"{where}.map[{j}]")
        for key in ("node", "path"):
            _req(md, key, f"{where}.map[{j}]")
        maps.append({str(k): str(v) for k, v in md.items()})
    return MappingSpec(ident, _opt_str(d.get("description")), tuple(maps))


def _etc_files(data: Any) -> dict[str, str]:
    files: dict[str, str] = {}
    for rel, text in _as_mapping(data or {}, "etc_files").items():
        parts = Path(str(rel)).parts
        if Path(str(rel)).is_absolute() or ".." in parts or not parts or parts[0] == "pve":
            raise ValidationError(
                f"etc_files.{rel}", "must be a relative path under etc/, outside etc/pve"
            )
        files[str(rel)] = str(text)
    return files


def _packages(data: Any) -> tuple[str, ...]:
    names = [str(p) for p in _as_list(data, "packages")]
    for i, name in enumerate(names):
        if not name or not all(c.isalnum() or c in "+-." for c in name) or not name[0].isalnum():
            raise ValidationError(f"packages[{i}]", f"must be a Debian package name (got {name!r})")
    return tuple(names)


def parse_spec(data: Any) -> HostSpec:
    """Validate a host description (the YAML document) into a :class:`HostSpec`."""
    d = _as_mapping(data, "spec")
    schema = d.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ValidationError("schema", f"must be {SCHEMA!r} (got {schema!r})")
    boot = _as_mapping(d.get("boot", {}), "boot")
    loader = str(boot.get("loader", "grub"))
    if loader not in ("grub", "systemd-boot"):
        raise ValidationError("boot.loader", f"must be grub or systemd-boot (got {loader!r})")
    efi = bool(boot.get("efi", loader == "systemd-boot"))
    if loader == "systemd-boot" and not efi:
        raise ValidationError("boot.efi", "systemd-boot needs efi: true")
    cgroup = d.get("cgroup", 2)
    if cgroup not in (1, 2):
        raise ValidationError("cgroup", f"must be 1 or 2 (got {cgroup!r})")
    pve = _as_mapping(d.get("pve", {}), "pve")
    cards = tuple(_card(c, f"cards[{i}]") for i, c in enumerate(_as_list(d.get("cards"), "cards")))
    others = tuple(
        _card(c, f"other_devices[{i}]")
        for i, c in enumerate(_as_list(d.get("other_devices"), "other_devices"))
    )
    seen: set[str] = set()
    for card in cards + others:
        addresses = [card.address] + [f"{card.slot}.{f.function}" for f in card.functions]
        for a in addresses:
            if a in seen:
                raise ValidationError("cards", f"PCI address {a} appears twice")
            seen.add(a)
    vms = tuple(_vm(v, f"vms[{i}]") for i, v in enumerate(_as_list(d.get("vms"), "vms")))
    if len({v.vmid for v in vms}) != len(vms):
        raise ValidationError("vms", "vmids must be unique")
    processes = tuple(
        _process(p, f"processes[{i}]")
        for i, p in enumerate(_as_list(d.get("processes"), "processes"))
    )
    pids = [v.pid for v in vms if v.running] + [p.pid for p in processes]
    if len(set(pids)) != len(pids):
        raise ValidationError("processes", "pids of running VMs and processes must be unique")
    mappings = tuple(
        _mapping(str(k), v) for k, v in _as_mapping(d.get("mappings", {}) or {}, "mappings").items()
    )
    extra_majors = {
        str(k): int(v)
        for k, v in _as_mapping(d.get("char_majors", {}) or {}, "char_majors").items()
    }
    nvidia = _nvidia(d.get("nvidia"), extra_majors)
    minors = [c.minor for c in cards if c.minor is not None]
    if len(minors) != len(set(minors)):
        raise ValidationError("cards", "NVIDIA device minors must be unique")
    modules = tuple(str(m) for m in _as_list(d.get("modules"), "modules"))
    return HostSpec(
        node=str(_req(d, "node", "spec")),
        kernel_release=str(d.get("kernel_release", "6.8.12-4-pve")),
        pve_version=_opt_str(pve.get("version")),
        pve_release=_opt_str(pve.get("release")),
        pve_repoid=str(pve.get("repoid", "0000000")),
        efi=efi,
        secure_boot=bool(boot.get("secure_boot", False)),
        loader=loader,
        cmdline=str(boot.get("cmdline", "quiet")),
        cgroup=int(cgroup),
        iommu=bool(d.get("iommu", True)),
        modules=modules,
        nvidia=nvidia,
        cards=cards,
        others=others,
        vms=vms,
        mappings=mappings,
        etc_files=_etc_files(d.get("etc_files")),
        extra_char_majors=extra_majors,
        processes=processes,
        packages=_packages(d.get("packages")),
    )


def load_spec(path: str | os.PathLike[str]) -> HostSpec:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError("spec", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError("spec", f"{path} is not valid YAML: {exc}") from None
    return parse_spec(data)


def with_nvidia_loaded(spec: HostSpec, *, version: str | None = None) -> HostSpec:
    """The same host after the NVIDIA driver is installed and loaded (what the driver
    installer stand-in presents): module loaded, cards whose driver is nvidia get minors.
    Cards stay bound as described; releasing vfio cards is vfio_release's job."""
    if spec.nvidia is None:
        raise ValidationError("nvidia", "the description has no nvidia section (majors unknown)")
    nvidia = replace(spec.nvidia, loaded=True, version=version or spec.nvidia.version)
    return replace(spec, nvidia=nvidia)


def with_cards_released(spec: HostSpec, addresses: Sequence[str]) -> HostSpec:
    """The same host after vfio_release gave these cards to the nvidia driver: bound to
    nvidia without a driver_override, minors numbered after the cards already there."""
    known = {c.address for c in spec.cards}
    missing = [a for a in addresses if a not in known]
    if missing:
        raise ValidationError("addresses", f"no such cards on {spec.node}: {', '.join(missing)}")
    taken = [c.minor for c in spec.cards if c.driver == "nvidia" and c.minor is not None]
    minors = iter(m for m in range(256) if m not in taken)
    cards = tuple(
        replace(c, driver="nvidia", driver_override=None, minor=next(minors))
        if c.address in addresses and c.driver != "nvidia"
        else c
        for c in spec.cards
    )
    return replace(spec, cards=cards)


# --------------------------------------------------------------------------- tree


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _symlink(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _rel(from_dir: Path, to: Path) -> str:
    return os.path.relpath(to, from_dir)


def _hex(pci_id: str) -> tuple[str, str]:
    vendor, device = pci_id.split(":")
    return f"0x{vendor}", f"0x{device}"


class _Builder:
    def __init__(self, spec: HostSpec, stage: Path, *, device_nodes: bool) -> None:
        self.spec = spec
        self.stage = stage
        self.sys = stage / "sys"
        self.proc = stage / "proc"
        self.dev = stage / "dev"
        self.device_nodes = device_nodes
        self.bridges: dict[str, str] = {}

    # PCI ----------------------------------------------------------------
    def _bridge_for(self, card: CardSpec) -> str | None:
        domain, bus, _ = card.address.split(":")
        if bus == "00":
            return None
        if card.bridge:
            return card.bridge
        key = f"{domain}:{bus}"
        if key not in self.bridges:
            index = len(self.bridges)
            self.bridges[key] = f"{domain}:00:{1 + index // 8:02x}.{index % 8}"
        return self.bridges[key]

    def _device_dir(self, address: str, bridge: str | None) -> Path:
        domain = address.split(":", maxsplit=1)[0]
        root = self.sys / "devices" / f"pci{domain}:00"
        return root / bridge / address if bridge else root / address

    def _pci_function(
        self,
        address: str,
        bridge: str | None,
        *,
        pci_id: str,
        class_code: str,
        subsystem_id: str | None,
        driver: str | None,
        driver_override: str | None,
        iommu_group: int | None,
    ) -> None:
        ddir = self._device_dir(address, bridge)
        ddir.mkdir(parents=True, exist_ok=True)
        vendor, device = _hex(pci_id)
        sub_v, sub_d = _hex(subsystem_id) if subsystem_id else ("0x0000", "0x0000")
        for name, value in (
            ("vendor", vendor),
            ("device", device),
            ("class", class_code),
            ("subsystem_vendor", sub_v),
            ("subsystem_device", sub_d),
            ("driver_override", driver_override or "(null)"),
            ("enable", "1"),
            ("numa_node", "-1"),
            ("uevent", f"PCI_ID={pci_id.upper()}\nPCI_SLOT_NAME={address}\n"),
        ):
            _write(ddir / name, value + ("" if value.endswith("\n") else "\n"))
        bus_devices = self.sys / "bus" / "pci" / "devices"
        _symlink(bus_devices / address, _rel(bus_devices, ddir))
        if driver:
            drv_dir = self.sys / "bus" / "pci" / "drivers" / driver
            self._driver_dir(driver)
            _symlink(ddir / "driver", _rel(ddir, drv_dir))
            _symlink(drv_dir / address, _rel(drv_dir, ddir))
        groups = self.sys / "kernel" / "iommu_groups"
        if iommu_group is not None and self.spec.iommu:
            gdir = groups / str(iommu_group)
            (gdir / "devices").mkdir(parents=True, exist_ok=True)
            if not (gdir / "type").exists():
                _write(gdir / "type", "DMA\n")
            _symlink(ddir / "iommu_group", _rel(ddir, gdir))
            _symlink(gdir / "devices" / address, _rel(gdir / "devices", ddir))

    def _driver_dir(self, driver: str) -> None:
        drv_dir = self.sys / "bus" / "pci" / "drivers" / driver
        if drv_dir.exists():
            return
        drv_dir.mkdir(parents=True)
        for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
            _write(drv_dir / name, "")
            (drv_dir / name).chmod(0o200)
        module = driver.replace("-", "_")
        _symlink(drv_dir / "module", _rel(drv_dir, self.sys / "module" / module))

    def pci(self) -> None:
        (self.sys / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        (self.sys / "kernel" / "iommu_groups").mkdir(parents=True, exist_ok=True)
        _write(self.sys / "bus" / "pci" / "drivers_probe", "")
        for card in self.spec.cards + self.spec.others:
            bridge = self._bridge_for(card)
            self._pci_function(
                card.address,
                bridge,
                pci_id=card.pci_id,
                class_code=card.class_code,
                subsystem_id=card.subsystem_id,
                driver=card.driver,
                driver_override=card.driver_override,
                iommu_group=card.iommu_group,
            )
            for fn in card.functions:
                self._pci_function(
                    f"{card.slot}.{fn.function}",
                    bridge,
                    pci_id=fn.pci_id,
                    class_code=fn.class_code,
                    subsystem_id=fn.subsystem_id,
                    driver=fn.driver,
                    driver_override=fn.driver_override,
                    iommu_group=card.iommu_group,
                )
        # Loaded PCI drivers register themselves with the bus even when they drive no
        # device (the nvidia module with every card still on vfio-pci).
        nv = self.spec.nvidia
        if nv is not None and nv.loaded:
            self._driver_dir("nvidia")
        for module in self.spec.modules:
            if module in PCI_DRIVER_MODULES:
                self._driver_dir(module)
        for bridge in sorted(self.bridges.values()):
            self._pci_function(
                bridge,
                None,
                pci_id="1022:1483",
                class_code="0x060400",
                subsystem_id="1022:1453",
                driver="pcieport",
                driver_override=None,
                iommu_group=None,
            )

    # modules, proc, dev ------------------------------------------------
    def _loaded_modules(self) -> list[str]:
        mods = list(self.spec.modules)
        nv = self.spec.nvidia
        if nv is not None and nv.loaded:
            mods += ["nvidia", "nvidia_uvm"] + (["nvidia_modeset"] if nv.modeset else [])
        drivers = {c.driver for c in self.spec.cards} | {
            f.driver for c in self.spec.cards for f in c.functions
        }
        if "vfio-pci" in drivers:
            mods += ["vfio", "vfio_pci", "vfio_iommu_type1", "vfio_pci_core"]
        return sorted(set(mods))

    def modules(self) -> None:
        nv = self.spec.nvidia
        for mod in self._loaded_modules():
            mdir = self.sys / "module" / mod
            mdir.mkdir(parents=True, exist_ok=True)
            _write(mdir / "initstate", "live\n")
            if mod.startswith("nvidia") and nv is not None:
                _write(mdir / "version", nv.version + "\n")
        if "nvidia" in self._loaded_modules() and nv is None:
            raise ValidationError("modules", "nvidia listed as loaded but no nvidia section")

    def _nvidia_minors(self) -> dict[str, int]:
        minors: dict[str, int] = {}
        taken = {c.minor for c in self.spec.cards if c.minor is not None}
        next_minor = 0
        for card in sorted(self.spec.cards, key=lambda c: c.address):
            if card.driver != "nvidia":
                continue
            if card.minor is not None:
                minors[card.address] = card.minor
                continue
            while next_minor in taken:
                next_minor += 1
            minors[card.address] = next_minor
            taken.add(next_minor)
        return minors

    def proc_tree(self) -> None:
        spec = self.spec
        nv = spec.nvidia
        loaded = nv is not None and nv.loaded
        majors: list[tuple[int, str]] = list(_BASE_CHAR_MAJORS)
        majors += [(v, k) for k, v in spec.extra_char_majors.items()]
        if loaded and nv is not None:
            majors += [(NVIDIA_MAJOR, "nvidia"), (NVIDIA_MAJOR, "nvidiactl")]
            if nv.modeset:
                majors.append((NVIDIA_MAJOR, "nvidia-modeset"))
            majors += [(v, k) for k, v in nv.majors.items()]
        lines = ["Character devices:"] + [
            f"{m:3d} {n}" for m, n in sorted(majors, key=lambda x: x[0])
        ]
        lines += ["", "Block devices:", "  7 loop", "  8 sd", "259 blkext", ""]
        _write(self.proc / "devices", "\n".join(lines))
        _write(self.proc / "sys" / "kernel" / "osrelease", spec.kernel_release + "\n")
        _write(self.proc / "sys" / "kernel" / "hostname", spec.node + "\n")
        # A new boot id per build: a rebuilt tree is a booted host (ansible.builtin.reboot
        # reads it to see the reboot happen).
        _write(self.proc / "sys" / "kernel" / "random" / "boot_id", f"{uuid.uuid4()}\n")
        _write(
            self.proc / "cmdline",
            f"BOOT_IMAGE=/boot/vmlinuz-{spec.kernel_release} {spec.cmdline}\n",
        )
        if spec.cgroup == 2:
            mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
        else:
            mounts = "tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0\n"
            mounts += "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec 0 0\n"
            for ctl in ("cpu,cpuacct", "devices", "memory", "pids"):
                mounts += f"cgroup /sys/fs/cgroup/{ctl} cgroup rw,nosuid,nodev,noexec,{ctl} 0 0\n"
        _write(
            self.proc / "mounts",
            "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
            "proc /proc proc rw,relatime 0 0\n" + mounts,
        )
        for vm in spec.vms:
            if vm.running:
                argv = [
                    "/usr/bin/kvm",
                    "-id",
                    str(vm.vmid),
                    "-name",
                    f"{vm.name},debug-threads=on",
                    "-pidfile",
                    f"/var/run/qemu-server/{vm.vmid}.pid",
                ]
                _write(self.proc / str(vm.pid) / "cmdline", "\0".join(argv) + "\0")
                self._vfio_fds(vm.pid, self._vm_groups(vm))
        for process in spec.processes:
            _write(self.proc / str(process.pid) / "cmdline", "\0".join(process.cmdline) + "\0")
            self._vfio_fds(process.pid, process.vfio_groups)
        if loaded and nv is not None:
            ndir = self.proc / "driver" / "nvidia"
            if nv.flavour == "open":
                first = (
                    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                    f"{nv.version}  Release Build  (dvs-builder@U22-T1)  {_BUILD_DATE}"
                )
            else:
                first = (
                    f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {nv.version}  {_BUILD_DATE}"
                )
            _write(
                ndir / "version",
                first + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n",
            )
            for address, minor in self._nvidia_minors().items():
                card = next(c for c in spec.cards if c.address == address)
                name = _model_name(card.pci_id)
                digest = hashlib.sha256(f"{spec.node}/{address}".encode()).hexdigest()
                d = digest
                gpu_uuid = f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"
                info = (
                    f"Model: \t\t {name}\nIRQ:   \t\t {100 + minor}\n"
                    f"GPU UUID: \t {gpu_uuid}\n"
                    f"Video BIOS: \t 00.00.00.00.00\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                    f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {address}\n"
                    f"Device Minor: \t {minor}\nGPU Firmware: \t {nv.version}\nGPU Excluded:\t No\n"
                )
                _write(ndir / "gpus" / address / "information", info)

    def _vm_groups(self, vm: VmSpec) -> list[int]:
        """IOMMU groups of the functions a VM's hostpciN / args: name on this node."""
        wanted: list[PciAddress] = []
        for value in vm.hostpci:
            hosts, mapping, _options = parse_hostpci_value(value)
            wanted.extend(hosts)
            for m in self.spec.mappings:
                if m.id != mapping:
                    continue
                local = [e for e in m.maps if e.get("node") == self.spec.node]
                # PVE takes the first free path of a mapping at start: the first here.
                for entry in local[:1]:
                    wanted.extend(PciAddress.parse_hostpci(p) for p in entry["path"].split(";"))
        if vm.args:
            wanted.extend(parse_qemu_args_devices(vm.args))
        groups: list[int] = []
        for card in self.spec.cards + self.spec.others:
            addresses = [card.address] + [f"{card.slot}.{f.function}" for f in card.functions]
            named = any(w.covers(PciAddress.parse_full(a)) for w in wanted for a in addresses)
            if named and card.iommu_group is not None and card.iommu_group not in groups:
                groups.append(card.iommu_group)
        return groups

    def _vfio_fds(self, pid: int, groups: Sequence[int]) -> None:
        """``proc/<pid>/fd``: stdio, then the vfio container and each group, as QEMU."""
        if not self.spec.iommu:
            return
        fd_dir = self.proc / str(pid) / "fd"
        fd_dir.mkdir(parents=True, exist_ok=True)
        targets = ["/dev/null", "/dev/null", "/dev/null", "/dev/vfio/vfio"]
        targets += [f"/dev/vfio/{g}" for g in groups]
        for number, target in enumerate(targets):
            (fd_dir / str(number)).symlink_to(target)

    def dev_tree(self) -> None:
        self.dev.mkdir(parents=True, exist_ok=True)
        nv = self.spec.nvidia
        if nv is None or not nv.loaded:
            return
        nodes: list[tuple[str, int, int, int]] = [("nvidiactl", NVIDIA_MAJOR, 255, 0o666)]
        if nv.modeset:
            nodes.append(("nvidia-modeset", NVIDIA_MAJOR, 254, 0o666))
        for minor in sorted(self._nvidia_minors().values()):
            nodes.append((f"nvidia{minor}", NVIDIA_MAJOR, minor, 0o666))
        uvm = nv.majors["nvidia-uvm"]
        nodes += [("nvidia-uvm", uvm, 0, 0o666), ("nvidia-uvm-tools", uvm, 1, 0o666)]
        caps = nv.majors.get("nvidia-caps")
        if caps is not None:
            nodes += [
                ("nvidia-caps/nvidia-cap1", caps, 1, 0o400),
                ("nvidia-caps/nvidia-cap2", caps, 2, 0o444),
            ]
        if not self.device_nodes:
            return
        for rel, major, minor, mode in nodes:
            path = self.dev / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
            os.chmod(path, mode)

    def sys_misc(self) -> None:
        spec = self.spec
        if spec.efi:
            (self.sys / "firmware" / "efi" / "efivars").mkdir(parents=True, exist_ok=True)
            var = (
                self.sys
                / "firmware"
                / "efi"
                / "efivars"
                / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
            )
            var.write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if spec.secure_boot else b"\x00"))
        cg = self.sys / "fs" / "cgroup"
        if spec.cgroup == 2:
            _write(cg / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
        else:
            _write(cg / "unified" / "cgroup.controllers", "")
            for ctl in ("cpu,cpuacct", "devices", "memory", "pids"):
                (cg / ctl).mkdir(parents=True, exist_ok=True)

    def build(self) -> None:
        self.pci()
        self.modules()
        self.proc_tree()
        self.dev_tree()
        self.sys_misc()


def _model_name(pci_id: str) -> str:
    """The name the driver gives the card (GPU catalogue), as /proc/driver/nvidia shows it."""
    product = gpu_catalogue.by_pci_id(pci_id)
    return product.name if product is not None else "NVIDIA Graphics Device"


# --------------------------------------------------------------------------- files


def _vm_conf(vm: VmSpec) -> str:
    lines = [
        "boot: order=scsi0",
        "cores: 8",
        "machine: q35",
        "memory: 32768",
        f"name: {vm.name}",
        "ostype: l26",
        f"scsi0: local-lvm:vm-{vm.vmid}-disk-0,size=64G",
    ]
    lines += [f"hostpci{i}: {value}" for i, value in enumerate(vm.hostpci)]
    if vm.args:
        lines.append(f"args: {vm.args}")
    text = "\n".join(sorted(lines)) + "\n"
    if vm.extra:
        text += vm.extra if vm.extra.endswith("\n") else vm.extra + "\n"
    return text


def _mapping_section(m: MappingSpec) -> str:
    lines = [m.id]
    if m.description:
        lines.append(f"\tdescription {m.description}")
    for entry in m.maps:
        ordered = sorted(entry.items())
        lines.append("\tmap " + ",".join(f"{k}={v}" for k, v in ordered))
    return "\n".join(lines) + "\n"


def _split_sections(text: str) -> dict[str, str]:
    """SectionConfig text -> section id -> section text (header + indented lines)."""
    sections: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if not line.strip():
            current = None
            continue
        if not line[0].isspace():
            current = line.strip()
            sections[current] = line + "\n"
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def _planned_pve_files(spec: HostSpec, root: Path, replace_existing: bool) -> dict[Path, str]:
    """The /etc/pve files to write, after checking nothing of others' is clobbered."""
    etc_pve = root / "etc" / "pve"
    qemu_dir = etc_pve / "qemu-server"
    if not qemu_dir.exists() and not qemu_dir.is_symlink():
        qemu_dir = etc_pve / "nodes" / spec.node / "qemu-server"
    planned: dict[Path, str] = {}
    for vm in spec.vms:
        path = qemu_dir / f"{vm.vmid}.conf"
        want = _vm_conf(vm)
        if path.exists() and path.read_text(encoding="utf-8") != want and not replace_existing:
            raise ValidationError(
                f"vms[vmid={vm.vmid}]",
                f"{path} exists with other content; not overwriting it (use --replace)",
            )
        planned[path] = want
    if spec.mappings:
        cfg = etc_pve / "mapping" / "pci.cfg"
        existing = _split_sections(cfg.read_text(encoding="utf-8")) if cfg.exists() else {}
        for m in spec.mappings:
            want = _mapping_section(m)
            have = existing.get(m.id)
            if have is not None and have != want and not replace_existing:
                raise ValidationError(
                    f"mappings.{m.id}",
                    f"section exists in {cfg} with other content; not overwriting it "
                    "(use --replace)",
                )
            existing[m.id] = want
        planned[cfg] = "\n".join(existing[k] for k in existing)
    return planned


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o640)
    os.replace(tmp, path)


# Directories every Debian 12 / PVE host has (the roles write into them).
_SYSTEM_DIRS = (
    "etc/modprobe.d",
    "etc/modules-load.d",
    "etc/systemd/system",
    "etc/default",
    "usr/local/lib",
    "usr/local/bin",
    "var/cache",
    "var/lib/dpkg",
    "var/log",
    "boot",
    "run",
    "tmp",
)


def _dpkg_status(spec: HostSpec) -> str:
    """The node's dpkg database (``var/lib/dpkg/status``): its installed packages."""
    entries = []
    for name in spec.packages:
        entries.append(
            f"Package: {name}\nStatus: install ok installed\nPriority: optional\n"
            f"Section: misc\nMaintainer: specops lab <lab@localhost>\nArchitecture: amd64\n"
            f"Version: 0.0-specops-lab\nDescription: {name} (lab node stand-in entry)\n"
        )
    return "\n".join(entries) + ("\n" if entries else "")


def _owned_files(spec: HostSpec, root: Path) -> dict[Path, str]:
    files: dict[Path, str] = {root / "etc" / "hostname": spec.node + "\n"}
    for rel, text in spec.etc_files.items():
        files[root / "etc" / rel] = text if text.endswith("\n") else text + "\n"
        if rel.startswith("modprobe.d/"):
            # The initramfs the host booted with carries its modprobe configuration.
            files[root / INITRAMFS_DIR / rel] = files[root / "etc" / rel]
    files[root / BOOT_CMDLINE] = spec.cmdline + "\n"
    if spec.nvidia is not None:
        files[root / LAB_ETC / "nvidia-majors"] = "".join(
            f"{major} {name}\n" for name, major in sorted(spec.nvidia.majors.items())
        )
    if spec.packages:
        files[root / "var" / "lib" / "dpkg" / "status"] = _dpkg_status(spec)
    for name in spec.packages:
        # A kernel headers package: the tree DKMS and the installer build against.
        for prefix in ("proxmox-headers-", "pve-headers-", "linux-headers-"):
            if name.startswith(prefix):
                kernel = name.removeprefix(prefix)
                files[root / "usr" / "src" / f"linux-headers-{kernel}" / "Makefile"] = (
                    f"# lab stand-in: headers of {kernel}\n"
                )
    if spec.pve_version:
        release = spec.pve_release or ".".join(spec.pve_version.split(".")[:2])
        files[root / "usr" / "share" / "perl5" / "PVE" / "pvecfg.pm"] = (
            "package PVE::pvecfg;\n\nuse strict;\nuse warnings;\n\n"
            "sub package {\n    return 'pve-manager';\n}\n\n"
            f"sub version {{\n    return '{spec.pve_version}';\n}}\n\n"
            f"sub release {{\n    return '{release}';\n}}\n\n"
            f"sub repoid {{\n    return '{spec.pve_repoid}';\n}}\n\n"
            f"sub version_text {{\n    return '{spec.pve_version}/{spec.pve_repoid}';\n}}\n\n1;\n"
        )
    if spec.loader == "systemd-boot" or spec.secure_boot:
        files[root / "etc" / "kernel" / "proxmox-boot-uuids"] = "3F2A-1B4C\n"
    if spec.loader == "systemd-boot":
        files[root / "etc" / "kernel" / "cmdline"] = (
            f"root=ZFS=rpool/ROOT/pve-1 boot=zfs {spec.cmdline}\n"
        )
    else:
        files[root / "etc" / "default" / "grub"] = (
            'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="Proxmox VE"\n'
            f'GRUB_CMDLINE_LINUX_DEFAULT="{spec.cmdline}"\nGRUB_CMDLINE_LINUX=""\n'
        )
    return files


def _swap_nvidia_nodes(staged: Path, dev: Path) -> None:
    """Replace ``dev/nvidia*`` and ``dev/nvidia-caps/`` with the staged ones; other
    nodes under ``dev/`` (the PVE stand-in's, a test's) stay."""
    dev.mkdir(parents=True, exist_ok=True)
    for old in sorted(dev.glob("nvidia*")):
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    if staged.is_dir():
        for new in sorted(staged.iterdir()):
            new.rename(dev / new.name)


def build_tree(
    spec: HostSpec,
    root: str | os.PathLike[str],
    *,
    device_nodes: bool = True,
    replace_existing: bool = False,
    system_files: bool = True,
) -> Path:
    """Materialise ``spec`` under ``root``; returns the root. See the module docstring."""
    root_path = Path(root)
    root_path.mkdir(parents=True, exist_ok=True)
    if device_nodes and os.geteuid() != 0:
        raise ValidationError(
            "device_nodes", "mknod needs root; run as root or pass --no-device-nodes"
        )
    # May refuse: nothing is changed before this returns.
    pve_files = _planned_pve_files(spec, root_path, replace_existing) if system_files else {}
    stage = Path(tempfile.mkdtemp(prefix=".hosttree-", dir=root_path))
    try:
        _Builder(spec, stage, device_nodes=device_nodes).build()
        for name in ("sys", "proc"):
            _swap_dir(stage / name, root_path / name)
        _swap_nvidia_nodes(stage / "dev", root_path / "dev")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    # The node's system files (etc, its dpkg database, the initramfs it booted with);
    # a node's emulated boot rebuilds only the kernel's view (system_files=False).
    for path, text in (_owned_files(spec, root_path) if system_files else {}).items():
        _atomic_write(path, text)
    if system_files:
        for rel in _SYSTEM_DIRS:  # what every Debian/PVE host has, empty or not
            (root_path / rel).mkdir(parents=True, exist_ok=True)
    _vm_run_state(spec, root_path / "run" / "qemu-server")
    etc_pve = root_path / "etc" / "pve"
    node_qemu = etc_pve / "nodes" / spec.node / "qemu-server"
    link = etc_pve / "qemu-server"
    if not link.exists() and not link.is_symlink():
        node_qemu.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"nodes/{spec.node}/qemu-server")
    for path, text in pve_files.items():
        _atomic_write(path, text)
    return root_path


def _swap_dir(new: Path, target: Path) -> None:
    old = target.parent / f".hosttree-old-{target.name}"
    if old.exists():
        shutil.rmtree(old)
    if target.exists() or target.is_symlink():
        target.rename(old)
    new.rename(target)
    if old.exists():
        shutil.rmtree(old)


def _vm_run_state(spec: HostSpec, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for vm in spec.vms:
        # <vmid>.pid + proc/<pid>/cmdline is what a real node has (and what the facts
        # read); <vmid>.running is the PVE stand-in's own flag, kept in step with it.
        for path, text in (
            (run_dir / f"{vm.vmid}.pid", f"{vm.pid}\n"),
            (run_dir / f"{vm.vmid}.running", "0\n"),
        ):
            if vm.running:
                _atomic_write(path, text)
            elif path.exists():
                path.unlink()


# --------------------------------------------------------------------------- CLI


def _cmd_build(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    root = args.root or os.path.join(DEFAULT_LAB_ROOT, spec.node)
    build_tree(spec, root, device_nodes=not args.no_device_nodes, replace_existing=args.replace)
    print(f"built host tree for {spec.node} under {root}")
    return 0


def register(lab_subparsers: Any) -> None:
    """``specops lab hosttree build``: the hook ``specops_lab.cli`` calls with the lab group."""
    hosttree = lab_subparsers.add_parser(
        "hosttree", help="simulated PVE host trees (sysfs, procfs, /dev, /etc/pve)"
    )
    sub = hosttree.add_subparsers(dest="hosttree_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="materialise a host description under a root")
    build.add_argument(
        "--spec", required=True, help="host description YAML (inventory/lab/hardware/<node>.yml)"
    )
    build.add_argument("--root", help=f"node root (default {DEFAULT_LAB_ROOT}/<node>)")
    build.add_argument("--no-device-nodes", action="store_true", help="skip mknod (non-root)")
    build.add_argument(
        "--replace",
        action="store_true",
        help="overwrite VM configs / pci.cfg sections of the same ids that differ",
    )
    build.set_defaults(func=_cmd_build)
