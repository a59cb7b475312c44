#!/usr/bin/env python3
"""Stand-in for NVIDIA's ``NVIDIA-Linux-x86_64-<version>.run`` installer (hardware stand-in).

This machine has no NVIDIA GPU and cannot load an NVIDIA kernel module, so tests install
"the driver" with this script instead. Copied under the real file name
(:func:`make_runfile`), it reads its version from that name, honours the real
installer's command line, refuses what the real one refuses, and writes what the real
one would:

- userspace (real paths, as the real installer): ``/usr/lib/x86_64-linux-gnu/
  libnvidia-ml.so.<ver>`` with its ``.so.1``/``.so`` soname links, ``/usr/bin/nvidia-smi``,
  ``/usr/bin/nvidia-modprobe``, ``/usr/bin/nvidia-persistenced``, the installer log
  ``/var/log/nvidia-installer.log`` and a file list for ``--uninstall``;
- with ``--dkms``: the module source registered with DKMS as ``dkms add`` does
  (``/usr/src/nvidia-<ver>/dkms.conf`` and ``/var/lib/dkms/nvidia/<ver>/source``), so the
  real ``dkms status`` lists it;
- the kernel module (unless ``--no-kernel-module``), into the simulated host tree, since
  the "kernel" is simulated: ``sys/module/nvidia{,_uvm,_modeset}/version``,
  ``proc/driver/nvidia/version`` (``Open Kernel Module`` for ``-m=kernel-open``),
  ``proc/devices`` majors, the ``nvidia`` PCI driver directory, and unbound NVIDIA GPUs
  bound to it with ``proc/driver/nvidia/gpus/<addr>/information``.

The simulated tree's root comes from ``$SPECOPS_LAB_HARDWARE_ROOT``, a lab node's root
(``$SPECOPS_LAB_NODE_ROOT``), the first line of ``/etc/specops-lab/hardware-root``, or else
``/srv/specops-hw`` when it exists (where a lab serving container sees its node's tree,
read-only); the installed tools read the same. On a lab node (``$SPECOPS_LAB_NODE_ROOT``,
set by its connection, ``specops.lab.node``) every file the installer writes, userspace
included, goes under the node's root, and DKMS and the kernel headers are the node's.
The module's dynamic char majors are the node's (``etc/specops-lab/nvidia-majors`` of the
tree, from its hardware description), else nvidia-uvm 508 / nvidia-caps 507. The generated
``nvidia-smi`` answers ``--query-gpu=driver_version --format=csv,noheader``,
``--query-compute-apps=pid`` (no process: the lab's engines run on the CPU), ``-L`` and
plain, and prints NVML's "Driver/library version mismatch" when the userspace version
differs from the simulated kernel module's.

Refusals, as the real installer: not root; unknown options; no headers for the running
(simulated) kernel when a module is to be built; ``--dkms`` without ``dkms``; nouveau
loaded; a loaded nvidia module in use (``refcnt`` > 0); a Blackwell GPU with the
proprietary module flavour.

Stdlib only: it runs inside the test containers (Python 3.11 there).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "make_runfile"]

_NAME = re.compile(r"NVIDIA-Linux-x86_64-(\d+\.\d+(?:\.\d+)?)\.run$")
# PCI device ids that only the open kernel modules drive: the GPU catalogue's
# open_module_required (module_utils/gpu_catalogue.py), read by _open_only(). The copy
# make_runfile() writes runs where specops is not installed: make_runfile() writes the
# catalogue's ids into that copy's _EMBEDDED_OPEN_ONLY line.
_EMBEDDED_OPEN_ONLY: tuple[str, ...] = ()
# Relative to the system root (_system_root(): a lab node's root, else "/").
_LIBDIR = "usr/lib/x86_64-linux-gnu"
_MANIFEST = "var/lib/nvidia/specops-standin-files"
_LOG = "var/log/nvidia-installer.log"
_KMOD_MARK = "var/lib/nvidia/specops-standin-kernel-module"
_UVM_MAJOR_DEFAULT = 508
_MAJORS_FILE = "etc/specops-lab/nvidia-majors"
# The node tree as a lab serving container sees it (inventory/lab/group_vars/serving).
LAB_NODE_MOUNT = Path("/srv/specops-hw")
_FLAGS = {
    "--silent",
    "-s",
    "--dkms",
    "--no-dkms",
    "--no-kernel-module",
    "--uninstall",
    "--no-questions",
    "-q",
    "--accept-license",
    "-a",
    "--ui=none",
    "--disable-nouveau",
    "--no-nouveau-check",
    "--no-x-check",
    "--no-opengl-files",
    "--no-drm",
    "--install-libglvnd",
    "--no-install-compat32-libs",
    "--version",
    "-v",
}


def make_runfile(version: str, dest_dir: str | os.PathLike[str]) -> Path:
    """Copy this stand-in to ``dest_dir/NVIDIA-Linux-x86_64-<version>.run`` (mode 0755)."""
    if not re.fullmatch(r"\d+\.\d+(?:\.\d+)?", version):
        raise ValueError(f"version: must look like 580.126.09 (got {version!r})")
    dest = Path(dest_dir) / f"NVIDIA-Linux-x86_64-{version}.run"
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).read_text(encoding="utf-8")
    line = "_EMBEDDED_OPEN_ONLY: tuple[str, ...] = ()\n"
    if source.count(line) != 1:
        raise RuntimeError(f"{__file__}: the _EMBEDDED_OPEN_ONLY line is missing")
    source = source.replace(line, f"_EMBEDDED_OPEN_ONLY: tuple[str, ...] = {_open_only()!r}\n")
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(source, encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(dest)
    return dest


def _open_only() -> tuple[str, ...]:
    """Device ids (``2bb1``) only the open modules drive: the catalogue, else the copy's."""
    try:
        from ansible_collections.specops.infra.plugins.module_utils import (  # noqa: PLC0415
            gpu_catalogue,
        )
    except ImportError:  # the copy in a container: make_runfile embedded them
        return _EMBEDDED_OPEN_ONLY
    return gpu_catalogue.open_module_device_ids()


