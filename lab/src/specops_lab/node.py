"""A lab PVE node's system tools: what only its hardware, its kernel or a real PVE host
does, emulated over the node's root (TEST STAND-IN, never pointed at a real host).

A lab node is a directory on this machine that plays the node's ``/``
(``/var/lib/specops/lab/<node>``, built from ``inventory/lab/hardware/<node>.yml`` by
``specops_lab.hosttree``). The host roles run against it with ``specops_host_root`` and
the ``specops.lab.node`` connection, which puts the node's own ``usr/sbin`` and
``usr/bin`` first on PATH. ``specops lab up`` installs these tools there
(:func:`install_tools`), each a shim to ``python -m specops_lab.node --root ROOT TOOL``:

- ``update-initramfs``: records the call and snapshots what an initramfs carries, the
  node's ``etc/modprobe.d`` (and any script an ``install`` line runs), into
  ``boot/specops-lab-initramfs``: the next boot honours exactly that;
- ``update-grub`` / ``proxmox-boot-tool refresh``: the next boot's kernel command line
  from ``etc/default/grub`` / ``etc/kernel/cmdline`` (``boot/specops-lab-cmdline``);
- ``shutdown -r`` / ``reboot``: the node boots again at once (:func:`boot`): every
  process of the node ends, its running containers stop, the kernel's view is rebuilt
  from the hardware description and what is installed (nouveau only when the initramfs
  does not blacklist it; the NVIDIA module the installer stand-in installed, with the
  description's device majors; cards grabbed by ``vfio-pci ids=``, by the specops
  override hook, or by a running VM stay on vfio-pci, the others go to nvidia), a new
  boot id, the enabled units start, the containers with ``onboot: 1`` start;
- ``systemctl``: the node's systemd for its units under ``etc/systemd/system``
  (``show``, ``is-active``, ``is-enabled``, ``enable``, ``disable``, ``start``, ``stop``,
  ``restart``, ``daemon-reload``, ``list-units``, ``list-unit-files``). A unit's commands
  run on this machine with the node's tools first; their program and absolute-path
  arguments resolve under the node root (a program the node lacks comes from this
  machine: coreutils);
- ``dkms status``: the modules registered under ``var/lib/dkms``;
- ``apt-get`` / ``apt-cache``: refuse: a lab node's packages are its description's
  ``packages`` (its dpkg database); nothing is ever installed on this machine.

Calls are recorded in ``var/log/specops-lab/boot-tools.calls`` of the node.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specops.errors import SpecopsError
from specops_lab.paths import BOOT_CMDLINE, INITRAMFS_DIR, LAB_ETC

# specops_lab.hosttree (the hardware descriptions, ~0.1 s to import) is imported where a
# description is read: the node's tools run once per call of a role's command, and most
# (systemctl, update-initramfs) never read one.
if TYPE_CHECKING:
    from specops_lab.hosttree import HostSpec
    from specops_lab.pve.layout import Node

__all__ = [
    "HARDWARE_FILE",
    "TOOLS",
    "boot",
    "booted_spec",
    "initramfs_contents",
    "initramfs_drift",
    "install_tools",
    "main",
    "node_env",
    "stop_node_processes",
]

# Where `specops lab up` keeps the node's hardware description (what a boot rebuilds).
HARDWARE_FILE = LAB_ETC / "hardware.yml"
# The NVIDIA module the installer stand-in installed ("<version> <flavour>").
KMOD_MARK = Path("var/lib/nvidia/specops-standin-kernel-module")
UNIT_STATE = Path("run/specops-lab/units")
CALLS = Path("var/log/specops-lab/boot-tools.calls")
UNIT_DIRS = (Path("etc/systemd/system"), Path("lib/systemd/system"), Path("usr/lib/systemd/system"))
# tool name -> its path in the node (as on Debian 12, merged /usr).
TOOLS: dict[str, str] = {
    "update-initramfs": "usr/sbin/update-initramfs",
    "update-grub": "usr/sbin/update-grub",
    "proxmox-boot-tool": "usr/sbin/proxmox-boot-tool",
    "shutdown": "usr/sbin/shutdown",
    "reboot": "usr/sbin/reboot",
    "systemctl": "usr/bin/systemctl",
    "apt-get": "usr/bin/apt-get",
    "apt-cache": "usr/bin/apt-cache",
    "dkms": "usr/sbin/dkms",
}
_PCI_ADDR = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


class NodeError(SpecopsError):
    """A tool refuses (its message is what the node's tool would print)."""


# --------------------------------------------------------------------------- helpers


def _rel(path: str) -> str:
    return os.path.normpath(path).lstrip("/")


def node_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a node's command runs with: its tools first on PATH."""
    env = dict(os.environ if base is None else base)
    dirs = ["usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"]
    env["PATH"] = ":".join([*(str(root / d) for d in dirs), env.get("PATH", os.defpath)])
    env["SPECOPS_LAB_NODE_ROOT"] = str(root)
    return env


def _record(root: Path, line: str) -> None:
    path = root / CALLS
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(f"{time.time():.0f} {line}\n")


def install_tools(root: Path, python: str = sys.executable) -> list[str]:
    """Put the node's tool shims in place (idempotent); returns those written."""
    from specops_lab.hosttree import load_spec  # noqa: PLC0415  (see the import above)

    spec = load_spec(root / HARDWARE_FILE) if (root / HARDWARE_FILE).is_file() else None
    written = []
    for tool, rel in TOOLS.items():
        if tool == "dkms" and (spec is None or "dkms" not in spec.packages):
            continue
        path = root / rel
        text = (
            "#!/bin/sh\n# specops lab node stand-in (specops_lab.node), not the real tool.\n"
            f"exec {shlex.quote(python)} -m specops_lab.node --root {shlex.quote(str(root))} "
            f'{tool} "$@"\n'
        )
        if path.is_file() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(path)
        written.append(rel)
    return written


# --------------------------------------------------------------------------- boot tools


def _install_scripts(conf_text: str) -> list[str]:
    """Absolute scripts that ``install <module> <cmd>`` lines run."""
    out: list[str] = []
    for line in conf_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "install":
            out.extend(p.rstrip(";") for p in parts[2:] if p.startswith("/") and ".sh" in p)
    return out


def initramfs_contents(root: Path) -> dict[str, str]:
    """What an initramfs built now carries: each modprobe configuration file and the hook
    scripts its ``install`` lines run (paths relative to the snapshot)."""
    out: dict[str, str] = {}
    scripts: list[str] = []
    for conf in sorted((root / "etc" / "modprobe.d").glob("*.conf")):
        text = conf.read_text()
        out[f"modprobe.d/{conf.name}"] = text
        scripts += _install_scripts(text)
    for script in scripts:
        src = root / _rel(script)
        if src.is_file():
            out[f"scripts/{_rel(script)}"] = src.read_text()
    return out


def initramfs_drift(root: Path) -> list[str]:
    """How the initramfs the node would boot differs from one built now (empty: none). A
    boot file changed and no update-initramfs since: the next boot ignores the change."""
    snap = root / INITRAMFS_DIR
    have = {str(f.relative_to(snap)): f.read_text() for f in sorted(snap.rglob("*")) if f.is_file()}
    want = initramfs_contents(root)
    drift = []
    for rel in sorted(set(have) | set(want)):
        if have.get(rel) == want.get(rel):
            continue
        why = "missing" if rel not in have else "differs from its source"
        drift.append(f"/{INITRAMFS_DIR}/{rel}: {why if rel in want else 'its source is gone'}")
    return drift


def update_initramfs(root: Path, args: Sequence[str]) -> int:
    """Snapshot the modprobe configuration (and hook scripts) the initramfs carries."""
    _record(root, "update-initramfs " + " ".join(args))
    snap = root / INITRAMFS_DIR
    tmp = snap.with_name(snap.name + ".new")
    if tmp.exists():
        _rmtree(tmp)
    (tmp / "modprobe.d").mkdir(parents=True)
    for rel, text in initramfs_contents(root).items():
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(text)
    if snap.exists():
        _rmtree(snap)
    tmp.rename(snap)
    print(f"update-initramfs: Generating /boot/initrd.img-{_kernel(root)}")
    return 0


def _rmtree(path: Path) -> None:
    import shutil  # noqa: PLC0415  (only the boot tools remove trees)

    shutil.rmtree(path)


def _kernel(root: Path) -> str:
    try:
        return (root / "proc/sys/kernel/osrelease").read_text().strip()
    except OSError:
        return "unknown"


def _grub_cmdline(text: str) -> str:
    values = {"GRUB_CMDLINE_LINUX": "", "GRUB_CMDLINE_LINUX_DEFAULT": ""}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in values:
            values[key.strip()] = value.strip().strip("'\"")
    return " ".join(
        v for v in (values["GRUB_CMDLINE_LINUX"], values["GRUB_CMDLINE_LINUX_DEFAULT"]) if v
    )


def update_grub(root: Path, args: Sequence[str]) -> int:
    _record(root, "update-grub " + " ".join(args))
    grub = root / "etc/default/grub"
    if not grub.is_file():
        raise NodeError("/usr/sbin/grub-mkconfig: /etc/default/grub: No such file or directory")
    (root / BOOT_CMDLINE).write_text(_grub_cmdline(grub.read_text()) + "\n")
    print("Generating grub configuration file ...\ndone")
    return 0


def proxmox_boot_tool(root: Path, args: Sequence[str]) -> int:
    _record(root, "proxmox-boot-tool " + " ".join(args))
    if not args or args[0] not in ("refresh", "status"):
        raise NodeError(f"proxmox-boot-tool {' '.join(args)}: not emulated (refresh, status)")
    uuids = root / "etc/kernel/proxmox-boot-uuids"
    if not uuids.is_file():
        raise NodeError("E: /etc/kernel/proxmox-boot-uuids does not exist.")
    if args[0] == "status":
        print(f"System currently booted with uefi\n{uuids.read_text().split()[0]} is configured")
        return 0
    cmdline = root / "etc/kernel/cmdline"
    if not cmdline.is_file():
        raise NodeError("E: /etc/kernel/cmdline does not exist.")
    (root / BOOT_CMDLINE).write_text(" ".join(cmdline.read_text().split()) + "\n")
    print("Copying and configuring kernels on /dev/disk/by-uuid/ (lab stand-in)")
    return 0


def dkms(root: Path, args: Sequence[str]) -> int:
    if args and args[0] != "status":
        _record(root, "dkms " + " ".join(args))
        return 0
    base = root / "var/lib/dkms"
    for module_dir in sorted(base.glob("*/*")) if base.is_dir() else []:
        if module_dir.name[0].isdigit():
            print(f"{module_dir.parent.name}/{module_dir.name}, {_kernel(root)}, x86_64: installed")
    return 0


def apt(tool: str, _args: Sequence[str]) -> int:
    raise NodeError(
        f"{tool}: not emulated on a lab node: its packages are its hardware description's "
        "`packages` (inventory/lab/hardware/<node>.yml); nothing is installed on this machine"
    )


# --------------------------------------------------------------------------- boot


def _modprobe_lines(root: Path) -> list[str]:
    out: list[str] = []
    for conf in sorted((root / INITRAMFS_DIR / "modprobe.d").glob("*.conf")):
        out += [ln.split("#", 1)[0].strip() for ln in conf.read_text().splitlines()]
    return [ln for ln in out if ln]


def _vfio_ids(lines: Sequence[str], cmdline: str) -> set[str]:
    ids: set[str] = set()
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "options" and parts[1] in ("vfio-pci", "vfio_pci"):
            for opt in parts[2:]:
                key, _, value = opt.partition("=")
                if key == "ids":
                    ids |= {i.lower() for i in value.split(",") if i}
    for token in cmdline.split():
        key, _, value = token.partition("=")
        if key in ("vfio-pci.ids", "vfio_pci.ids"):
            ids |= {i.lower() for i in value.split(",") if i}
    return ids


def _pinned(root: Path, lines: Sequence[str]) -> set[str]:
    """Addresses an ``install vfio-pci <script>`` hook pins to vfio-pci at boot."""
    out: set[str] = set()
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "install" and parts[1] in ("vfio-pci", "vfio_pci"):
            for script in _install_scripts(line):
                path = root / INITRAMFS_DIR / "scripts" / _rel(script)
                if path.is_file():
                    out |= {
                        m
                        for ln in path.read_text().splitlines()
                        if "vfio-pci" in ln and "driver_override" in ln
                        for m in _PCI_ADDR.findall(ln)
                    }
    return out


def _blacklisted(lines: Sequence[str], cmdline: str) -> set[str]:
    out = {ln.split()[1] for ln in lines if ln.split()[0] == "blacklist" and len(ln.split()) > 1}
    for token in cmdline.split():
        key, _, value = token.partition("=")
        if key == "modprobe.blacklist":
            out |= set(value.split(","))
    return {m.replace("-", "_") for m in out}


def _vm_slots(spec: HostSpec) -> set[str]:
    """PCI slots (``0000:41:00``) that running VMs hold, by ``host=`` or ``mapping=``."""
    maps = {
        m.id: [e.get("path", "") for e in m.maps if e.get("node") == spec.node]
        for m in spec.mappings
    }
    out: set[str] = set()
    for vm in spec.vms:
        if not vm.running:
            continue
        for entry in vm.hostpci:
            first = entry.split(",", 1)[0]
            key, sep, value = first.partition("=")
            if not sep:
                key, value = "host", first
            paths = maps.get(value, []) if key == "mapping" else value.split(";")
            for path in paths:
                slot = path if path.count(":") == 2 else f"0000:{path}"
                out.add(slot.lower().rsplit(".", 1)[0] if "." in slot else slot.lower())
    return out


def booted_spec(root: Path) -> HostSpec:
    """The node as it comes up from a boot now: its description, what is installed on
    it, and what its initramfs and kernel command line say."""
    from specops_lab.hosttree import CardSpec, FunctionSpec, load_spec  # noqa: PLC0415

    spec = load_spec(root / HARDWARE_FILE)
    lines = _modprobe_lines(root)
    cmdline_file = root / BOOT_CMDLINE
    cmdline = cmdline_file.read_text().strip() if cmdline_file.is_file() else spec.cmdline
    black = _blacklisted(lines, cmdline)
    ids = _vfio_ids(lines, cmdline)
    pinned = _pinned(root, lines)
    held = _vm_slots(spec)
    nvidia = spec.nvidia
    mark = root / KMOD_MARK
    installed = mark.read_text().split() if mark.is_file() else []
    nvidia_loads = nvidia is not None and len(installed) == 2 and "nvidia" not in black
    if nvidia is not None:
        nvidia = replace(
            nvidia,
            loaded=nvidia_loads,
            version=installed[0] if nvidia_loads else nvidia.version,
            flavour=installed[1] if nvidia_loads else nvidia.flavour,
        )
    modules = tuple(m for m in spec.modules if m.replace("-", "_") not in black)

    def vfio(address: str, slot: str, pci_id: str) -> bool:
        return pci_id in ids or address in pinned or slot in held

    cards: list[CardSpec] = []
    for card in spec.cards:
        on_vfio = vfio(card.address, card.slot, card.pci_id)
        driver = "vfio-pci" if on_vfio else ("nvidia" if nvidia_loads else None)
        override = "vfio-pci" if card.address in pinned or card.slot in held else None
        fns: list[FunctionSpec] = []
        for fn in card.functions:
            address = f"{card.slot}.{fn.function}"
            fn_vfio = on_vfio or vfio(address, card.slot, fn.pci_id)
            fns.append(
                replace(
                    fn,
                    driver="vfio-pci"
                    if fn_vfio
                    else ("snd_hda_intel" if "snd_hda_intel" in modules else None),
                    driver_override="vfio-pci" if address in pinned or card.slot in held else None,
                )
            )
        cards.append(
            replace(card, driver=driver, driver_override=override, minor=None, functions=tuple(fns))
        )
    return replace(spec, nvidia=nvidia, modules=modules, cards=tuple(cards), cmdline=cmdline)


def _go_down(root: Path, say: Any) -> Node | None:
    """The first half of a reboot: the running containers stop, the node's processes end."""
    from specops_lab.pve.layout import Node  # noqa: PLC0415  (boot only)
    from specops_lab.pve.pct import ct_status, ct_stop, list_cts  # noqa: PLC0415

    node = Node.from_root(root) if (root / "etc" / "specops-lab-node.json").is_file() else None
    if node is not None:
        for vmid in list_cts(node):
            if ct_status(node, vmid).status == "running":
                ct_stop(node, vmid)
                say(f"{node.name}: CT {vmid} stopped by the reboot")
    stop_node_processes(root)
    return node


# A lab fault (issue 31): the node's next reboot does not come back. While this file is
# under the node's root, a reboot takes the node down (its containers stop, its
# processes end, its boot id goes: the boot check fails) and starts nothing.
# Remove the file and boot the node (`python -m specops_lab.node --root ROOT reboot`)
# to bring it back.
NO_RETURN_FAULT = LAB_ETC / "fault-reboot-does-not-return"


def boot(root: Path, say: Any = print) -> None:
    """The node reboots now: processes end, containers stop, the kernel's view is
    rebuilt as the boot finds it, the enabled units and onboot containers start."""
    _record(root, "reboot")
    if (root / NO_RETURN_FAULT).is_file():
        _go_down(root, say)
        (root / "proc/sys/kernel/random/boot_id").unlink(missing_ok=True)
        _record(root, "down: the reboot does not come back (lab fault)")
        say(f"{root.name}: down, not coming back ({NO_RETURN_FAULT} is set)")
        return
    from specops_lab.hosttree import build_tree  # noqa: PLC0415  (boot only)

    node = _go_down(root, say)
    spec = booted_spec(root)
    build_tree(spec, root, replace_existing=True, system_files=False)
    state = root / UNIT_STATE
    if state.exists():
        _rmtree(state)
    (root / "run" / "specops-lab").mkdir(parents=True, exist_ok=True)
    for unit in _enabled_units(root):
        rc = Units(root).start(unit, quiet=True)
        say(f"{spec.node}: boot started {unit} ({'ok' if rc == 0 else 'failed'})")
    if node is not None:
        from specops_lab.pve.pct import ct_start, list_cts, load_ct_conf  # noqa: PLC0415

        for vmid in list_cts(node):
            conf, _ = load_ct_conf(node, vmid)
            if str(conf.get("onboot") or "0") == "1":
                ct_start(node, vmid)
                say(f"{node.name}: CT {vmid} started at boot (onboot)")


# --------------------------------------------------------------------------- units


def _unit_file(root: Path, unit: str) -> Path | None:
    for d in UNIT_DIRS:
        path = root / d / unit
        if path.is_file():
            return path
    return None


def _parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if sep:
            current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _enabled_units(root: Path) -> list[str]:
    wants = root / "etc/systemd/system/multi-user.target.wants"
    units = sorted(p.name for p in wants.iterdir()) if wants.is_dir() else []
    # After= orders the start (enough for the node's few units).
    ordered: list[str] = []
    pending = list(units)
    while pending:
        for unit in list(pending):
            path = _unit_file(root, unit)
            after = set()
            if path is not None:
                for value in _parse_unit(path.read_text()).get("Unit", {}).get("After", []):
                    after |= set(value.split())
            if not (after & set(pending) - {unit}):
                ordered.append(unit)
                pending.remove(unit)
                break
        else:
            ordered += pending
            break
    return ordered


def stop_node_processes(root: Path) -> list[int]:
    """End every process the node's units started (a reboot or `lab down`)."""
    killed = []
    state_dir = root / UNIT_STATE
    for state_file in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
        pid = int(json.loads(state_file.read_text()).get("MainPID", 0) or 0)
        if pid > 0 and _owned(root, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                killed.append(pid)
    for pid in killed:
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
    return killed


def _owned(root: Path, pid: int) -> bool:
    """The process runs for this node (its environment names the node's root)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"SPECOPS_LAB_NODE_ROOT={root}".encode() in env


class Units:
    """The node's systemd, for its units (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / UNIT_STATE

    def state(self, unit: str) -> dict[str, Any]:
        path = self.state_dir / f"{unit}.json"
        data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        pid = int(data.get("MainPID", 0) or 0)
        running = data.get("ActiveState") == "active" and data.get("SubState") == "running"
        if running and (pid <= 0 or not _owned(self.root, pid)):
            data.update(ActiveState="failed", SubState="failed", Result="exit-code", MainPID=0)
        return data

    def _save(self, unit: str, **data: Any) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / f"{unit}.json"
        path.write_text(json.dumps(data, sort_keys=True) + "\n")

    def _wanted_by(self, unit: str) -> list[str]:
        path = _unit_file(self.root, unit)
        if path is None:
            return []
        return [
            t
            for v in _parse_unit(path.read_text()).get("Install", {}).get("WantedBy", [])
            for t in v.split()
        ]

    def enabled(self, unit: str) -> bool:
        return any(
            (self.root / "etc/systemd/system" / f"{t}.wants" / unit).is_symlink()
            for t in self._wanted_by(unit)
        )

    def show(self, unit: str) -> str:
        path = _unit_file(self.root, unit)
        state = self.state(unit)
        fields = {
            "Id": unit,
            "Names": unit,
            "LoadState": "loaded" if path else "not-found",
            "ActiveState": state.get("ActiveState", "inactive"),
            "SubState": state.get("SubState", "dead"),
            "Result": state.get("Result", "success"),
            "MainPID": str(state.get("MainPID", 0)),
            "InvocationID": state.get("InvocationID", ""),
            "ExecMainStatus": str(state.get("ExecMainStatus", 0)),
        }
        if path is not None:
            unit_text = _parse_unit(path.read_text())
            fields["FragmentPath"] = "/" + str(path.relative_to(self.root))
            fields["Description"] = " ".join(unit_text.get("Unit", {}).get("Description", [unit]))
            fields["Type"] = unit_text.get("Service", {}).get("Type", ["simple"])[-1]
            fields["UnitFileState"] = "enabled" if self.enabled(unit) else "disabled"
        return "".join(f"{k}={v}\n" for k, v in fields.items())

    def _argv(self, command: str) -> tuple[list[str], bool]:
        ignore = command.startswith("-")
        argv = shlex.split(command.lstrip("-@+!"))
        mapped = []
        for i, arg in enumerate(argv):
            under = self.root / _rel(arg)
            # The program and absolute paths resolve under the node root; a program the
            # node lacks (coreutils) is this machine's.
            node_path = arg.startswith("/") and (i > 0 or under.exists())
            mapped.append(str(under) if node_path else arg)
        return mapped, ignore

    def _run(self, commands: Sequence[str]) -> int:
        """Run a unit's commands in order (output to the node's unit log, never a pipe:
        a forking daemon keeps its parent's descriptors)."""
        env = node_env(self.root)
        log = self.root / "var/log/specops-lab/units.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        for command in commands:
            argv, ignore = self._argv(command)
            with log.open("a", encoding="utf-8") as out:
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                try:
                    rc = subprocess.run(
                        argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                        timeout=120, check=False,
                    ).returncode  # fmt: skip
                except FileNotFoundError:
                    out.write(f"{argv[0]}: No such file or directory\n")
                    rc = 203  # systemd's EXIT_EXEC
            if rc != 0 and not ignore:
                return rc
        return 0

    def start(self, unit: str, *, quiet: bool = False) -> int:
        path = _unit_file(self.root, unit)
        if path is None:
            print(f"Failed to start {unit}: Unit {unit} not found.", file=sys.stderr)
            return 5
        if self.state(unit).get("ActiveState") == "active":
            return 0
        svc = _parse_unit(path.read_text()).get("Service", {})
        kind = svc.get("Type", ["simple"])[-1]
        invocation = uuid.uuid4().hex
        if kind == "oneshot":
            rc = self._run(svc.get("ExecStart", []))
            remain = svc.get("RemainAfterExit", ["no"])[-1] in ("yes", "true", "1")
            if rc == 0:
                active, sub = ("active", "exited") if remain else ("inactive", "dead")
                self._save(unit, ActiveState=active, SubState=sub, Result="success", MainPID=0,
                           InvocationID=invocation, ExecMainStatus=0)  # fmt: skip
                return 0
            self._save(unit, ActiveState="failed", SubState="failed", Result="exit-code", MainPID=0,
                       InvocationID=invocation, ExecMainStatus=rc)  # fmt: skip
        elif kind == "forking":
            rc = self._run(svc.get("ExecStart", []))
            pid_file = svc.get("PIDFile", [""])[-1]
            pid = 0
            if rc == 0 and pid_file:
                with contextlib.suppress(OSError, ValueError):
                    pid = int((self.root / _rel(pid_file)).read_text().strip())
            if rc == 0 and pid > 0:
                self._save(unit, ActiveState="active", SubState="running", Result="success",
                           MainPID=pid, InvocationID=invocation, ExecMainStatus=0)  # fmt: skip
                return 0
            self._save(unit, ActiveState="failed", SubState="failed", Result="exit-code", MainPID=0,
                       InvocationID=invocation, ExecMainStatus=rc or 1)  # fmt: skip
        else:
            argv, _ = self._argv(svc.get("ExecStart", ["/bin/false"])[-1])
            child = subprocess.Popen(
                argv, env=node_env(self.root), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            self._save(unit, ActiveState="active", SubState="running", Result="success",
                       MainPID=child.pid, InvocationID=invocation, ExecMainStatus=0)  # fmt: skip
            return 0
        if not quiet:
            print(
                f"Job for {unit} failed because the control process exited with error code.\n"
                f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.',
                file=sys.stderr,
            )
        return 1

    def stop(self, unit: str) -> int:
        state = self.state(unit)
        pid = int(state.get("MainPID", 0) or 0)
        if pid > 0 and _owned(self.root, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        path = _unit_file(self.root, unit)
        if path is not None:
            self._run(
                [
                    "-" + c.lstrip("-")
                    for c in _parse_unit(path.read_text())
                    .get("Service", {})
                    .get("ExecStopPost", [])
                ]
            )
        self._save(unit, ActiveState="inactive", SubState="dead", Result="success", MainPID=0,
                   InvocationID=state.get("InvocationID", ""), ExecMainStatus=0)  # fmt: skip
        return 0

    def enable(self, unit: str, on: bool) -> int:
        if _unit_file(self.root, unit) is None:
            print(
                f"Failed to {'enable' if on else 'disable'} unit: Unit file {unit} does not exist.",
                file=sys.stderr,
            )
            return 1
        for target in self._wanted_by(unit):
            link = self.root / "etc/systemd/system" / f"{target}.wants" / unit
            if on and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(f"/etc/systemd/system/{unit}")
                print(f"Created symlink /etc/systemd/system/{target}.wants/{unit}.")
            elif not on and link.is_symlink():
                link.unlink()
                print(f"Removed /etc/systemd/system/{target}.wants/{unit}.")
        return 0

    def units(self) -> list[str]:
        names = set()
        for d in UNIT_DIRS:
            if (self.root / d).is_dir():
                names |= {p.name for p in (self.root / d).glob("*.service")}
        return sorted(names)


def systemctl(root: Path, args: Sequence[str]) -> int:  # noqa: PLR0911, PLR0912  (one verb each)
    words = [a for a in args if not a.startswith("-")]
    flags = [a for a in args if a.startswith("-")]
    if not words:
        print("specops lab node: systemctl needs a verb", file=sys.stderr)
        return 1
    verb, units = words[0], [u.strip("'") for u in words[1:]]
    units = [u if "." in u else f"{u}.service" for u in units]
    mgr = Units(root)
    if verb in ("daemon-reload", "daemon-reexec"):
        return 0
    if verb == "show":
        sys.stdout.write("\n".join(mgr.show(u) for u in units))
        return 0
    if verb == "is-active":
        states = [mgr.state(u).get("ActiveState", "inactive") for u in units]
        print("\n".join(states))
        return 0 if all(s == "active" for s in states) else 3
    if verb == "is-enabled":
        if not all(_unit_file(root, u) for u in units):
            print(
                f"Failed to get unit file state for {units[0]}: No such file or directory",
                file=sys.stderr,
            )
            return 1
        states = ["enabled" if mgr.enabled(u) else "disabled" for u in units]
        print("\n".join(states))
        return 0 if all(s == "enabled" for s in states) else 1
    if verb in ("enable", "disable"):
        rc = max((mgr.enable(u, verb == "enable") for u in units), default=0)
        if rc == 0 and "--now" in flags:
            rc = max((mgr.start(u) if verb == "enable" else mgr.stop(u) for u in units), default=0)
        return rc
    if verb == "start":
        return max((mgr.start(u) for u in units), default=0)
    if verb == "stop":
        return max((mgr.stop(u) for u in units), default=0)
    if verb in ("restart", "reload-or-restart", "try-restart"):
        rc = 0
        for unit in units:
            if verb == "try-restart" and mgr.state(unit).get("ActiveState") != "active":
                continue
            mgr.stop(unit)
            rc = max(rc, mgr.start(unit))
        return rc
    if verb == "list-unit-files":
        for unit in mgr.units():
            print(f"{unit} {'enabled' if mgr.enabled(unit) else 'disabled'} enabled")
        return 0
    if verb == "list-units":
        for unit in mgr.units():
            state = mgr.state(unit)
            active = state.get("ActiveState", "inactive")
            print(f"{unit} loaded {active} {state.get('SubState', 'dead')} {unit}")
        return 0
    print(f"specops lab node: systemctl {verb} is not emulated", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------- CLI


def _reboot(root: Path, args: Sequence[str]) -> int:
    if args and any(a in ("-h", "-H", "-P", "--halt", "--poweroff") for a in args):
        raise NodeError("shutdown: a lab node only reboots (-r)")
    boot(root, say=lambda line: print(line, file=sys.stderr))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specops_lab.node", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--root", required=True, type=Path, help="the node's root")
    parser.add_argument("tool", choices=sorted(TOOLS))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    root: Path = ns.root
    if (
        not (root / "etc" / "specops-lab-node.json").is_file()
        and not (root / HARDWARE_FILE).is_file()
    ):
        print(f"{root} is not a lab node root", file=sys.stderr)
        return 2
    handlers = {
        "update-initramfs": update_initramfs,
        "update-grub": update_grub,
        "proxmox-boot-tool": proxmox_boot_tool,
        "systemctl": systemctl,
        "dkms": dkms,
    }
    try:
        if ns.tool in ("shutdown", "reboot"):
            if ns.tool == "shutdown" and "-r" not in ns.args:
                raise NodeError("shutdown: a lab node only reboots (-r)")
            return _reboot(root, ns.args)
        if ns.tool in ("apt-get", "apt-cache"):
            return apt(ns.tool, ns.args)
        return handlers[ns.tool](root, ns.args)
    except (NodeError, SpecopsError) as exc:
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
