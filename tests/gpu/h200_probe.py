"""Probe a real NVIDIA host: raw readings plus the parsed GPU facts, as JSON.

Run on the device machine (not by pytest): ``python3 h200_probe.py OUTDIR`` with
``gpu.py`` (module_utils) beside it. The raw readings are what
``tests/gpu/test_real_h200.py`` materialises into a tree and parses again.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import stat
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu

CUDA_INIT = (
    "import torch; x = torch.ones(4, device='cuda'); "
    "print(torch.cuda.get_device_name(0), float(x.sum()))"
)

PATTERNS = [
    "/sys/module/nvidia/version",
    "/sys/module/nvidia*",
    "/sys/module/nouveau",
    "/sys/module/vfio*",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia",
    "/proc/driver/nvidia/gpus",
    "/proc/driver/nvidia/gpus/*",
    "/proc/driver/nvidia/gpus/*/information",
    "/proc/devices",
    "/proc/mounts",
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/hostname",
    "/etc/hostname",
    "/sys/fs/cgroup/cgroup.controllers",
    "/sys/firmware/efi",
    "/etc/kernel/proxmox-boot-uuids",
    "/etc/kernel/cmdline",
    "/usr/share/perl5/PVE/pvecfg.pm",
    "/sys/kernel/iommu_groups",
    "/sys/kernel/iommu_groups/*/devices/*",
    "/sys/bus/pci/drivers",
    "/sys/bus/pci/drivers/nvidia",
    "/sys/bus/pci/devices",
    "/sys/bus/pci/devices/*",
    "/sys/bus/pci/devices/*/vendor",
    "/sys/bus/pci/devices/*/device",
    "/sys/bus/pci/devices/*/class",
    "/sys/bus/pci/devices/*/subsystem_vendor",
    "/sys/bus/pci/devices/*/subsystem_device",
    "/sys/bus/pci/devices/*/driver_override",
    "/sys/bus/pci/devices/*/driver",
    "/sys/bus/pci/devices/*/iommu_group",
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
]


def capture() -> dict[str, Any]:
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    dirs: dict[str, list[str]] = {}
    nodes: dict[str, list[Any]] = {}
    errors: dict[str, str] = {}
    for pattern in PATTERNS:
        for path in sorted(glob.glob(pattern)):
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    links[path] = os.readlink(path)
                    real = os.path.realpath(path)
                    if os.path.isdir(real):
                        dirs.setdefault(real, sorted(os.listdir(real))[:200])
                elif stat.S_ISDIR(st.st_mode):
                    dirs[os.path.realpath(path)] = sorted(os.listdir(path))[:200]
                elif stat.S_ISCHR(st.st_mode):
                    nodes[path] = [
                        "c",
                        os.major(st.st_rdev),
                        os.minor(st.st_rdev),
                        oct(st.st_mode & 0o7777),
                    ]
                else:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        files[os.path.realpath(path)] = fh.read(65536)
            except OSError as exc:
                errors[path] = f"{type(exc).__name__}: {exc}"
    return {"files": files, "links": links, "dirs": dirs, "nodes": nodes, "errors": errors}


def facts() -> dict[str, Any]:
    try:
        return asdict(gpu.gather_facts(gpu.HostRoots()))
    except Exception as exc:  # record, do not hide
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    out = sys.argv[1]
    record: dict[str, Any] = {
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "uname": list(platform.uname()),
        "python": sys.version,
    }
    record["before_cuda"] = {"raw": capture(), "facts": facts()}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "-q", "-x"], check=False, capture_output=True, text=True, timeout=60
        )
        with open(os.path.join(out, "nvidia-smi-q.xml"), "w") as fh:
            fh.write(smi.stdout)
        record["nvidia_smi_rc"] = smi.returncode
    except (OSError, subprocess.SubprocessError) as exc:
        record["nvidia_smi_rc"] = str(exc)
    cuda = subprocess.run(
        [
            sys.executable,
            "-c",
            CUDA_INIT,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    record["cuda_init"] = {
        "rc": cuda.returncode,
        "stdout": cuda.stdout[-2000:],
        "stderr": cuda.stderr[-2000:],
    }
    record["after_cuda"] = {"raw": capture(), "facts": facts()}
    with open(os.path.join(out, "h200-raw.json"), "w") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    print(json.dumps(record["after_cuda"]["facts"], indent=1)[:6000])
    print("errors:", record["after_cuda"]["raw"]["errors"])
    print("cuda:", record["cuda_init"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