def _system_root() -> Path:
    """Where the installer's files go: a lab node's root, else this system's ``/``."""
    return Path(os.environ.get("SPECOPS_LAB_NODE_ROOT") or "/")


def _sys(rel: str) -> Path:
    return _system_root() / rel


def _hardware_root() -> Path | None:
    env = os.environ.get("SPECOPS_LAB_HARDWARE_ROOT") or os.environ.get("SPECOPS_LAB_NODE_ROOT")
    if env:
        return Path(env)
    try:
        line = Path("/etc/specops-lab/hardware-root").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        line = ""
    if line:
        return Path(line)
    # A lab serving container sees its node's tree at the lab's mount point.
    return LAB_NODE_MOUNT if LAB_NODE_MOUNT.is_dir() else None


class InstallerError(Exception):
    pass


def _parse(argv: list[str]) -> dict[str, str | bool]:
    opts: dict[str, str | bool] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-m", "-M") and args:
            arg = f"{arg}={args.pop(0)}"
        key, sep, value = arg.partition("=")
        if key in ("-m", "--kernel-module-build-directory"):
            if value not in ("kernel", "kernel-open"):
                raise InstallerError(f"Invalid kernel module build directory: '{value}'")
            opts["flavour"] = "open" if value == "kernel-open" else "proprietary"
        elif key in ("-M", "--kernel-module-type"):
            if value not in ("open", "proprietary"):
                raise InstallerError(f"Invalid kernel module type: '{value}'")
            opts["flavour"] = value
        elif key == "--tmpdir" and sep:
            opts["tmpdir"] = value
        elif arg in _FLAGS:
            opts[arg.lstrip("-")] = True
        else:
            raise InstallerError(
                f'Unrecognized option: "{arg}"; please run `nvidia-installer --help` for '
                "usage information."
            )
    return opts


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _running_kernel(hw: Path) -> str:
    text = _read(hw / "proc" / "sys" / "kernel" / "osrelease")
    return text.strip() if text else os.uname().release


def _nvidia_functions(hw: Path) -> list[Path]:
    out = []
    devices = hw / "sys" / "bus" / "pci" / "devices"
    for dev in sorted(devices.glob("*")) if devices.is_dir() else []:
        vendor = (_read(dev / "vendor") or "").strip().lower()
        klass = (_read(dev / "class") or "0").strip()
        if vendor == "0x10de" and int(klass, 16) >> 8 in (0x0300, 0x0302):
            out.append(dev)
    return out


def _loaded_version(hw: Path | None) -> str | None:
    if hw is None:
        return None
    text = _read(hw / "sys" / "module" / "nvidia" / "version")
    return text.strip() if text else None


# --------------------------------------------------------------------------- tools

