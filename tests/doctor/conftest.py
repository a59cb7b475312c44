"""GPU doctor tests: lab host facts (simulated trees) and evidence builders."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu, lxc_gpu
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    node_evidence,
)
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf

from specops_lab import hosttree

REPO = Path(__file__).resolve().parents[2]
# The lab nodes in known states (the lab itself starts them in the hard real state).
HARDWARE = REPO / "tests" / "fixtures" / "hosts" / "lab-converged"
BASE = "arch: amd64\nhostname: ct901\nostype: debian\nrootfs: local:901/vm-901-disk-0.raw\n"


def _tree(name: str, root: Path) -> Path:
    return hosttree.build_tree(hosttree.load_spec(HARDWARE / f"{name}.yml"), root)


def _facts(tree: Path) -> dict[str, Any]:
    facts: dict[str, Any] = gpu.gather_facts(gpu.HostRoots.under(tree)).to_dict()
    return facts


@pytest.fixture(scope="session")
def host_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pve-b's simulated tree (sysfs, procfs, mknod'd /dev)."""
    return _tree("pve-b", tmp_path_factory.mktemp("doctor-hw") / "pve-b")


@pytest.fixture(scope="session")
def pve_b(host_tree: Path) -> dict[str, Any]:
    """pve-b: 4x RTX PRO 6000 on nvidia (minors 0-3), uvm 511, nvswitch 509, cgroup v2."""
    return _facts(host_tree)


@pytest.fixture(scope="session")
def pve_a(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """pve-a: A6000s on vfio-pci, 3090s held by running VMs, no driver loaded."""
    return _facts(_tree("pve-a", tmp_path_factory.mktemp("doctor-hw-a") / "pve-a"))


def generated(facts: Mapping[str, Any], cards: list[str], method: str = "raw") -> str:
    """The conf that lxc_gpu_passthrough writes for ``cards`` (raw lines, cgroup v2)."""
    conf = pve_conf.parse(BASE)
    lxc_gpu.merge(
        conf,
        lxc_gpu.plan_devices(facts, cards),
        method=method,
        cgroup_key="lxc.cgroup2.devices.allow",
        gpu_majors={int(v) for v in facts["char_majors"].values()},
        foreign_majors={10: "misc"},
        dev_mode="0666",
    )
    return conf.render()


def node_ev(facts: Mapping[str, Any], text: str | None, **kw: Any) -> dict[str, Any]:
    kw.setdefault("running", True)
    kw.setdefault("char_devices", {10: "misc", 4: "tty"})
    return node_evidence(facts, 901, text, **kw)


def ct_ev(
    facts: Mapping[str, Any],
    paths: list[str],
    *,
    opens: Mapping[str, str] | None = None,
    numbers: Mapping[str, tuple[int, int]] | None = None,
    smi: Mapping[str, Any] | None = None,
    userspace: str | None = None,
    cuda: Mapping[str, Any] | None = None,
    server: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a container with these nodes shows (every node opens unless ``opens`` says)."""
    host = {n["path"]: (n["major"], n["minor"]) for n in facts["device_nodes"]}
    module = facts["nvidia_module"]["version"]
    devices = []
    for path in paths:
        answer = (opens or {}).get(path, "OK")
        if answer == "ENOENT":
            devices.append({"path": path, "present": False, "open": "ENOENT"})
            continue
        major, minor = (numbers or {}).get(path, host[path])
        devices.append(
            {
                "path": path,
                "present": True,
                "char": True,
                "major": major,
                "minor": minor,
                "mode": "0666",
                "open": answer,
            }
        )
    version = userspace or module
    return {
        "schema": 1,
        "reachable": True,
        "devices": devices,
        "nvidia_smi": dict(
            smi
            or {
                "present": True,
                "rc": 0,
                "output": f"{module}\n",
                "ok": True,
                "mismatch": False,
                "driver_version": module,
                "library_version": None,
            }
        ),
        "userspace": {
            "version": version,
            "versions": [version],
            "loader_version": None,
            "loader_nvml": None,
        },
        "cuda": dict(
            cuda
            or {
                "python": "/opt/engine/bin/python3",
                "rc": 0,
                "driver_api": {"ok": True, "cuInit": "CUDA_SUCCESS"},
                "torch": {"present": False},
            }
        ),
        "server": server,
    }
