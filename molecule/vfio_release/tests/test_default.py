"""Verify vfio_release on a systemd container whose PCI devices are a simulated PVE host
tree; a kernel stand-in service applies bind/unbind/drivers_probe (see prepare.yml)."""

from __future__ import annotations

import os
import re
from typing import Any

HW = "/var/lib/specops/lab/pve-vf"
DEV = f"{HW}/sys/bus/pci/devices"
STATE = (
    f"find {HW}/sys {HW}/proc /etc/modprobe.d /etc/default /usr/local/lib/specops "
    "/var/log/specops-lab -printf '%p %l %s %T@\\n' 2>/dev/null | sort | md5sum; "
    f"cat {HW}/sys/bus/pci/devices/*/driver_override | md5sum"
)


def driver(host: Any, address: str) -> str | None:
    link = host.file(f"{DEV}/{address}/driver")
    return os.path.basename(link.linked_to) if link.exists else None


def override(host: Any, address: str) -> str:
    return str(host.file(f"{DEV}/{address}/driver_override").content_string.strip())


def test_first_free_a6000_is_on_the_host_drivers(host: Any) -> None:
    assert driver(host, "0000:01:00.0") == "nvidia"
    assert override(host, "0000:01:00.0") == "nvidia"
    assert driver(host, "0000:01:00.1") == "snd_hda_intel"
    info = host.file(f"{HW}/proc/driver/nvidia/gpus/0000:01:00.0/information")
    assert "Device Minor: \t 0" in info.content_string
    # Its device node, made by nvidia-modprobe after the release (the driver makes none
    # for a card bound at run time).
    node = host.run(f"stat -c '%F %t:%T' {HW}/dev/nvidia0")
    assert node.stdout.strip() == "character special file c3:0", node.stdout + node.stderr


def test_vm_cards_are_untouched(host: Any) -> None:
    for address in ("0000:02:00.0", "0000:41:00.0", "0000:41:00.1", "0000:42:00.0"):
        assert driver(host, address) == "vfio-pci", address
        assert override(host, address) == "vfio-pci", address


def test_kernel_stand_in_saw_exactly_one_release(host: Any) -> None:
    lines = host.file("/var/log/specops-lab/pci-standin.log").content_string.splitlines()
    actions = [ln.split(" ", 1)[1] for ln in lines]
    assert actions == [
        "unbind 0000:01:00.0 vfio-pci",
        "unbind 0000:01:00.1 vfio-pci",
        "bind 0000:01:00.0 nvidia",
        "bind 0000:01:00.1 snd_hda_intel",
    ]


def test_boot_config_pins_vm_cards_by_address(host: Any) -> None:
    conf = host.file("/etc/modprobe.d/specops-vfio.conf").content_string
    assert "install vfio-pci /usr/local/lib/specops/vfio-pci-override.sh;" in conf
    assert "softdep nvidia pre: vfio-pci" in conf
    assert "ids=" not in conf
    script = host.file("/usr/local/lib/specops/vfio-pci-override.sh")
    assert script.mode == 0o755
    pinned = re.findall(r"devices/([^/ ]+)/driver_override", script.content_string)
    assert pinned == [
        "0000:02:00.0",
        "0000:02:00.1",
        "0000:41:00.0",
        "0000:41:00.1",
        "0000:42:00.0",
        "0000:42:00.1",
    ]
    assert host.run("sh -n /usr/local/lib/specops/vfio-pci-override.sh").rc == 0


def test_released_ids_left_the_id_list_and_the_grub_cmdline(host: Any) -> None:
    vfio = host.file("/etc/modprobe.d/vfio.conf").content_string
    # The other option stays; the ID list goes (every card left is pinned by address).
    assert vfio.splitlines() == ["options vfio-pci disable_vga=1"]
    grub = host.file("/etc/default/grub").content_string
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet amd_iommu=on"' in grub


def test_boot_tools_ran_once_each_for_grub(host: Any) -> None:
    calls = host.file("/var/log/specops-lab/boot-tools.calls").content_string.splitlines()
    assert sorted(c.split(" ", 1)[1] for c in calls) == [
        "update-grub ",
        "update-initramfs -u -k all",
    ]


def test_card_of_a_running_vm_is_refused_and_nothing_written(host: Any, converge: Any) -> None:
    before = host.run(STATE).stdout
    result = converge(
        vfio_release_model="",
        vfio_release_count=0,
        vfio_release_addresses=["41:00"],
        vfio_release_allow_stopped_vm_cards=True,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "held by running VM 201" in out
    assert "0000:42:00.0 NVIDIA GeForce RTX 3090 [vfio-pci] held by VM 202 (running" in out
    assert host.run(STATE).stdout == before


def test_card_of_a_stopped_vm_needs_the_override(host: Any, converge: Any) -> None:
    before = host.run(STATE).stdout
    result = converge(vfio_release_count=2)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "only 1 can be the host's" in out
    assert "1 more are assigned to stopped VMs" in out
    assert host.run(STATE).stdout == before


def test_check_mode_plans_and_writes_nothing(host: Any, converge: Any) -> None:
    before = host.run(STATE).stdout
    result = converge(check=True, vfio_release_count=2, vfio_release_allow_stopped_vm_cards=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert '"address": "0000:02:00.0"' in result.stdout
    assert host.run(STATE).stdout == before


def test_stopped_vm_card_with_override_then_pins_follow(host: Any, converge: Any) -> None:
    result = converge(vfio_release_count=2, vfio_release_allow_stopped_vm_cards=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert driver(host, "0000:02:00.0") == "nvidia"
    assert driver(host, "0000:02:00.1") == "snd_hda_intel"
    script = host.file("/usr/local/lib/specops/vfio-pci-override.sh").content_string
    assert "0000:02:00" not in script
    assert "0000:41:00.0" in script
    again = converge(vfio_release_count=2, vfio_release_allow_stopped_vm_cards=True)
    assert again.returncode == 0
    assert "changed=0" in again.stdout