_TOOL_HEAD = r"""#!/usr/bin/env python3
# Hardware stand-in installed by the specops NVIDIA installer stand-in, not NVIDIA's tool.
import os, sys, re
from pathlib import Path
VERSION = "@VERSION@"
ROOT = Path(os.environ.get("SPECOPS_LAB_NODE_ROOT") or "/")
def hw():
    env = os.environ.get("SPECOPS_LAB_HARDWARE_ROOT") or os.environ.get("SPECOPS_LAB_NODE_ROOT")
    if env:
        return Path(env)
    try:
        return Path(Path("/etc/specops-lab/hardware-root").read_text().splitlines()[0].strip())
    except (OSError, IndexError):
        pass
    lab = Path("@LAB_NODE_MOUNT@")
    return lab if lab.is_dir() else Path("/")
def kernel_version():
    root = hw()
    for p in (root / "sys/module/nvidia/version",):
        try:
            return p.read_text().strip()
        except OSError:
            pass
    try:
        first = (root / "proc/driver/nvidia/version").read_text().splitlines()[0]
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)", first)
        return m.group(1) if m else None
    except (OSError, IndexError):
        return None
def gpus():
    root = hw() / "sys/bus/pci/drivers/nvidia"
    return sorted(p.name for p in root.glob("0*:*")) if root.is_dir() else []
def minor(addr):
    try:
        info = hw() / "proc/driver/nvidia/gpus" / addr / "information"
        for line in info.read_text().splitlines():
            if line.startswith("Device Minor:"):
                return int(line.split(":", 1)[1])
    except OSError:
        pass
    return None
def nvml_or_exit():
    kv = kernel_version()
    if kv is None:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        sys.exit(9)
    if kv != VERSION:
        print("Failed to initialize NVML: Driver/library version mismatch")
        print("NVML library version: " + ".".join(VERSION.split(".")[:2]))
        sys.exit(18)
    return kv
def mknod(rel, major, minor_, mode=0o666):
    path = hw() / "dev" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        st = path.lstat()
        if os.major(st.st_rdev) == major and os.minor(st.st_rdev) == minor_:
            return
        path.unlink()
    os.mknod(path, 0o020000 | mode, os.makedev(major, minor_))
    os.chmod(path, mode)
def majors():
    out = {}
    section = None
    for line in (hw() / "proc/devices").read_text().splitlines():
        if line.endswith(":"):
            section = line
            continue
        parts = line.split()
        if section == "Character devices:" and len(parts) == 2:
            out[parts[1]] = int(parts[0])
    return out
"""

_NVIDIA_SMI = (
    _TOOL_HEAD
    + """
args = sys.argv[1:]
kv = nvml_or_exit()
found = gpus()
if not found:
    print("No devices were found")
    sys.exit(6)
for addr in found:
    m = minor(addr)
    if m is not None:
        mknod(f"nvidia{m}", 195, m)
mknod("nvidiactl", 195, 255)
if "-L" in args or "--list-gpus" in args:
    for i, addr in enumerate(found):
        print(f"GPU {i}: NVIDIA Graphics Device (stand-in at {addr})")
    sys.exit(0)
query = [a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")]
if query:
    fields = query[0].split(",")
    known = {"driver_version": kv, "pci.bus_id": None, "count": str(len(found))}
    for f in fields:
        if f not in known:
            print(f'Field "{f}" is not a valid field to query.')
            sys.exit(2)
    for addr in found:
        row = [kv if f == "driver_version" else (addr.upper() if f == "pci.bus_id" else known[f])
               for f in fields]
        print(", ".join(row))
    sys.exit(0)
# The processes holding GPU memory: none on a lab node (its engine runs on the CPU), so
# the answer is what the driver prints for idle cards: nothing.
apps = [a.split("=", 1)[1] for a in args if a.startswith("--query-compute-apps=")]
if apps:
    for f in apps[0].split(","):
        if f not in ("pid", "process_name", "used_memory", "gpu_uuid", "gpu_bus_id"):
            print(f'Field "{f}" is not a valid field to query.')
            sys.exit(2)
    sys.exit(0)
if args and args[0] not in ("-q", "--query"):
    print(f"Invalid combination of input arguments: {' '.join(args)}")
    sys.exit(2)
print("+-----------------------------------------------------------------------------------------+")
print(f"| NVIDIA-SMI {VERSION:<22} Driver Version: {kv:<16} CUDA Version: 13.0     |")
print("+-----------------------------------------------------------------------------------------+")
for i, addr in enumerate(found):
    print(f"|   {i}  NVIDIA Graphics Device (stand-in)       {addr}  |")
"""
)

