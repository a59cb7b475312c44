"""The real-driver check: readings from an NVIDIA H200 host, parsed again here.

``tests/fixtures/hosts/h200-real-2026-11-29.json`` was recorded on the device tool's
H200 machine by ``tests/gpu/h200_probe.py`` (raw files, links, listings and device
nodes, plus what ``gather_facts`` returned there). These tests rebuild a tree from the
raw readings, parse it with today's code, and compare with the recorded facts and with
a simulated tree of the same host.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops_lab import hosttree

FIXTURE = (
    Path(__file__).resolve().parent.parent / "fixtures" / "hosts" / "h200-real-2026-11-29.json"
)


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def materialise(raw: dict[str, Any], root: Path) -> None:
    """Lay the recorded readings out under ``root`` (paths as on the host)."""
    for path in raw["dirs"]:
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, text in raw["files"].items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for path, link in raw["links"].items():
        if path == "/proc/mounts":
            continue  # self/mounts: the probe did not read through it
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(link)
    for path, (_kind, major, minor, mode) in raw["nodes"].items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, stat.S_IFCHR | int(mode, 8), os.makedev(major, minor))


def test_recorded_raw_readings(record: dict[str, Any]) -> None:
    raw = record["after_cuda"]["raw"]
    files = raw["files"]
    assert files["/sys/module/nvidia/version"] == "580.159.04\n"
    assert gpu.parse_nvidia_version_text(files["/proc/driver/nvidia/version"]) == (
        "580.159.04",
        "open",
    )
    majors = gpu.parse_proc_devices(files["/proc/devices"])
    assert majors["nvidia"] == majors["nvidiactl"] == 195
    assert majors["nvidia-uvm"] == 238
    assert majors["nvidia-caps"] == 241
    assert majors["nvidia-nvswitch"] == 239
    assert majors["nvidia-nvlink"] == 240
    assert majors["nvidia-caps-imex-channels"] == 242
    info = gpu.parse_nvidia_information(files["/proc/driver/nvidia/gpus/0000:00:06.0/information"])
    assert info["Device Minor"] == "0"
    assert info["Bus Location"] == "0000:00:06.0"
    assert info["Model"] == "NVIDIA H200"
    dev = "/sys/devices/pci0000:00/0000:00:06.0"
    assert files[f"{dev}/class"] == "0x030200\n"
    assert files[f"{dev}/vendor"] == "0x10de\n"
    assert files[f"{dev}/device"] == "0x2335\n"
    assert files[f"{dev}/driver_override"] == "(null)\n"
    assert raw["links"][f"{dev}/driver"] == "../../../bus/pci/drivers/nvidia"
    assert f"{dev}/iommu_group" not in raw["links"]  # no IOMMU in that VM
    assert raw["dirs"]["/sys/kernel/iommu_groups"] == []
    assert raw["nodes"]["/dev/nvidia-uvm"][1:3] == [238, 0]
    assert raw["nodes"]["/dev/nvidia-caps/nvidia-cap1"][1:] == [241, 1, "0o400"]


def test_recorded_raw_parses_to_recorded_facts(record: dict[str, Any], tmp_path: Path) -> None:
    materialise(record["after_cuda"]["raw"], tmp_path)
    facts = gpu.gather_facts(gpu.HostRoots.under(tmp_path)).to_dict()
    expected = record["after_cuda"]["facts"]
    # /proc/mounts was a link the probe did not follow: cgroup v2 comes from the sysfs
    # file here instead. Everything else must be what the real host gave.
    assert facts["cgroup"]["version"] == expected["cgroup"]["version"] == 2
    facts.pop("cgroup")
    # File paths in the facts are where this machine reads them (under the root).
    assert facts["boot"]["cmdline_file"] == f"{tmp_path}/etc/default/grub"
    facts["boot"]["cmdline_file"] = "/etc/default/grub"
    expected = {k: v for k, v in expected.items() if k != "cgroup"}
    # open_by (processes holding a card's vfio device) came after the recording; that
    # host had no card on vfio-pci, so nothing could hold one.
    assert [g.pop("open_by") for g in facts["gpus"]] == [[]]
    # A field the facts gained after this recording (2026-11-29) comes from the GPU
    # catalogue, not from the host: checked here, then compared without it.
    for card in facts["gpus"]:
        assert card.pop("open_module_required") is False  # an H200: either module flavour
    assert facts == expected


def test_recorded_facts(record: dict[str, Any]) -> None:
    facts = record["after_cuda"]["facts"]
    assert facts["nvidia_module"]["version"] == "580.159.04"
    assert facts["nvidia_module"]["flavour"] == "open"
    assert facts["uvm_major"] == 238
    assert facts["caps_major"] == 241
    (card,) = facts["gpus"]
    assert card["address"] == "0000:00:06.0"
    assert card["name"] == "NVIDIA H200"
    assert card["class_code"] == "0x030200"
    assert card["driver"] == "nvidia"
    assert card["driver_override"] is None
    assert card["iommu_group"] is None
    assert card["nvidia"]["minor"] == 0
    assert card["nvidia"]["device_node"] == "/dev/nvidia0"
    assert card["free"] is True
    # The nodes were there before any CUDA call on that machine.
    assert record["before_cuda"]["facts"]["device_nodes"] == facts["device_nodes"]


def test_simulated_h200_matches_the_real_one(record: dict[str, Any], tmp_path: Path) -> None:
    """A simulated tree of the same host gives the same card facts and link layout."""
    spec = hosttree.parse_spec(
        {
            "node": "vm",
            "kernel_release": "6.18.44-fc-v657-gpu",
            "iommu": False,
            "nvidia": {
                "loaded": True,
                "version": "580.159.04",
                "flavour": "open",
                "modeset": False,
                "majors": {
                    "nvidia-uvm": 238,
                    "nvidia-nvswitch": 239,
                    "nvidia-nvlink": 240,
                    "nvidia-caps": 241,
                    "nvidia-caps-imex-channels": 242,
                },
            },
            "cards": [{"address": "0000:00:06.0", "model": "h200", "driver": "nvidia"}],
        }
    )
    root = hosttree.build_tree(spec, tmp_path / "sim")
    sim = gpu.gather_facts(gpu.HostRoots.under(root)).to_dict()
    real = record["after_cuda"]["facts"]
    (sim_card,), (real_card,) = sim["gpus"], real["gpus"]
    sim_card["nvidia"].pop("uuid")
    assert sim_card.pop("open_by") == []  # a field added after the recording
    assert sim_card.pop("open_module_required") is False  # catalogue field, newer than the record
    real_card = dict(
        real_card, nvidia={k: v for k, v in real_card["nvidia"].items() if k != "uuid"}
    )
    assert sim_card == real_card
    assert sim["char_majors"] == real["char_majors"]
    assert sim["nvidia_module"]["version"] == real["nvidia_module"]["version"]
    assert sim["nvidia_module"]["flavour"] == real["nvidia_module"]["flavour"]
    assert sim["device_nodes"] == real["device_nodes"]
    dev = "sys/devices/pci0000:00/0000:00:06.0"
    real_links = record["after_cuda"]["raw"]["links"]
    assert os.readlink(root / dev / "driver") == real_links[f"/{dev}/driver"]
    assert (
        os.readlink(root / "sys/bus/pci/devices/0000:00:06.0")
        == real_links["/sys/bus/pci/devices/0000:00:06.0"]
    )
