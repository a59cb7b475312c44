"""Preflight and stale-line decisions on the lab hosts' GPU facts (no LXC, no API)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.modules.lxc_stale_gpu_lines import stale_lines

from specops.errors import ValidationError
from specops.migrate.preflight import ct_gpu_lines, gather_local_facts, parse_size, select_cards
from specops.migrate.report import render_markdown
from specops.migrate.spec import parse_spec
from specops_lab.hosttree import build_tree, load_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pve_a(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pve-a")
    spec = load_spec(REPO / "tests/fixtures/hosts/lab-converged/pve-a.yml")
    build_tree(spec, root, device_nodes=False)
    return gather_local_facts(str(root))


def test_free_cards_exclude_running_vm_holders(pve_a: dict[str, Any]) -> None:
    chosen, problems = select_cards(
        pve_a, "NVIDIA RTX A6000", 2, running_vms={201, 202}, minors_in_use=set()
    )
    assert (chosen, problems) == (["0000:01:00.0", "0000:02:00.0"], [])
    chosen, problems = select_cards(
        pve_a, "10de:2204", 1, running_vms={201, 202}, minors_in_use=set()
    )
    assert chosen == []
    assert "0000:41:00.0 held by running VM 201" in problems[0]
    assert "0000:42:00.0 held by running VM 202" in problems[0]
    # The API says VM 202 stopped, but the node says its QEMU runs and holds the
    # card's vfio group: a VM running in either view holds its card (gpu_select).
    chosen, problems = select_cards(pve_a, "10de:2204", 1, running_vms={201}, minors_in_use=set())
    assert chosen == []
    assert "0000:42:00.0 held by running VM 202" in problems[0]
    assert "VM 202's QEMU (pid 41202 /usr/bin/kvm) has /dev/vfio/31 open" in problems[0]


def test_vram_and_unknown_model(pve_a: dict[str, Any]) -> None:
    _, problems = select_cards(
        pve_a, "NVIDIA RTX A6000", 1, running_vms=set(), minors_in_use=set(), min_vram_gib=80
    )
    assert problems == ["'NVIDIA RTX A6000' has 48 GiB per card, 80 GiB wanted"]
    _, problems = select_cards(pve_a, "NVIDIA H200", 1, running_vms=set(), minors_in_use=set())
    assert problems == [
        "gpu_model: no card named 'NVIDIA H200' on pve-a (have: 'NVIDIA GeForce RTX 3090' "
        "(10de:2204), 'NVIDIA RTX A6000' (10de:2230)): give the product name exactly as the "
        "GPU facts report it (e.g. 'NVIDIA RTX A6000') or a PCI vendor:device id "
        "(e.g. '10de:2230')"
    ]


def test_stale_lines_keep_what_is_valid_on_the_target() -> None:
    facts = {
        "char_majors": {"nvidia": 195, "nvidia-uvm": 508},
        "gpus": [{"address": "0000:01:00.0", "nvidia": {"minor": 0}}],
    }
    lines = [
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 511:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "dev1: /dev/nvidia3,mode=0666",
    ]
    assert stale_lines(lines, facts, ["01:00.0"]) == [
        ("lxc.cgroup2.devices.allow", "c 511:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia3 dev/nvidia3 none bind,optional,create=file"),
        ("dev1", "/dev/nvidia3,mode=0666"),
    ]


def test_ct_gpu_lines_and_sizes() -> None:
    config = {
        "dev0": "/dev/nvidia0,mode=0666",
        "mp0": "/srv/models,mp=/models",
        "lxc": [
            ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
            ["lxc.apparmor.profile", "unconfined"],
        ],
    }
    assert ct_gpu_lines(config) == [
        "dev0: /dev/nvidia0,mode=0666",
        "lxc.cgroup2.devices.allow: c 195:* rwm",
    ]
    assert parse_size("8G") == 8 << 30
    assert parse_size("512M") == 512 << 20


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"vmid": 7, "target": "pve-a", "api": {"host": "h"}}, "vmid"),
        ({"vmid": 701, "target": "pve a", "api": {"host": "h"}}, "target"),
        ({"vmid": 701, "target": "pve-a", "api": {"host": "h"}, "mode": "copy"}, "mode"),
        ({"vmid": 701, "target": "pve-a", "api": {"host": "h"}, "gpu_count": 2}, "gpu_model"),
        (
            {"vmid": 701, "target": "pve-a", "api": {"host": "h"}, "mode": "backup_restore"},
            "backup_storage",
        ),
        (
            {"vmid": 701, "target": "pve-a", "api": {"host": "h"}, "recreate_mounts": ["models"]},
            "recreate_mounts",
        ),
        ({"vmid": 701, "target": "pve-a", "api": {}}, "api.host"),
        ({"vmid": 701, "target": "pve-a", "api": {"host": "h"}, "colour": 1}, "colour"),
    ],
)
def test_spec_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_spec(data)
    assert err.value.field == field


def test_token_secret_never_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", "s3cr3t-value")
    spec = parse_spec({"vmid": 701, "target": "pve-a", "api": {"host": "127.0.0.1"}})
    assert spec.api.secret() == "s3cr3t-value"
    assert "s3cr3t" not in repr(spec)


def test_report_cells_read_as_text() -> None:
    pair = {"before": ["195", "511"], "after": ["195", "508"]}
    text = render_markdown(
        {
            "vmid": 801,
            "source": "pve-b",
            "target": "pve-a",
            "move": {"message": "CT 801 moved pve-b -> pve-a"},
            "cards": {"before": ["0000:01:00.0 X"], "after": []},
            "driver": {"before": "580.126.09", "after": None},
            "uvm_major": {"before": 511, "after": 508},
            "majors": pair,
            "device_numbers": pair,
            "timings_s": {"preflight": 0.5, "move": 2.0},
            "total_s": 2.5,
        }
    )
    assert "| majors | 195, 511 | 195, 508 |" in text
    assert "| cards | 0000:01:00.0 X | - |" in text
    assert "| driver | 580.126.09 | - |" in text
    assert "| total | 2.5 |" in text


def test_stale_line_removal_keeps_crlf_bytes_elsewhere(tmp_path: Path) -> None:
    """Found by the two-reader test: the module read the conf with newline translation,
    so removing one line rewrote every CRLF ending (snapshots included) as LF."""
    conf = tmp_path / "etc/pve/lxc/801.conf"
    conf.parent.mkdir(parents=True)
    text = (
        "arch: amd64\r\nlxc.cgroup2.devices.allow: c 511:* rwm\r\nostype: debian\r\n"
        "\r\n[snap1]\r\nlxc.cgroup2.devices.allow: c 511:* rwm\r\n"
    )
    conf.write_bytes(text.encode())
    module = (
        Path(__file__).resolve().parents[2] / "collections/ansible_collections/specops/infra"
        "/plugins/modules/lxc_stale_gpu_lines.py"
    )
    args = tmp_path / "args.json"
    args.write_text(
        json.dumps(
            {
                "ANSIBLE_MODULE_ARGS": {
                    "vmid": 801,
                    "root": str(tmp_path),
                    "lines": ["lxc.cgroup2.devices.allow: c 511:* rwm"],
                    "gpu_facts": {"char_majors": {"nvidia": 195}, "gpus": []},
                }
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(module.parents[5])}
    proc = subprocess.run(
        [sys.executable, str(module), str(args)], capture_output=True, env=env, check=False
    )
    assert json.loads(proc.stdout)["changed"] is True, proc.stdout + proc.stderr
    assert (
        conf.read_bytes()
        == text.replace("lxc.cgroup2.devices.allow: c 511:* rwm\r\nostype", "ostype", 1).encode()
    )