_NVIDIA_MODPROBE = (
    _TOOL_HEAD
    + """
import argparse
p = argparse.ArgumentParser(prog="nvidia-modprobe")
p.add_argument("-c", "--create-nvidia-device-file", type=int, action="append", default=[])
p.add_argument("-u", "--unified-memory", action="store_true")
p.add_argument("-m", "--modeset", action="store_true")
a = p.parse_args()
if kernel_version() is None:
    print("nvidia-modprobe: the nvidia kernel module is not loaded")
    sys.exit(1)
mk = majors()
mknod("nvidiactl", 195, 255)
for m in a.create_nvidia_device_file:
    mknod(f"nvidia{m}", 195, m)
if a.unified_memory:
    if not (hw() / "sys/module/nvidia_uvm").is_dir() or "nvidia-uvm" not in mk:
        print("nvidia-modprobe: nvidia-uvm is not loaded")
        sys.exit(1)
    mknod("nvidia-uvm", mk["nvidia-uvm"], 0)
    mknod("nvidia-uvm-tools", mk["nvidia-uvm"], 1)
if a.modeset:
    mknod("nvidia-modeset", 195, 254)
"""
)

_NVIDIA_PERSISTENCED = (
    _TOOL_HEAD
    + """
import signal, time
kv = kernel_version()
if kv != VERSION:
    print(f"nvidia-persistenced failed to initialize: kernel module {kv}, library {VERSION}")
    sys.exit(1)
piddir = ROOT / "run/nvidia-persistenced"
piddir.mkdir(parents=True, exist_ok=True)
pid = os.fork()
if pid:
    (piddir / "nvidia-persistenced.pid").write_text(f"{pid}\\n")
    sys.exit(0)
os.setsid()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
"""
)


def _write_tool(path: Path, text: str, version: str, files: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        text.replace("@VERSION@", version).replace("@LAB_NODE_MOUNT@", str(LAB_NODE_MOUNT))
    )
    path.chmod(0o755)
    files.append(str(path))


def _install_userspace(version: str, files: list[str]) -> None:
    libdir = _sys(_LIBDIR)
    libdir.mkdir(parents=True, exist_ok=True)
    lib = libdir / f"libnvidia-ml.so.{version}"
    # An ELF-less placeholder: the library's name and version are what is checked.
    lib.write_text(f"specops NVIDIA stand-in: libnvidia-ml {version}\n")
    files.append(str(lib))
    for link in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        dest = libdir / link
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        dest.symlink_to(lib.name)
        files.append(str(dest))
    _write_tool(_sys("usr/bin/nvidia-smi"), _NVIDIA_SMI, version, files)
    _write_tool(_sys("usr/bin/nvidia-modprobe"), _NVIDIA_MODPROBE, version, files)
    _write_tool(_sys("usr/bin/nvidia-persistenced"), _NVIDIA_PERSISTENCED, version, files)


def _register_dkms(version: str, flavour: str, files: list[str]) -> None:
    src = _sys(f"usr/src/nvidia-{version}")
    src.mkdir(parents=True, exist_ok=True)
    (src / "dkms.conf").write_text(
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\nAUTOINSTALL="yes"\n'
        f"# specops stand-in: {flavour} kernel modules\n"
        'BUILT_MODULE_NAME[0]="nvidia"\nDEST_MODULE_LOCATION[0]="/kernel/drivers/video"\n'
    )
    files.append(str(src))
    tree = _sys(f"var/lib/dkms/nvidia/{version}")
    tree.mkdir(parents=True, exist_ok=True)
    link = tree / "source"
    if not link.is_symlink():
        link.symlink_to(f"/usr/src/nvidia-{version}")
    files.append(str(tree))


def _proc_devices_with(hw: Path, entries: list[tuple[int, str]]) -> None:
    path = hw / "proc" / "devices"
    text = _read(path) or "Character devices:\n\nBlock devices:\n"
    char, _, block = text.partition("\nBlock devices:")
    lines = [ln for ln in char.splitlines()[1:] if ln.strip()]
    have = {ln.split(None, 1)[1] for ln in lines if len(ln.split(None, 1)) == 2}
    for major, name in entries:
        if name not in have:
            lines.append(f"{major:3d} {name}")
    lines.sort(key=lambda ln: int(ln.split()[0]))
    path.write_text("Character devices:\n" + "\n".join(lines) + "\n\nBlock devices:" + block)


