"""GPU facts of a Proxmox VE host, read from sysfs, procfs and ``/etc/pve``.

This is the one home of GPU facts parsing in specops. The ``gpu_facts`` module returns
:func:`gather_facts` as ``ansible_facts.specops_gpu``; every host role reads that shape.

Everything is read from files under configurable roots (:class:`HostRoots`), so the same
code runs on a real node (roots ``/sys``, ``/proc``, ``/etc/pve``, ``/dev``, ...), on a
simulated host tree built by ``specops lab hosttree build``, and on recorded fixtures.
Nothing is executed: no ``lspci``, no ``qm``, no ``pveversion``.

Stdlib only: this file runs on managed hosts, down to Python 3.7 (PVE 6); annotations
are strings and typing-only aliases sit under TYPE_CHECKING.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    Line,
    PveConfError,
    parse_property_string,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    parse as parse_pve_conf,
)

__all__ = [
    "FACTS_SCHEMA_VERSION",
    "BootInfo",
    "CgroupInfo",
    "DeviceNode",
    "GpuCard",
    "GpuFactsError",
    "Holder",
    "HostGpuFacts",
    "HostPciEntry",
    "HostRoots",
    "KnownGpu",
    "NvidiaGpuInfo",
    "NvidiaModule",
    "PciAddress",
    "PciFunction",
    "PciMapping",
    "VfioOpener",
    "facts_summary",
    "gather_facts",
    "gpu_name",
    "parse_hostpci_value",
    "parse_nvidia_information",
    "parse_nvidia_version_text",
    "parse_pci_mapping_cfg",
    "parse_proc_devices",
    "parse_pvecfg",
    "parse_qemu_args_devices",
    "parse_vm_config",
    "pidfile_vm_running",
]

FACTS_SCHEMA_VERSION = 1

NVIDIA_VENDOR = "10de"
# PCI base class 0x03 (display): subclass 0x00 VGA (desktop and workstation cards such
# as the A6000, RTX PRO 6000 Workstation), 0x02 3D controller (data-center cards such
# as the H200). Both hold GPUs.
DISPLAY_CLASSES = {0x0300: "vga", 0x0302: "3d"}

# Char major of /dev/nvidia0..N, /dev/nvidiactl and /dev/nvidia-modeset: fixed by the
# driver. nvidia-uvm and nvidia-caps majors are dynamic and must be read per host.
NVIDIA_FIXED_MAJOR = 195
NVIDIACTL_MINOR = 255
NVIDIA_MODESET_MINOR = 254


class GpuFactsError(Exception):
    """Input that cannot be read as a host's GPU facts; the message names where."""


@dataclass(frozen=True)
class KnownGpu:
    """What the GPU facts say about a product (read from the GPU catalogue)."""

    name: str
    architecture: str
    open_module_required: bool = False


def gpu_name(pci_id: str) -> KnownGpu:
    """The product behind ``vendor:device`` (any case), or a generic fallback.

    Products come from the one GPU catalogue (``module_utils/gpu_catalogue.py``).
    """
    product = gpu_catalogue.by_pci_id(pci_id)
    if product is not None:
        return KnownGpu(product.name, product.architecture, product.open_module_required)
    vendor, _sep, _device = pci_id.lower().partition(":")
    if vendor == NVIDIA_VENDOR:
        return KnownGpu(f"NVIDIA GPU {pci_id.lower()}", "unknown")
    return KnownGpu(f"PCI display device {pci_id.lower()}", "unknown")


# --------------------------------------------------------------------------- roots


@dataclass(frozen=True)
class HostRoots:
    """Where each part of the host's file system is read from.

    ``root`` is the file system root; every other path defaults to a place under it, so
    a simulated host tree needs only ``HostRoots.under(tree)``. Each can be overridden
    alone (the module's ``sys_root``, ``proc_root``, ... options).
    """

    root: str = "/"
    sys: str = ""
    proc: str = ""
    etc_pve: str = ""
    dev: str = ""
    etc: str = ""
    run: str = ""
    usr_share: str = ""
    var_lib: str = ""

    def __post_init__(self) -> None:
        defaults = {
            "sys": "sys",
            "proc": "proc",
            "etc_pve": "etc/pve",
            "dev": "dev",
            "etc": "etc",
            "run": "run",
            "usr_share": "usr/share",
            "var_lib": "var/lib",
        }
        for name, rel in defaults.items():
            if not getattr(self, name):
                object.__setattr__(self, name, os.path.join(self.root, rel))

    @classmethod
    def under(cls, root: str | os.PathLike[str]) -> HostRoots:
        return cls(root=os.fspath(root))


# --------------------------------------------------------------------------- small readers


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except PermissionError:
        return None


def _read_stripped(path: Path) -> str | None:
    text = _read(path)
    return None if text is None else text.strip()


def _link_name(path: Path) -> str | None:
    """Basename of a symlink's target (``driver`` -> ``vfio-pci``), None if absent."""
    try:
        target = os.readlink(path)
    except (FileNotFoundError, NotADirectoryError, OSError):
        return None
    return os.path.basename(target.rstrip("/"))


def _hex_id(text: str | None) -> str | None:
    """``0x10de`` -> ``10de``."""
    if text is None:
        return None
    value = text.strip().lower()
    if value.startswith("0x"):
        value = value[2:]
    if not re.fullmatch(r"[0-9a-f]{1,4}", value):
        return None
    return value.zfill(4)


# --------------------------------------------------------------------------- PCI addresses

