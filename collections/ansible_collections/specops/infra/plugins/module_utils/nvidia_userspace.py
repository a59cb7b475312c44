"""The NVIDIA userspace driver inside a container: which version, installed how.

Container userspace must equal the host's kernel module version exactly, or NVML fails
("Driver/library version mismatch"). This reads, under a configurable root:

- the userspace version from ``libnvidia-ml.so.<version>`` in the library directories
  (the target of the ``libnvidia-ml.so.1`` soname link first); every version found is
  listed, so left-overs of another install show;
- how it was installed: ``run`` (NVIDIA's installer keeps its records in
  ``/var/lib/nvidia`` and installs ``nvidia-uninstall``), ``packages`` (dpkg owns the
  library; the owning packages are named) or ``unknown``;
- the kernel module version the container sees (``/sys/module/nvidia/version`` or the
  ``NVRM`` line of ``/proc/driver/nvidia/version``; the host kernel's, shared);
- the NVML answer of ``nvidia-smi`` (:func:`classify_nvidia_smi`).

Stdlib only: this runs inside the containers.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "LIB_DIRS",
    "NvmlAnswer",
    "UserspaceState",
    "classify_nvidia_smi",
    "kernel_module_version",
    "read_state",
    "valid_version",
    "verify",
]

LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/usr/local/lib",
)
_LIB_RE = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_VERSION_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
_NVRM_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)")


def valid_version(text: str) -> bool:
    """``580.126.09`` / ``550.54`` style driver versions."""
    return bool(_VERSION_RE.match(text))


def _host(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def kernel_module_version(root: str) -> str | None:
    """The nvidia module version visible under ``root`` (None when not visible)."""
    text = _read(_host(root, "/sys/module/nvidia/version"))
    if text and valid_version(text.strip()):
        return text.strip()
    text = _read(_host(root, "/proc/driver/nvidia/version"))
    if text:
        m = _NVRM_RE.search(text.splitlines()[0] if text.splitlines() else "")
        if m:
            return m.group(1)
    return None


@dataclass
class UserspaceState:
    version: str | None
    versions: list[str]
    libraries: list[str]
    soname_target: str | None
    installer: str  # run | packages | unknown | none
    packages: list[str] = field(default_factory=list)
    nvidia_smi: str | None = None
    kernel_module_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dpkg_owners(root: str, libraries: list[str]) -> list[str]:
    info = _host(root, "/var/lib/dpkg/info")
    if not libraries or not os.path.isdir(info):
        return []
    wanted = set(libraries)
    owners: set[str] = set()
    for name in sorted(os.listdir(info)):
        if not name.endswith(".list"):
            continue
        text = _read(os.path.join(info, name)) or ""
        if any(line in wanted for line in text.splitlines()):
            owners.add(name[: -len(".list")].split(":", 1)[0])
    return sorted(owners)


def read_state(root: str = "/", kernel_root: str = "/") -> UserspaceState:
    """What NVIDIA userspace is installed under ``root``; the module seen under kernel_root."""
    libraries: list[str] = []
    versions: set[str] = set()
    soname_target: str | None = None
    soname_version: str | None = None
    for libdir in LIB_DIRS:
        real = _host(root, libdir)
        if not os.path.isdir(real) or os.path.islink(real):
            continue
        for name in sorted(os.listdir(real)):
            m = _LIB_RE.match(name)
            if m and not os.path.islink(os.path.join(real, name)):
                libraries.append(f"{libdir}/{name}")
                versions.add(m.group(1))
        link = os.path.join(real, "libnvidia-ml.so.1")
        if soname_target is None and os.path.islink(link):
            target = os.readlink(link)
            soname_target = target
            m = _LIB_RE.match(os.path.basename(target))
            if m and os.path.exists(os.path.join(real, target)):
                soname_version = m.group(1)
    ordered = sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    version = soname_version or (ordered[0] if len(ordered) == 1 else None)
    packages = _dpkg_owners(root, libraries)
    records = _host(root, "/var/lib/nvidia")
    if not libraries:
        installer = "none"
    elif packages:
        installer = "packages"
    elif (os.path.isdir(records) and os.listdir(records)) or os.path.lexists(
        _host(root, "/usr/bin/nvidia-uninstall")
    ):
        installer = "run"
    else:
        installer = "unknown"
    smi = _host(root, "/usr/bin/nvidia-smi")
    return UserspaceState(
        version=version,
        versions=ordered,
        libraries=libraries,
        soname_target=soname_target,
        installer=installer,
        packages=packages,
        nvidia_smi="/usr/bin/nvidia-smi" if os.path.exists(smi) else None,
        kernel_module_version=kernel_module_version(kernel_root),
    )


@dataclass(frozen=True)
class NvmlAnswer:
    """What ``nvidia-smi --query-gpu=driver_version --format=csv,noheader`` said."""

    ok: bool
    mismatch: bool
    driver_version: str | None
    library_version: str | None  # "NVML library version: 580.126" on a mismatch
    message: str


def classify_nvidia_smi(rc: int, output: str) -> NvmlAnswer:
    text = output.strip()
    lib = re.search(r"NVML library version:\s*(\S+)", text)
    if "Driver/library version mismatch" in text:
        return NvmlAnswer(False, True, None, lib.group(1) if lib else None, text)
    if rc != 0:
        return NvmlAnswer(False, False, None, None, text or f"exit code {rc}")
    versions = {line.strip() for line in text.splitlines() if valid_version(line.strip())}
    if len(versions) != 1:
        return NvmlAnswer(False, False, None, None, f"unexpected answer: {text!r}")
    return NvmlAnswer(True, False, versions.pop(), None, text)


def verify(state: UserspaceState, nvml: NvmlAnswer | None, expected: str) -> list[str]:
    """Why the container's userspace does not serve the host's module ``expected``.

    Every message names the userspace version found and the host's module version.
    """
    problems: list[str] = []
    found = state.version or "none"
    seen = (
        f"; the container sees kernel module {state.kernel_module_version}"
        if state.kernel_module_version and state.kernel_module_version != expected
        else ""
    )
    if state.version != expected:
        problems.append(
            f"userspace {found} installed, host kernel module {expected} wanted "
            f"(libnvidia-ml.so.1 -> {state.soname_target or 'missing'}){seen}"
        )
    stray = [v for v in state.versions if v != expected]
    if stray:
        problems.append(
            f"left-over libnvidia-ml of {', '.join(stray)} beside {expected} "
            f"({', '.join(lib for lib in state.libraries if not lib.endswith(expected))}): "
            "remove the other install (its installer's --uninstall or its packages)"
        )
    if nvml is not None and not nvml.ok:
        if nvml.mismatch:
            lib = f" (NVML library version {nvml.library_version})" if nvml.library_version else ""
            problems.append(
                f"nvidia-smi: Driver/library version mismatch with userspace {found}{lib} "
                f"and host kernel module {expected}{seen}: the host's module changed since "
                "its facts were gathered, or another libnvidia-ml is found first"
            )
        else:
            problems.append(f"nvidia-smi failed with userspace {found}: {nvml.message}")
    elif nvml is not None and nvml.driver_version != expected:
        problems.append(
            f"nvidia-smi reports driver {nvml.driver_version}, host kernel module {expected} "
            f"wanted (userspace {found})"
        )
    return problems