def _dynamic_majors(hw: Path) -> dict[str, int]:
    """The char majors the (simulated) kernel gives the module's regions: the node's
    (its hardware description, as the tree builder wrote them), else uvm 508, caps 507."""
    majors: dict[str, int] = {}
    for line in (_read(hw / _MAJORS_FILE) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            majors[parts[1]] = int(parts[0])
    return majors or {"nvidia-uvm": _UVM_MAJOR_DEFAULT, "nvidia-caps": _UVM_MAJOR_DEFAULT - 1}


def _load_module(hw: Path, version: str, flavour: str) -> list[str]:
    """What loading the freshly built modules does to the (simulated) kernel."""
    for mod in ("nvidia", "nvidia_uvm", "nvidia_modeset"):
        mdir = hw / "sys" / "module" / mod
        mdir.mkdir(parents=True, exist_ok=True)
        (mdir / "version").write_text(version + "\n")
        (mdir / "initstate").write_text("live\n")
        (mdir / "refcnt").write_text("0\n")
    if flavour == "open":
        first = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build"
    else:
        first = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Release Build"
    ndir = hw / "proc" / "driver" / "nvidia"
    ndir.mkdir(parents=True, exist_ok=True)
    (ndir / "version").write_text(first + "\nGCC version:  gcc version 12.2.0 (Debian)\n")
    _proc_devices_with(
        hw,
        [(195, "nvidia"), (195, "nvidiactl"), (195, "nvidia-modeset")]
        + [(major, name) for name, major in sorted(_dynamic_majors(hw).items())],
    )
    drv = hw / "sys" / "bus" / "pci" / "drivers" / "nvidia"
    drv.mkdir(parents=True, exist_ok=True)
    for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
        (drv / name).touch()
    bound = []
    taken = {
        int(ln.split(":", 1)[1])
        for info in (ndir / "gpus").glob("*/information")
        for ln in info.read_text().splitlines()
        if ln.startswith("Device Minor:")
    }
    for dev in _nvidia_functions(hw):
        override = (_read(dev / "driver_override") or "").strip()
        if (dev / "driver").is_symlink() or override not in ("", "(null)", "nvidia"):
            continue
        real = dev.resolve()
        (real / "driver").symlink_to(os.path.relpath(drv, real))
        (drv / dev.name).symlink_to(os.path.relpath(real, drv))
        minor = next(m for m in range(254) if m not in taken)
        taken.add(minor)
        gdir = ndir / "gpus" / dev.name
        gdir.mkdir(parents=True, exist_ok=True)
        (gdir / "information").write_text(
            f"Model: \t\t NVIDIA Graphics Device\nBus Location: \t {dev.name}\n"
            f"Device Minor: \t {minor}\n"
        )
        bound.append(dev.name)
    return bound


def _unload_module(hw: Path) -> None:
    for mod in ("nvidia_modeset", "nvidia_uvm", "nvidia"):
        mdir = hw / "sys" / "module" / mod
        if mdir.is_dir():
            shutil.rmtree(mdir)
    ndir = hw / "proc" / "driver" / "nvidia"
    if ndir.is_dir():
        shutil.rmtree(ndir)
    drv = hw / "sys" / "bus" / "pci" / "drivers" / "nvidia"
    if drv.is_dir():
        for link in drv.glob("0*:*"):
            dev_driver = link.resolve() / "driver"
            if dev_driver.is_symlink():
                dev_driver.unlink()
            link.unlink()
        shutil.rmtree(drv)


def _preflight_module(hw: Path | None, opts: dict[str, str | bool], flavour: str) -> None:
    if hw is None:
        raise InstallerError(
            "specops stand-in: no simulated host tree (set SPECOPS_LAB_HARDWARE_ROOT or "
            "/etc/specops-lab/hardware-root), so no kernel module can be installed"
        )
    kernel = _running_kernel(hw)
    headers = [_sys(f"lib/modules/{kernel}/build"), _sys(f"usr/src/linux-headers-{kernel}")]
    if not any(p.exists() for p in headers):
        raise InstallerError(
            f"Unable to find the kernel source tree for the currently running kernel "
            f"({kernel}). Please make sure you have installed the kernel source files for "
            "your kernel and that they are properly configured."
        )
    if opts.get("dkms") and _which("dkms") is None:
        raise InstallerError("Failed to run `dkms`: dkms is not installed")
    if (hw / "sys" / "module" / "nouveau").is_dir():
        raise InstallerError(
            "The Nouveau kernel driver is currently in use by your system. This driver is "
            "incompatible with the NVIDIA driver, and must be disabled before proceeding."
        )
    refcnt = _read(hw / "sys" / "module" / "nvidia" / "refcnt")
    if refcnt and refcnt.strip().isdigit() and int(refcnt) > 0:
        raise InstallerError(
            "An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel "
            "and is in use (refcnt "
            f"{refcnt.strip()}). Stop every process that uses the GPU and try again."
        )
    if flavour == "proprietary":
        for dev in _nvidia_functions(hw):
            device = (_read(dev / "device") or "").strip().lower().removeprefix("0x")
            if device in _open_only():
                raise InstallerError(
                    f"The NVIDIA GPU at {dev.name} (10de:{device}) requires use of the NVIDIA "
                    "open kernel modules; install with -m=kernel-open."
                )


def _which(tool: str) -> str | None:
    """A tool of this system; on a lab node only the node's own (not this machine's)."""
    node = os.environ.get("SPECOPS_LAB_NODE_ROOT")
    if not node:
        return shutil.which(tool)
    dirs = [Path(node) / d for d in ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin")]
    return shutil.which(tool, path=os.pathsep.join(str(d) for d in dirs))


def _uninstall(hw: Path | None) -> int:
    text = _read(_sys(_MANIFEST))
    if text is None:
        print("ERROR: No NVIDIA driver is currently installed.")
        return 1
    # Only an install that built the kernel module unloads it (one made with
    # --no-kernel-module, e.g. inside a container, never touches the host's module).
    had_module = _sys(_KMOD_MARK).exists()
    for line in reversed(text.splitlines()):
        path = Path(line)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    _sys(_MANIFEST).unlink()
    if had_module and hw is not None and _loaded_version(hw) is not None:
        _unload_module(hw)
    print("Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver is complete.")
    return 0


def run(argv: list[str], program: str) -> int:
    match = _NAME.search(os.path.basename(program))
    if not match:
        raise InstallerError(f"stand-in must be named NVIDIA-Linux-x86_64-<version>.run: {program}")
    version = match[1]
    opts = _parse(argv)
    if opts.get("version") or opts.get("v"):
        print(f"nvidia-installer:  version {version} (specops hardware stand-in)")
        return 0
    if os.geteuid() != 0:
        raise InstallerError("nvidia-installer must be run as root")
    hw = _hardware_root()
    if opts.get("uninstall"):
        return _uninstall(hw)
    flavour = str(opts.get("flavour", "proprietary"))
    kernel_module = not opts.get("no-kernel-module")
    if kernel_module:
        _preflight_module(hw, opts, flavour)
    previous = _read(_sys(_MANIFEST))
    if previous:
        for line in reversed(previous.splitlines()):
            path = Path(line)
            if path.is_symlink() or path.is_file():
                path.unlink()
    files: list[str] = []
    _install_userspace(version, files)
    bound: list[str] = []
    if kernel_module and hw is not None:
        if opts.get("dkms"):
            _register_dkms(version, flavour, files)
            subprocess.run([_which("dkms") or "dkms", "status"], check=False, capture_output=True)
        if _loaded_version(hw) is not None:
            _unload_module(hw)
        bound = _load_module(hw, version, flavour)
        _sys(_KMOD_MARK).parent.mkdir(parents=True, exist_ok=True)
        _sys(_KMOD_MARK).write_text(f"{version} {flavour}\n")
        files.append(str(_sys(_KMOD_MARK)))
    _sys(_MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    _sys(_MANIFEST).write_text("\n".join(files) + "\n")
    log = _sys(_LOG)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(
        f"nvidia-installer log file '/{_LOG}'\ncommand line: {' '.join(argv)}\n"
        f"version: {version}\nkernel module: "
        f"{flavour if kernel_module else 'none (--no-kernel-module)'}\n"
        f"dkms: {bool(opts.get('dkms'))}\nbound: {' '.join(bound)}\n"
        "Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 "
        f"(version: {version}) is now complete.\n"
    )
    log.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    if not opts.get("silent") and not opts.get("s"):
        print(f"Installation of the NVIDIA driver {version} is now complete.")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        return run(args, sys.argv[0])
    except InstallerError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
