"""The GPU doctor on evidence recorded on a real NVIDIA H200 machine.

``tests/fixtures/doctor/h200-doctor-2026-12-01.json`` was written there by
``scripts/device/gpu-doctor-device.py run`` (the device tool's H200 machine: Firecracker
kernel 6.18, open module 580.159.04, cgroup v2; LXC 5.0.2 from Debian bookworm's
packages in a private prefix): the project's GPU facts of that host, the passthrough
lines generated from them, the LXC config, and for three containers on the real GPU -
the generated lines, the GPU allow lines removed, the nvidia-uvm allow lines with a
stale major - the node's and the container's evidence. These tests rebuild what can be
rebuilt with today's code and diagnose the recorded evidence again.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.diagnosis import (
    Expectation,
    diagnose,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    node_evidence,
)
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
# Two runs: 2026-12-01, and 2026-12-03 from a copied tree with nothing installed on the
# device (the scripts run on the tree's packages, Ansible's module_utils carried in the
# bundle: scripts/device/tree_packages.py).
FIXTURES = sorted((REPO / "tests" / "fixtures" / "doctor").glob("h200-doctor-*.json"))
MODULE = "580.159.04"
PATHS = ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"]


@pytest.fixture(scope="module", params=FIXTURES, ids=lambda p: p.stem)
def record(request: pytest.FixtureRequest) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(request.param.read_text())
    return data


def test_both_device_runs_are_read() -> None:
    assert [p.name for p in FIXTURES] == [
        "h200-doctor-2026-12-01.json",
        "h200-doctor-2026-12-03.json",
    ]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("device/gpu-doctor-device.py")


def _diagnose(record: dict[str, Any], case: str) -> Any:
    """Today's node evidence (from the recorded facts and conf) and the recorded
    container evidence, diagnosed now."""
    data = record["cases"][case]
    char_devices = {int(k): v for k, v in record["char_devices"].items()}
    node = node_evidence(
        record["gpu_facts"], record["vmid"], data["conf"], running=True, char_devices=char_devices
    )
    assert node == data["node_evidence"]
    return diagnose(
        record["container"], node, data["container_evidence"], Expectation(gpus=(record["card"],))
    )


def test_the_run_and_the_machine(record: dict[str, Any]) -> None:
    assert record["errors"] == []
    assert record["simulated_hardware"] is False
    host = record["host"]
    assert host["lxc_version"].strip() == "5.0.2"
    assert record["machine_cgroup"] == "v2"
    assert any(m.startswith("cgroup2 /sys/fs/cgroup cgroup2") for m in host["mounts"])
    assert host["nvidia_smi"]["output"].startswith("NVIDIA H200, 580.159.04")
    facts = record["gpu_facts"]
    assert facts["nvidia_module"]["version"] == MODULE
    assert facts["uvm_major"] == 238
    assert facts["cgroup"]["version"] == 2
    (card,) = facts["gpus"]
    assert (card["address"], card["nvidia"]["minor"]) == (record["card"], 0)
    for case in record["cases"].values():
        assert case["state"] == "RUNNING"
        assert case["stopped"] == "STOPPED"
        # What LXC said there: the memory controller is not delegated (root in that VM),
        # which does not stop a container.
        assert any('Could not enable "+memory"' in w for w in case["log_warnings"])


def test_the_lines_are_the_projects(record: dict[str, Any], script: ModuleType) -> None:
    """The script's three confs, made again from the recorded facts with today's code."""
    facts = record["gpu_facts"]
    char_devices = {int(k): v for k, v in record["char_devices"].items()}
    generated, devices = script.generated_conf(facts, record["card"], char_devices)
    assert generated == record["cases"]["generated"]["conf"]
    assert devices == record["devices"]
    assert script.allow_removed(generated, facts)[0] == record["cases"]["allow_removed"]["conf"]
    stale = script.stale_uvm(generated, 238, record["stale_uvm_major"])[0]
    assert stale == record["cases"]["stale_uvm"]["conf"]
    assert record["stale_uvm_major"] == 511
    config = record["cases"]["generated"]["lxc_config"]
    for line in ("c 195:0 rwm", "c 195:255 rwm", "c 238:0 rwm", "c 238:1 rwm"):
        assert f"lxc.cgroup2.devices.allow = {line}\n" in config
    assert "lxc.cgroup2.devices.allow" not in record["cases"]["allow_removed"]["lxc_config"]
    assert "lxc.cgroup2.devices.allow = c 511:0 rwm\n" in record["cases"]["stale_uvm"]["lxc_config"]


def test_generated_lines_are_healthy(record: dict[str, Any]) -> None:
    ct = record["cases"]["generated"]["container_evidence"]
    assert {d["path"]: d["open"] for d in ct["devices"]} == dict.fromkeys(PATHS, "OK")
    assert ct["nvidia_smi"]["output"] == f"{MODULE}\n"
    cuda = ct["cuda"]
    assert cuda["python"] == "/opt/torch/.venv/bin/python3"  # the engine's own Python
    assert cuda["driver_api"]["ok"] is True
    assert cuda["torch"]["device"] == "NVIDIA H200"
    assert cuda["torch"]["sum"] == 1024.0
    assert ct["userspace"]["loader_nvml"] == f"/usr/local/nvidia/lib64/libnvidia-ml.so.{MODULE}"
    result = _diagnose(record, "generated")
    assert result.status == "healthy"
    assert result.findings == ()
    assert result.checks == {
        "devices": "4/4 open",
        "nvidia_smi": MODULE,
        "cuda": "ok, torch ok",
        "userspace": MODULE,
        "server": "not checked",
        "router": "-",  # no router in front of it
    }


def test_allow_lines_removed_is_not_allowed(record: dict[str, Any]) -> None:
    ct = record["cases"]["allow_removed"]["container_evidence"]
    assert {d["path"]: d["open"] for d in ct["devices"]} == dict.fromkeys(PATHS, "EPERM")
    assert ct["nvidia_smi"]["rc"] == 255
    assert ct["nvidia_smi"]["output"] == "Failed to initialize NVML: Unknown Error\n"
    assert ct["cuda"]["driver_api"]["cuInit"] == "CUDA_ERROR_NO_DEVICE"
    result = _diagnose(record, "allow_removed")
    assert [f.code for f in result.findings] == ["not_allowed"]
    (finding,) = result.findings
    assert finding.title == "node present but not allowed"
    assert finding.paths == tuple(PATHS)
    assert "no lxc.cgroup2.devices.allow line for c 238:0, c 238:1, c 195:0, c 195:255" in (
        finding.cause
    )
    assert "playbooks/container.yml" in finding.fix


def test_stale_uvm_major(record: dict[str, Any]) -> None:
    ct = record["cases"]["stale_uvm"]["container_evidence"]
    opened = {d["path"]: d["open"] for d in ct["devices"]}
    assert opened == {
        "/dev/nvidia-uvm": "EPERM",
        "/dev/nvidia-uvm-tools": "EPERM",
        "/dev/nvidia0": "OK",
        "/dev/nvidiactl": "OK",
    }
    # The operator's symptom: nvidia-smi works, CUDA does not.
    assert ct["nvidia_smi"]["ok"] is True
    assert ct["cuda"]["driver_api"]["cuInit"] == "CUDA_ERROR_UNKNOWN"
    assert ct["cuda"]["torch"]["error"].startswith("RuntimeError: CUDA unknown error")
    result = _diagnose(record, "stale_uvm")
    assert [f.code for f in result.findings] == ["stale_uvm_major"]
    (finding,) = result.findings
    assert finding.title == "stale nvidia-uvm major"
    assert "allows nvidia-uvm as major 511" in finding.cause
    assert "nvidia-uvm is major 238 on vm" in finding.cause
    assert finding.evidence == (
        "/dev/nvidia-uvm: host 238:0, container open() EPERM",
        "/dev/nvidia-uvm-tools: host 238:1, container open() EPERM",
    )