_PCI_FULL = re.compile(r"^([0-9a-f]{4,}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
# PVE's HOSTPCIID: [domain:]bus:dev[.func] (qemu-server PVE/QemuServer/PCI.pm $PCIRE: the
# function is one hex digit there; a PCI device has functions 0-7, so .8-.f name nothing).
_PCI_HOSTPCI = re.compile(
    r"^(?:([0-9a-f]{4,}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-9a-f]))?$", re.ASCII
)


@dataclass(frozen=True, order=True)
class PciAddress:
    """A PCI function (``function`` set) or a whole device (``function`` None)."""

    domain: str
    bus: str
    device: str
    function: int | None = None

    @classmethod
    def parse_full(cls, text: str) -> PciAddress:
        match = _PCI_FULL.match(text.strip().lower())
        if not match:
            raise ValueError(f"not a PCI function address DDDD:BB:DD.F: {text!r}")
        return cls(match[1], match[2], match[3], int(match[4]))

    @classmethod
    def parse_hostpci(cls, text: str) -> PciAddress:
        match = _PCI_HOSTPCI.match(text.strip().lower())
        if not match:
            raise ValueError(f"not a PCI address [domain:]bus:dev[.func]: {text!r}")
        func = None if match[4] is None else int(match[4], 16)
        return cls(match[1] or "0000", match[2], match[3], func)

    @property
    def slot(self) -> str:
        return f"{self.domain}:{self.bus}:{self.device}"

    def __str__(self) -> str:
        if self.function is None:
            return self.slot
        return f"{self.slot}.{self.function:x}"

    def covers(self, function_address: PciAddress) -> bool:
        """Whether this (device or function) address names ``function_address``."""
        if self.slot != function_address.slot:
            return False
        return self.function is None or self.function == function_address.function


# --------------------------------------------------------------------------- parsers


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character devices of ``/proc/devices`` as name -> major."""
    majors: dict[str, int] = {}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith(":"):
            section = line[:-1].strip().lower()
            continue
        if section != "character devices":
            continue
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit():
            majors[parts[1].strip()] = int(parts[0])
    return majors


@dataclass(frozen=True)
class NvidiaModule:
    loaded: bool
    version: str | None
    flavour: str | None  # "open" | "proprietary" | None when unknown
    version_source: str | None
    version_text: str | None  # first line of /proc/driver/nvidia/version


_NVRM_VERSION = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)")


def parse_nvidia_version_text(text: str) -> tuple[str | None, str | None]:
    """Version and flavour from ``/proc/driver/nvidia/version``.

    Open: ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...``;
    proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.09 ...``.
    """
    first = next((ln for ln in text.splitlines() if ln.startswith("NVRM version:")), "")
    if not first:
        return None, None
    match = _NVRM_VERSION.search(first)
    version = match[1] if match else None
    flavour = "open" if "Open Kernel Module" in first else "proprietary"
    return version, flavour


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``/proc/driver/nvidia/gpus/<pci>/information``."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            info[key.strip()] = value.strip()
    return info


def parse_pvecfg(text: str) -> dict[str, str]:
    """``version``/``release``/``repoid`` of ``/usr/share/perl5/PVE/pvecfg.pm``.

    That file is generated from pve-manager's ``PVE/pvecfg.pm.in`` and holds
    ``sub version { return '8.3.0'; }`` (older: ``'7.4-3'``), ``sub release``,
    ``sub repoid``: what ``pveversion`` prints, without running it.
    """
    out: dict[str, str] = {}
    for key in ("version", "release", "repoid"):
        match = re.search(
            rf"sub\s+{key}\s*\{{\s*return\s+['\"]([^'\"]*)['\"]\s*;?\s*\}}", text, re.S
        )
        if match:
            out[key] = match[1]
    return out


def _dpkg_version(status_text: str, package: str) -> str | None:
    """Installed version of ``package`` from ``/var/lib/dpkg/status``."""
    for stanza in status_text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1].isspace():
                continue
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields.get("Package") == package and "installed" in fields.get("Status", ""):
            return fields.get("Version")
    return None


# --------------------------------------------------------------------------- /etc/pve


@dataclass(frozen=True)
class HostPciEntry:
    """One ``hostpciN:`` line of a VM config (or its ``args:`` line), parsed.

    ``doubt`` is None for an entry PVE applies as read here. It says why otherwise: PVE
    ignores the line (see :func:`parse_vm_config`), yet specops counts the devices it
    names as held, on purpose.
    """

    vmid: int
    key: str
    file: str
    line: int
    hosts: tuple[PciAddress, ...]
    mapping: str | None
    options: dict[str, str] = field(default_factory=dict)
    doubt: str | None = None


_CONFIGID = re.compile(r"^[a-z][a-z0-9_-]+$", re.I)

# qemu-server PVE/QemuServer/PCI.pm (at e6352be6, the commit of ../shared/pve-fixtures):
# $MAX_HOSTPCI_DEVICES (hostpci0..hostpci15), $PCIRE and $hostpci_fmt, the format
# PVE::JSONSchema::parse_property_string checks each value against: the default key
# `host` may stand anywhere without its name, empty items are skipped, a key given
# twice or one the format does not know makes the whole value invalid, and each value
# must match its pattern (anchored, case-sensitive), enum or boolean.
MAX_HOSTPCI = 16
HOSTPCI_KEYS = frozenset(f"hostpci{i}" for i in range(MAX_HOSTPCI))
_PVE_PCIRE = r"(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?"
_PVE_BOOLEAN = re.compile(r"^(?:1|0|on|off|yes|no|true|false)$", re.I)


def _matches(pattern: str, flags: int = 0) -> Callable[[str], bool]:
    compiled = re.compile(pattern, flags | re.ASCII)
    return lambda value: compiled.fullmatch(value) is not None


_HOSTPCI_FORMAT: dict[str, tuple[Callable[[str], bool], str]] = {
    "host": (_matches(rf"{_PVE_PCIRE}(?:;{_PVE_PCIRE})*"), "[domain:]bus:dev[.func][;...]"),
    "mapping": (_matches(r"[a-z][a-z0-9_-]+", re.I), "a mapping id ([a-z][a-z0-9_-]+)"),
    "rombar": (lambda v: _PVE_BOOLEAN.match(v) is not None, "a boolean (1|0|on|off|...)"),
    "romfile": (_matches(r"[^,;]+"), "a file name without ',' or ';'"),
    "pcie": (lambda v: _PVE_BOOLEAN.match(v) is not None, "a boolean (1|0|on|off|...)"),
    "x-vga": (lambda v: _PVE_BOOLEAN.match(v) is not None, "a boolean (1|0|on|off|...)"),
    "legacy-igd": (lambda v: _PVE_BOOLEAN.match(v) is not None, "a boolean (1|0|on|off|...)"),
    "mdev": (_matches(r"[^/.:]+"), "a mediated device type without '/', '.' or ':'"),
    "vendor-id": (_matches(r"0x[0-9a-fA-F]{4}"), "a hex id like 0x10de"),
    "device-id": (_matches(r"0x[0-9a-fA-F]{4}"), "a hex id like 0x2230"),
    "sub-vendor-id": (_matches(r"0x[0-9a-fA-F]{4}"), "a hex id like 0x10de"),
    "sub-device-id": (_matches(r"0x[0-9a-fA-F]{4}"), "a hex id like 0x1459"),
    "driver": (lambda v: v in ("vfio", "keep"), "vfio or keep"),
}


def parse_hostpci_value(value: str) -> tuple[tuple[PciAddress, ...], str | None, dict[str, str]]:
    """``host=`` addresses, ``mapping=`` id and other options of a hostpci value, read
    as PVE reads it (qemu-server ``parse_hostpci``: the property string, then exactly
    one of ``host`` and ``mapping``).

    Raises ValueError saying why PVE would not use the value: its config parser ignores
    a value that does not match the format, and a VM whose value names neither or both
    of host and mapping does not start. :func:`parse_vm_config` adds file and line.
    """
    if not value.strip():
        raise ValueError("empty value")
    try:
        options = parse_property_string(value, "host")
    except PveConfError as exc:
        raise ValueError(str(exc)) from None
    for key, val in options.items():
        if key not in _HOSTPCI_FORMAT:
            raise ValueError(
                f"invalid key {key!r} (PVE knows: {', '.join(sorted(_HOSTPCI_FORMAT))})"
            )
        check, want = _HOSTPCI_FORMAT[key]
        if not check(val):
            raise ValueError(f"{key}={val!r} is not {want}")
    host = options.pop("host", None)
    mapping = options.pop("mapping", None)
    if host is not None and mapping is not None:
        raise ValueError("host= and mapping= are mutually exclusive")
    if host is None and mapping is None:
        raise ValueError("needs host=<[domain:]bus:dev[.func][;...]> or mapping=<id>")
    addresses = tuple(PciAddress.parse_hostpci(item) for item in (host or "").split(";") if host)
    return addresses, mapping, options


def _hostpci_in_doubt(value: str) -> tuple[tuple[PciAddress, ...], tuple[str, ...]]:
    """The devices a hostpci value PVE ignores still names, read leniently (items split
    on ',', ``host``/``mapping`` keys in any case, several of them, addresses in any
    case, empty ``;`` items skipped). ValueError when a named device is unreadable."""
    hosts: list[PciAddress] = []
    mappings: list[str] = []
    for part in value.split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        key, val = key.strip().lower(), val.strip()
        if not sep:
            key, val = "host", part.strip()
        if key == "host":
            hosts.extend(PciAddress.parse_hostpci(item) for item in val.split(";") if item.strip())
        elif key == "mapping":
            if not _CONFIGID.match(val):
                raise ValueError(
                    f"mapping id {val!r} is not a valid PVE config id ([a-z][a-z0-9_-]+)"
                )
            mappings.append(val)
    return tuple(hosts), tuple(mappings)


# A main-section line PVE cannot read at all but that looks like a hostpci entry
# (`HOSTPCI0: ...`, `hostpci0 = ...`, `hostpci0:` without a value).
_HOSTPCI_LIKE = re.compile(r"^\s*(hostpci\d+)\s*[:=]\s*(.*?)\s*$", re.I | re.ASCII)
_HOSTPCI_KEY = re.compile(r"^hostpci\d+$")
_VALID_FORMS = "valid: 'host=[domain:]bus:dev[.func][;...][,opt=val...]' or 'mapping=<id>[,...]'"


def parse_qemu_args_devices(value: str) -> tuple[PciAddress, ...]:
    """PCI addresses that ``-device vfio-pci,host=...`` (or ``sysfsdev=...``) items of a
    VM's ``args:`` line pass through; QEMU then holds them like a ``hostpciN`` entry.

    PVE appends ``args:`` to QEMU's command line split like a shell would
    (``PVE::Tools::split_args``). Raises ValueError for a vfio-pci device without a
    readable address (QEMU would not start with it either).
    """
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"cannot split the QEMU arguments: {exc}") from None
    found: list[PciAddress] = []
    for i, word in enumerate(words):
        if word in ("-device", "--device") and i + 1 < len(words):
            spec = words[i + 1]
        elif word.startswith(("-device=", "--device=")):
            spec = word.split("=", 1)[1]
        else:
            continue
        items = spec.split(",")
        driver = items[0][len("driver=") :] if items[0].startswith("driver=") else items[0]
        if driver != "vfio-pci":
            continue
        props = dict(item.split("=", 1) for item in items[1:] if "=" in item)
        if "host" in props:
            found.append(PciAddress.parse_hostpci(props["host"]))
        elif "sysfsdev" in props:
            found.append(PciAddress.parse_hostpci(os.path.basename(props["sysfsdev"].rstrip("/"))))
        else:
            raise ValueError(f"-device {spec}: a vfio-pci device needs host= or sysfsdev=")
    return tuple(found)


def parse_vm_config(
    text: str, vmid: int, file: str, warnings: list[str] | None = None
) -> list[HostPciEntry]:
    """The PCI devices a VM's current config passes through, in line order: its
    ``hostpciN:`` entries, and ``-device vfio-pci,host=...`` items of its ``args:`` line
    (one entry with key ``args``).

    The config is read as PVE reads it (qemu-server ``parse_vm_config``, through
    :func:`pve_conf.parse` with ``kind="qemu"``): the current config is the main
    section, which only a whole-line ``[...]`` header ends (``[PENDING]``, a snapshot,
    ``[special:...]``, an unknown section; an indented or unclosed ``[`` line ends
    nothing); ``hostpci0`` .. ``hostpci15`` are its keys, each value is read as
    :func:`parse_hostpci_value` reads it, and a later line of a key replaces an earlier
    one when PVE can read it (the replaced line holds nothing, a warning says so); the
    last ``args:`` line is the one QEMU gets.

    Stricter than PVE on purpose (a card counts as held when in doubt; ``doubt`` says
    why, and so does a warning): a line PVE ignores although it looks like a hostpci
    entry (a value PVE's format refuses, such as an upper-case id or an unknown option,
    one that names both or neither of host and mapping so the VM cannot start,
    ``hostpci16`` and above, ``HOSTPCI0:``) still counts for every device it names; so
    do a template's entries (``template: 1``: PVE never starts it, and leaves them out
    of the command line it builds to back it up). A pending change (``[PENDING]``) is
    not counted: QEMU gets it at the next start, when the facts are read again.

    A device such a line names that cannot be read at all (``host=zz``) raises
    :class:`GpuFactsError` naming the file, line and key: specops cannot tell which card
    the VM was meant to hold.
    """
    notes: list[str] = [] if warnings is None else warnings
    conf = parse_pve_conf(text, kind="qemu")
    applied: dict[str, HostPciEntry] = {}
    doubtful: list[HostPciEntry] = []
    args: tuple[int, str] | None = None
    for number, line in enumerate(conf.main.lines, start=1):
        if line.kind == "key" and line.key == "args":
            args = (number, line.value)
            continue
        key, value, why = _hostpci_line(line)
        if key is None:
            continue
        where = _Where(vmid, file, number, key)
        if why is not None:
            doubtful.extend(_in_doubt(where, value, why, notes))
            continue
        try:
            hosts, mapping, options = parse_hostpci_value(value)
        except ValueError as exc:
            doubtful.extend(_in_doubt(where, value, str(exc), notes))
            continue
        earlier = applied.get(key)
        if earlier is not None:
            notes.append(
                f"{file}:{earlier.line}: {key}: replaced by line {number} (PVE applies "
                "the later line of a key): this one holds nothing"
            )
        applied[key] = HostPciEntry(vmid, key, file, number, hosts, mapping, options)
    if conf.get_bool("template"):
        why = "a template: PVE never starts it"
        applied = {k: dataclasses.replace(e, doubt=why) for k, e in applied.items()}
    entries = list(applied.values()) + doubtful
    if args is not None:
        number, value = args
        try:
            hosts = parse_qemu_args_devices(value)
        except ValueError as exc:
            raise GpuFactsError(f"{file}:{number}: args: {exc}") from None
        if hosts:
            entries.append(HostPciEntry(vmid, "args", file, number, hosts, None, {}))
    return sorted(entries, key=lambda e: e.line)


def _hostpci_line(line: Line) -> tuple[str | None, str, str | None]:
    """(key, value, why PVE does not use it or None) of a main-section line that is or
    looks like a hostpci entry; key None for any other line."""
    if line.kind == "invalid":
        like = _HOSTPCI_LIKE.match(line.value)
        if like:
            return like[1], like[2], "PVE cannot parse the line"
        return None, "", None
    if line.kind != "key" or not _HOSTPCI_KEY.match(line.key):
        return None, "", None
    if line.key not in HOSTPCI_KEYS:
        return line.key, line.value, f"PVE knows hostpci0..hostpci{MAX_HOSTPCI - 1}"
    return line.key, line.value, None


@dataclass(frozen=True)
class _Where:
    vmid: int
    file: str
    line: int
    key: str


def _in_doubt(where: _Where, value: str, why: str, notes: list[str]) -> list[HostPciEntry]:
    """The entries a line PVE does not use still counts for (see parse_vm_config)."""
    head = f"{where.file}:{where.line}: {where.key}"
    try:
        hosts, mappings = _hostpci_in_doubt(value)
    except ValueError as exc:
        raise GpuFactsError(
            f"{head}: {exc} (got {value!r}; {_VALID_FORMS}); PVE does not use this line "
            f"({why}), specops cannot tell which device it names: fix the line"
        ) from None
    if not hosts and not mappings:
        notes.append(f"{head}: PVE does not use this line ({why}); it names no device")
        return []
    named = [str(h) for h in hosts] + [f"mapping {m}" for m in mappings]
    notes.append(
        f"{head}: PVE does not use this line ({why}); specops counts {', '.join(named)} as "
        f"held by VM {where.vmid} until the line is fixed"
    )
    out = [HostPciEntry(where.vmid, where.key, where.file, where.line, hosts, None, {}, why)]
    out = out if hosts else []
    out.extend(
        HostPciEntry(where.vmid, where.key, where.file, where.line, (), m, {}, why)
        for m in mappings
    )
    return out


@dataclass(frozen=True)
class PciMapping:
    """One cluster PCI mapping (``/etc/pve/mapping/pci.cfg``) entry for one node."""

    mapping: str
    node: str
    paths: tuple[PciAddress, ...]
    pci_id: str | None
    iommugroup: int | None


def parse_pci_mapping_cfg(text: str, file: str) -> dict[str, list[PciMapping]]:
    """``/etc/pve/mapping/pci.cfg`` (a PVE SectionConfig) as mapping id -> node entries.

    Format (pve-guest-common ``PVE/Mapping/PCI.pm``): a section header line holding the
    mapping id alone, then indented ``key value`` lines; ``map`` repeats, one per node,
    as a property string ``id=10de:2230,iommugroup=14,node=pve-a,path=0000:01:00[;...]``.
    """
    result: dict[str, list[PciMapping]] = {}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            if not raw.strip():
                current = None
            continue
        if not raw[0].isspace():
            ident = raw.strip()
            if " " in ident or "\t" in ident:
                raise GpuFactsError(f"{file}:{number}: bad section header {ident!r}")
            current = ident
            result.setdefault(current, [])
            continue
        if current is None:
            raise GpuFactsError(f"{file}:{number}: property outside a section: {raw.strip()!r}")
        key, _sep, value = raw.strip().partition(" ")
        if key != "map":
            continue
        props: dict[str, str] = {}
        for part in value.strip().split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise GpuFactsError(f"{file}:{number}: map: item {part!r} has no '='")
            props[k.strip()] = v.strip()
        if "node" not in props or "path" not in props:
            raise GpuFactsError(f"{file}:{number}: map: needs node= and path= (got {value!r})")
        try:
            paths = tuple(PciAddress.parse_hostpci(p) for p in props["path"].split(";"))
        except ValueError as exc:
            raise GpuFactsError(f"{file}:{number}: map: path: {exc}") from None
        group = props.get("iommugroup")
        result[current].append(
            PciMapping(
                mapping=current,
                node=props["node"],
                paths=paths,
                pci_id=props.get("id", "").lower() or None,
                iommugroup=int(group) if group and group.isdigit() else None,
            )
        )
    return result


# --------------------------------------------------------------------------- VM running


def pidfile_vm_running(roots: HostRoots) -> Callable[[int], bool]:
    """The check ``qm status`` makes, from files: ``<run>/qemu-server/<vmid>.pid`` names a
    live process (``<proc>/<pid>`` exists) whose command line is that VM's QEMU (``-id
    <vmid>`` or the pidfile path in it). Works on a real node and on a simulated tree.
    """

    def running(vmid: int) -> bool:
        pidfile = Path(roots.run) / "qemu-server" / f"{vmid}.pid"
        text = _read_stripped(pidfile)
        if not text or not text.isdigit():
            return False
        proc_dir = Path(roots.proc) / text
        if not proc_dir.is_dir():
            return False
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        args = [a.decode("utf-8", "replace") for a in cmdline]
        for i, arg in enumerate(args[:-1]):
            if arg == "-id" and args[i + 1] == str(vmid):
                return True
            if arg == "-pidfile" and args[i + 1].endswith(f"/qemu-server/{vmid}.pid"):
                return True
        return False

    return running


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class PciFunction:
    address: str
    pci_id: str
    vendor_id: str
    device_id: str
    subsystem_id: str | None
    class_code: str  # "0x030000"
    class_kind: str  # vga, 3d, audio, usb, serial, other
    driver: str | None
    driver_override: str | None
    iommu_group: int | None


@dataclass(frozen=True)
class NvidiaGpuInfo:
    minor: int | None
    model: str | None
    uuid: str | None
    bus_location: str | None
    device_node: str | None  # /dev/nvidiaN when present under the dev root


@dataclass(frozen=True)
class Holder:
    vmid: int
    running: bool
    config: str
    key: str
    line: int
    via: str  # "host" (hostpciN host=), "mapping" (hostpciN mapping=) or "args" (-device)
    mapping: str | None
    functions: list[str]  # which of this card's functions the entry names
    exclusive: bool  # False when a mapping lists several candidate paths


@dataclass(frozen=True)
class VfioOpener:
    """A process that has the card's vfio device open (``/dev/vfio/<group>``,
    ``/dev/vfio/noiommu-<group>`` or its ``/dev/vfio/devices/vfioN`` cdev): a QEMU of a
    PVE VM (``vmid`` from ``/run/qemu-server/<vmid>.pid``) or any other program."""

    pid: int
    command: str  # argv[0] of /proc/<pid>/cmdline ('' when unreadable)
    vmid: int | None
    path: str  # the device it holds open


@dataclass(frozen=True)
class GpuCard:
    address: str
    slot: str
    pci_id: str
    subsystem_id: str | None
    name: str
    architecture: str
    open_module_required: bool  # only NVIDIA's open kernel modules drive it (catalogue)
    class_code: str
    class_kind: str
    driver: str | None
    driver_override: str | None
    iommu_group: int | None
    iommu_group_members: list[str]
    iommu_group_foreign: list[str]
    functions: list[PciFunction]
    nvidia: NvidiaGpuInfo | None
    holders: list[Holder]
    held_by_running_vm: int | None
    free: bool  # no running VM holds it and no process has its vfio device open
    open_by: list[VfioOpener] = field(default_factory=list)


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int
    minor: int


@dataclass(frozen=True)
class BootInfo:
    loader: str  # "grub" | "systemd-boot"
    efi: bool
    secure_boot: bool | None
    proxmox_boot_tool: bool
    cmdline_file: str
    evidence: list[str]


@dataclass(frozen=True)
class CgroupInfo:
    version: int | None
    hybrid: bool
    source: str | None


@dataclass(frozen=True)
class HostGpuFacts:
    schema_version: int
    node: str | None
    kernel_release: str | None
    pve_version: str | None
    pve_release: str | None
    boot: BootInfo
    cgroup: CgroupInfo
    iommu_enabled: bool
    nvidia_module: NvidiaModule
    nouveau_loaded: bool
    modules_loaded: dict[str, bool]
    char_majors: dict[str, int]
    uvm_major: int | None
    caps_major: int | None
    device_nodes: list[DeviceNode]
    gpus: list[GpuCard]
    other_display: list[PciFunction]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_CLASS_KINDS = {0x0300: "vga", 0x0302: "3d", 0x0403: "audio", 0x0C03: "usb", 0x0C80: "serial"}


def _read_function(sys_root: Path, name: str) -> PciFunction | None:
    dev = sys_root / "bus" / "pci" / "devices" / name
    vendor = _hex_id(_read(dev / "vendor"))
    device = _hex_id(_read(dev / "device"))
    class_text = _read_stripped(dev / "class")
    if vendor is None or device is None or class_text is None:
        return None
    try:
        class_value = int(class_text, 16)
    except ValueError:
        return None
    sub_v = _hex_id(_read(dev / "subsystem_vendor"))
    sub_d = _hex_id(_read(dev / "subsystem_device"))
    override = _read_stripped(dev / "driver_override")
    if override in ("(null)", ""):
        override = None
    group = _link_name(dev / "iommu_group")
    return PciFunction(
        address=name,
        pci_id=f"{vendor}:{device}",
        vendor_id=vendor,
        device_id=device,
        subsystem_id=f"{sub_v}:{sub_d}" if sub_v and sub_d else None,
        class_code=f"0x{class_value:06x}",
        class_kind=_CLASS_KINDS.get(class_value >> 8, "other"),
        driver=_link_name(dev / "driver"),
        driver_override=override,
        iommu_group=int(group) if group is not None and group.isdigit() else None,
    )


def _iommu_members(sys_root: Path, group: int | None) -> list[str]:
    if group is None:
        return []
    devices = sys_root / "kernel" / "iommu_groups" / str(group) / "devices"
    try:
        return sorted(p.name for p in devices.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _node_name(roots: HostRoots) -> str | None:
    text = _read_stripped(Path(roots.proc) / "sys" / "kernel" / "hostname")
    if not text:
        text = _read_stripped(Path(roots.etc) / "hostname")
    return text.split(".")[0] if text else None


def _boot_info(roots: HostRoots) -> BootInfo:
    efi_dir = Path(roots.sys) / "firmware" / "efi"
    efi = efi_dir.is_dir()
    secure: bool | None = None
    if efi:
        secure = False
        vars_dir = efi_dir / "efivars"
        try:
            for var in vars_dir.glob("SecureBoot-*"):
                data = var.read_bytes()
                secure = bool(data) and data[-1] == 1
        except OSError:
            secure = None
    uuids = _read(Path(roots.etc) / "kernel" / "proxmox-boot-uuids")
    pbt = bool(uuids and any(ln.strip() for ln in uuids.splitlines()))
    kernel_cmdline = Path(roots.etc) / "kernel" / "cmdline"
    evidence: list[str] = [f"efi={'yes' if efi else 'no'}"]
    evidence.append(f"proxmox-boot-uuids={'yes' if pbt else 'no'}")
    # proxmox-boot-tool syncs ESPs with systemd-boot on EFI, but with GRUB on legacy
    # BIOS and when Secure Boot is on (PVE 8.1+); outside it the node boots GRUB.
    if pbt and efi and not secure:
        loader = "systemd-boot"
        cmdline_file = str(kernel_cmdline)
    else:
        loader = "grub"
        cmdline_file = str(Path(roots.etc) / "default" / "grub")
    if secure:
        evidence.append("secure-boot=on")
    if kernel_cmdline.exists():
        evidence.append("etc/kernel/cmdline present")
    return BootInfo(loader, efi, secure, pbt, cmdline_file, evidence)


def _cgroup_info(roots: HostRoots) -> CgroupInfo:
    mounts = _read(Path(roots.proc) / "mounts")
    if mounts is not None:
        v2_at_root = False
        v2_unified = False
        v1 = False
        for line in mounts.splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            where, fstype = parts[1], parts[2]
            if fstype == "cgroup2":
                if where == "/sys/fs/cgroup":
                    v2_at_root = True
                else:
                    v2_unified = True
            elif fstype == "cgroup":
                v1 = True
        if v2_at_root:
            return CgroupInfo(2, False, "proc/mounts")
        if v1:
            return CgroupInfo(1, v2_unified, "proc/mounts")
    cg = Path(roots.sys) / "fs" / "cgroup"
    if (cg / "cgroup.controllers").exists():
        return CgroupInfo(2, False, "sys/fs/cgroup/cgroup.controllers")
    if (cg / "unified" / "cgroup.controllers").exists():
        return CgroupInfo(1, True, "sys/fs/cgroup/unified")
    return CgroupInfo(None, False, None)


def _nvidia_module(roots: HostRoots) -> NvidiaModule:
    sys_version = _read_stripped(Path(roots.sys) / "module" / "nvidia" / "version")
    proc_text = _read(Path(roots.proc) / "driver" / "nvidia" / "version")
    proc_version, flavour = parse_nvidia_version_text(proc_text) if proc_text else (None, None)
    loaded = (Path(roots.sys) / "module" / "nvidia").is_dir() or proc_text is not None
    if sys_version:
        version, source = sys_version, "sys/module/nvidia/version"
    elif proc_version:
        version, source = proc_version, "proc/driver/nvidia/version"
    else:
        version, source = None, None
    first = proc_text.splitlines()[0].strip() if proc_text and proc_text.strip() else None
    return NvidiaModule(loaded, version, flavour, source, first)


_TRACKED_MODULES = (
    "nvidia",
    "nvidia_uvm",
    "nvidia_modeset",
    "nvidia_drm",
    "nouveau",
    "vfio",
    "vfio_pci",
    "vfio_iommu_type1",
)


def _device_nodes(roots: HostRoots) -> list[DeviceNode]:
    dev = Path(roots.dev)
    candidates: list[Path] = []
    try:
        candidates.extend(sorted(dev.glob("nvidia*")))
        candidates.extend(sorted((dev / "nvidia-caps").glob("nvidia-cap*")))
    except OSError:
        return []
    nodes = []
    for path in candidates:
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISCHR(st.st_mode):
            continue
        rel = "/dev/" + str(path.relative_to(dev))
        nodes.append(DeviceNode(rel, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return nodes


def _vm_entries(roots: HostRoots, warnings: list[str]) -> list[HostPciEntry]:
    qemu_dir = Path(roots.etc_pve) / "qemu-server"
    entries: list[HostPciEntry] = []
    try:
        files = sorted(qemu_dir.glob("*.conf"))
    except OSError:
        return entries
    for conf in files:
        stem = conf.name[: -len(".conf")]
        if not stem.isdigit():
            warnings.append(f"{conf}: not a <vmid>.conf name, skipped")
            continue
        text = _read(conf)
        if text is None:
            continue
        entries.extend(parse_vm_config(text, int(stem), str(conf), warnings))
    return entries


def _read_functions(sys_root: Path, warnings: list[str]) -> dict[str, PciFunction]:
    pci_dir = sys_root / "bus" / "pci" / "devices"
    functions: dict[str, PciFunction] = {}
    try:
        names = sorted(p.name for p in pci_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        warnings.append(f"{pci_dir}: missing, no PCI devices read")
        return functions
    for name in names:
        if not _PCI_FULL.match(name):
            continue
        fn = _read_function(sys_root, name)
        if fn is not None:
            functions[name] = fn
    return functions


# A claim: a hostpci entry and the PCI addresses it names on this node; the flag is
# False when a mapping offers several candidate paths (PVE takes the first available at
# VM start, which files cannot tell), so every candidate counts as possibly held.
if TYPE_CHECKING:
    _Claim = tuple[HostPciEntry, tuple[PciAddress, ...], bool]


def _resolve_claims(
    *,
    entries: list[HostPciEntry],
    mappings: dict[str, list[PciMapping]],
    mapping_file: str,
    node_name: str | None,
    functions: dict[str, PciFunction],
    warnings: list[str],
) -> list[_Claim]:
    claims: list[_Claim] = []
    for entry in entries:
        if entry.mapping is None:
            claims.append((entry, entry.hosts, True))
            continue
        where = f"{entry.file}:{entry.line}: {entry.key}: mapping {entry.mapping!r}"
        if entry.mapping not in mappings:
            warnings.append(f"{where} is not in {mapping_file}")
            continue
        local = [m for m in mappings[entry.mapping] if m.node == node_name]
        if not local:
            warnings.append(f"{where} has no entry for node {node_name!r}")
            continue
        for m in local:
            first = m.paths[0]
            fn0 = functions.get(str(first) if first.function is not None else f"{first}.0")
            if m.pci_id and fn0 is not None and fn0.pci_id != m.pci_id:
                warnings.append(
                    f"{mapping_file}: mapping {m.mapping!r} expects {m.pci_id} at {first}, "
                    f"found {fn0.pci_id} (hardware changed?)"
                )
        paths = tuple(p for m in local for p in m.paths)
        claims.append((entry, paths, len(paths) == 1))
    for entry, paths, _exclusive in claims:
        for p in paths:
            if not any(p.covers(PciAddress.parse_full(a)) for a in functions):
                warnings.append(
                    f"{entry.file}:{entry.line}: {entry.key}: {p} is not a PCI device on this host"
                )
    return claims


def _nvidia_gpu_info(
    roots: HostRoots, primary: PciFunction, warnings: list[str]
) -> NvidiaGpuInfo | None:
    if primary.driver != "nvidia":
        return None
    info_path = Path(roots.proc) / "driver" / "nvidia" / "gpus" / primary.address / "information"
    info_text = _read(info_path)
    info = parse_nvidia_information(info_text) if info_text else {}
    minor_text = info.get("Device Minor")
    minor = int(minor_text) if minor_text and minor_text.isdigit() else None
    if minor is None:
        warnings.append(f"{primary.address}: bound to nvidia but no Device Minor in {info_path}")
    node_path = None
    if minor is not None and (Path(roots.dev) / f"nvidia{minor}").exists():
        node_path = f"/dev/nvidia{minor}"
    return NvidiaGpuInfo(
        minor=minor,
        model=info.get("Model"),
        uuid=info.get("GPU UUID"),
        bus_location=info.get("Bus Location"),
        device_node=node_path,
    )


def _holders(
    fns: list[PciFunction], claims: list[_Claim], is_running: Callable[[int], bool]
) -> list[Holder]:
    holders: list[Holder] = []
    for entry, paths, exclusive in claims:
        named = sorted(
            {f.address for f in fns for p in paths if p.covers(PciAddress.parse_full(f.address))}
        )
        if not named:
            continue
        holders.append(
            Holder(
                vmid=entry.vmid,
                running=is_running(entry.vmid),
                config=entry.file,
                key=entry.key,
                line=entry.line,
                via="mapping" if entry.mapping else ("args" if entry.key == "args" else "host"),
                mapping=entry.mapping,
                functions=named,
                exclusive=exclusive,
            )
        )
    return holders


def _vm_pids(roots: HostRoots) -> dict[int, int]:
    """pid -> vmid of each running PVE VM's QEMU (``<run>/qemu-server/<vmid>.pid``
    naming a live process whose command line is that VM's, as :func:`pidfile_vm_running`)."""
    out: dict[int, int] = {}
    try:
        pidfiles = sorted((Path(roots.run) / "qemu-server").glob("*.pid"))
    except OSError:
        return out
    running = pidfile_vm_running(roots)
    for pidfile in pidfiles:
        text = _read_stripped(pidfile)
        stem = pidfile.name[: -len(".pid")]
        if text and text.isdigit() and stem.isdigit() and running(int(stem)):
            out[int(text)] = int(stem)
    return out


def _vfio_openers(
    roots: HostRoots, functions: dict[str, PciFunction]
) -> dict[str, list[VfioOpener]]:
    """Function address -> processes with its vfio device open, from ``<proc>/*/fd``.

    Whoever holds ``/dev/vfio/<group>`` (or ``noiommu-<group>``) holds every function
    of that IOMMU group; ``/dev/vfio/devices/vfioN`` (iommufd) is the function whose
    ``vfio-dev/vfioN`` it is. Read only when a function is bound to vfio-pci: nothing
    can open a card through vfio otherwise. Unreadable fds (another user's, as non-root)
    are skipped.
    """
    if not any(fn.driver == "vfio-pci" for fn in functions.values()):
        return {}
    by_path = _vfio_paths(roots, functions)
    vm_pids = _vm_pids(roots)
    out: dict[str, list[VfioOpener]] = {}
    try:
        pids = sorted(int(p.name) for p in Path(roots.proc).iterdir() if p.name.isdigit())
    except OSError:
        return out
    for pid in pids:
        fd_dir = Path(roots.proc) / str(pid) / "fd"
        try:
            targets = {os.readlink(fd) for fd in fd_dir.iterdir()}
        except OSError:
            continue
        held = sorted(t for t in targets if t in by_path)
        if not held:
            continue
        try:
            argv0 = (Path(roots.proc) / str(pid) / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            argv0 = b""
        for path in held:
            opener = VfioOpener(pid, argv0.decode("utf-8", "replace"), vm_pids.get(pid), path)
            for address in by_path[path]:
                out.setdefault(address, []).append(opener)
    return out


def _vfio_paths(roots: HostRoots, functions: dict[str, PciFunction]) -> dict[str, list[str]]:
    """vfio device path -> the function addresses whoever opens it holds."""
    by_path: dict[str, list[str]] = {}
    for fn in functions.values():
        if fn.iommu_group is not None:
            for name in (str(fn.iommu_group), f"noiommu-{fn.iommu_group}"):
                by_path.setdefault(f"/dev/vfio/{name}", []).append(fn.address)
        cdev_dir = Path(roots.sys) / "bus" / "pci" / "devices" / fn.address / "vfio-dev"
        try:
            cdevs = [p.name for p in cdev_dir.iterdir()]
        except OSError:
            cdevs = []
        for cdev in cdevs:
            by_path.setdefault(f"/dev/vfio/devices/{cdev}", []).append(fn.address)
    return by_path


def _cards(
    roots: HostRoots,
    functions: dict[str, PciFunction],
    claims: list[_Claim],
    is_running: Callable[[int], bool],
    warnings: list[str],
) -> tuple[list[GpuCard], list[PciFunction]]:
    sys_root = Path(roots.sys)
    by_slot: dict[str, list[PciFunction]] = {}
    for fn in functions.values():
        by_slot.setdefault(PciAddress.parse_full(fn.address).slot, []).append(fn)
    gpus: list[GpuCard] = []
    other_display: list[PciFunction] = []
    openers = _vfio_openers(roots, functions)
    for slot in sorted(by_slot):
        fns = sorted(by_slot[slot], key=lambda f: f.address)
        display = [f for f in fns if int(f.class_code, 16) >> 8 in DISPLAY_CLASSES]
        if not display:
            continue
        primary = display[0]
        if primary.vendor_id != NVIDIA_VENDOR:
            other_display.extend(display)
            continue
        known = gpu_name(primary.pci_id)
        members = _iommu_members(sys_root, primary.iommu_group)
        own = {f.address for f in fns}
        holders = _holders(fns, claims, is_running)
        open_by: list[VfioOpener] = []
        for member in [f.address for f in fns] + members:
            open_by.extend(o for o in openers.get(member, []) if o not in open_by)
        running_holder = next((h.vmid for h in holders if h.running), None)
        if running_holder is None:
            running_holder = next((o.vmid for o in open_by if o.vmid is not None), None)
        gpus.append(
            GpuCard(
                address=primary.address,
                slot=slot,
                pci_id=primary.pci_id,
                subsystem_id=primary.subsystem_id,
                name=known.name,
                architecture=known.architecture,
                open_module_required=known.open_module_required,
                class_code=primary.class_code,
                class_kind=primary.class_kind,
                driver=primary.driver,
                driver_override=primary.driver_override,
                iommu_group=primary.iommu_group,
                iommu_group_members=members,
                iommu_group_foreign=[m for m in members if m not in own],
                functions=[primary] + [f for f in fns if f is not primary],
                nvidia=_nvidia_gpu_info(roots, primary, warnings),
                holders=holders,
                held_by_running_vm=running_holder,
                free=running_holder is None and not open_by,
                open_by=open_by,
            )
        )
    return gpus, other_display


def _pve_version(roots: HostRoots) -> tuple[str | None, str | None]:
    pvecfg = parse_pvecfg(_read(Path(roots.usr_share) / "perl5" / "PVE" / "pvecfg.pm") or "")
    version = pvecfg.get("version")
    if version is None:
        status = _read(Path(roots.var_lib) / "dpkg" / "status")
        version = _dpkg_version(status, "pve-manager") if status else None
    release = pvecfg.get("release")
    if release is None and version:
        release = ".".join(re.split(r"[.-]", version)[:2])
    return version, release


def gather_facts(
    roots: HostRoots | None = None,
    *,
    node: str | None = None,
    vm_running: Callable[[int], bool] | None = None,
) -> HostGpuFacts:
    """Read the host's GPU facts. ``vm_running`` defaults to :func:`pidfile_vm_running`.

    ``node`` names this node in ``/etc/pve/mapping/pci.cfg`` (default: the kernel
    hostname under the proc root, else ``<etc>/hostname``).
    """
    roots = roots or HostRoots()
    warnings: list[str] = []
    sys_root = Path(roots.sys)
    running_check = vm_running or pidfile_vm_running(roots)
    node_name = node or _node_name(roots)
    functions = _read_functions(sys_root, warnings)

    entries = _vm_entries(roots, warnings)
    mapping_file = Path(roots.etc_pve) / "mapping" / "pci.cfg"
    mapping_text = _read(mapping_file)
    mappings = parse_pci_mapping_cfg(mapping_text, str(mapping_file)) if mapping_text else {}
    claims = _resolve_claims(
        entries=entries,
        mappings=mappings,
        mapping_file=str(mapping_file),
        node_name=node_name,
        functions=functions,
        warnings=warnings,
    )

    running_cache: dict[int, bool] = {}

    def is_running(vmid: int) -> bool:
        if vmid not in running_cache:
            running_cache[vmid] = bool(running_check(vmid))
        return running_cache[vmid]

    gpus, other_display = _cards(roots, functions, claims, is_running, warnings)

    groups_dir = sys_root / "kernel" / "iommu_groups"
    iommu_enabled = groups_dir.is_dir() and any(groups_dir.iterdir())
    char_majors = parse_proc_devices(_read(Path(roots.proc) / "devices") or "")
    nvidia_majors = {k: v for k, v in sorted(char_majors.items()) if k.startswith("nvidia")}
    modules_loaded = {m: (sys_root / "module" / m).is_dir() for m in _TRACKED_MODULES}
    pve_version, pve_release = _pve_version(roots)

    return HostGpuFacts(
        schema_version=FACTS_SCHEMA_VERSION,
        node=node_name,
        kernel_release=_read_stripped(Path(roots.proc) / "sys" / "kernel" / "osrelease"),
        pve_version=pve_version,
        pve_release=pve_release,
        boot=_boot_info(roots),
        cgroup=_cgroup_info(roots),
        iommu_enabled=iommu_enabled,
        nvidia_module=_nvidia_module(roots),
        nouveau_loaded=modules_loaded["nouveau"],
        modules_loaded=modules_loaded,
        char_majors=nvidia_majors,
        uvm_major=nvidia_majors.get("nvidia-uvm"),
        caps_major=nvidia_majors.get("nvidia-caps"),
        device_nodes=_device_nodes(roots),
        gpus=gpus,
        other_display=other_display,
        warnings=warnings,
    )


def facts_summary(cards: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per card for messages: ``0000:01:00.0 NVIDIA RTX A6000 vfio-pci free``."""
    lines = []
    for card in cards:
        if card["free"]:
            state = "free"
        elif card.get("held_by_running_vm") is not None:
            state = f"held by running VM {card['held_by_running_vm']}"
        else:
            pids = ", ".join(str(o["pid"]) for o in card.get("open_by") or [])
            state = f"open by process {pids}"
        lines.append(f"{card['address']} {card['name']} {card['driver'] or '-'} {state}")
    return lines
