"""Verify nvidia_driver on a systemd container whose GPUs are a simulated PVE host tree
and whose driver is the .run installer stand-in (see prepare.yml)."""

from __future__ import annotations

from typing import Any

import pytest

HW = "/var/lib/specops/lab/pve-nd"
VERSION = "580.126.09"


def recap_changed(out: str) -> int:
    line = next(
        ln for ln in out.splitlines() if ln.startswith("specops-nvidia_driver ") and "ok=" in ln
    )
    return int(line.split("changed=")[1].split()[0])


def test_nouveau_is_blacklisted(host: Any) -> None:
    f = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert f.user == "root"
    assert f.mode == 0o644
    lines = f.content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_initramfs_was_rebuilt_once_by_the_handler(host: Any) -> None:
    calls = host.file("/var/log/specops-lab/update-initramfs.calls").content_string.splitlines()
    # converge ran it; the check-mode run and the idempotence run did not.
    assert [c.split(" ", 1)[1] for c in calls] == ["update-initramfs -u"]


def test_headers_for_the_simulated_pve8_kernel(host: Any) -> None:
    assert host.package("proxmox-headers-6.8.12-4-pve").is_installed
    listed = host.run(
        "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'pve-headers-*' 'linux-headers-*'"
    )
    assert [ln for ln in listed.stdout.splitlines() if ln.startswith("ii")] == []
    for name in ("build-essential", "dkms"):
        assert host.package(name).is_installed, name


def test_modules_load_at_boot(host: Any) -> None:
    lines = host.file("/etc/modules-load.d/nvidia.conf").content_string.splitlines()
    assert [ln for ln in lines if ln and not ln.startswith("#")] == [
        "nvidia",
        "nvidia-uvm",
        "nvidia-modeset",
    ]


def test_open_module_of_the_pinned_version_is_loaded(host: Any) -> None:
    assert host.file(f"{HW}/sys/module/nvidia/version").content_string.strip() == VERSION
    first = host.file(f"{HW}/proc/driver/nvidia/version").content_string.splitlines()[0]
    assert "Open Kernel Module" in first, "Blackwell must get the open modules"
    assert host.file(f"/var/cache/specops/nvidia/NVIDIA-Linux-x86_64-{VERSION}.run").exists
    log = host.file("/var/log/nvidia-installer.log").content_string
    assert "command line: --silent --dkms -m=kernel-open" in log


def test_dkms_knows_the_module(host: Any) -> None:
    out = host.check_output("dkms status")
    assert f"nvidia/{VERSION}" in out


def test_nvidia_smi_reports_the_version_for_each_gpu(host: Any) -> None:
    out = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert out.splitlines() == [VERSION, VERSION]
    lib = host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert lib.is_symlink
    assert lib.linked_to == f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}"


def test_device_nodes_made_by_the_boot_unit(host: Any, assert_service_running: Any) -> None:
    svc = host.service("nvidia-device-nodes.service")
    assert svc.is_enabled
    assert host.run("systemctl is-active nvidia-device-nodes.service").stdout.strip() == "active"
    devices = host.file(f"{HW}/proc/devices").content_string
    uvm = next(int(ln.split()[0]) for ln in devices.splitlines() if ln.endswith(" nvidia-uvm"))
    for node, major, minor in (
        ("nvidia-uvm", uvm, 0),
        ("nvidia-uvm-tools", uvm, 1),
        ("nvidiactl", 195, 255),
        ("nvidia-modeset", 195, 254),
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
    ):
        st = host.run(f"stat -c '%t %T %F' {HW}/dev/{node}").stdout.split()
        assert st[:2] == [f"{major:x}", f"{minor:x}"], node
        assert st[2] == "character", node


def test_persistenced_runs(host: Any, assert_service_running: Any) -> None:
    assert host.service("nvidia-persistenced.service").is_enabled
    assert_service_running("nvidia-persistenced.service")


def test_check_mode_plans_an_upgrade_and_changes_nothing(host: Any, converge: Any) -> None:
    host.run("touch /tmp/specops-check-marker && sleep 1")
    result = converge(check=True, nvidia_driver_version="550.144.03")
    assert result.returncode == 0, result.stdout[-3000:]
    # The upgrade is planned (the installer would run), and only planned.
    assert "Command would have run if not in check mode" in result.stdout
    newer = host.run(
        "find /etc /usr /var/cache/specops /var/lib/dkms /var/log/specops-lab "
        f"{HW} /run/nvidia-persistenced -newer /tmp/specops-check-marker"
    ).stdout.split()
    assert newer == []
    assert host.file(f"{HW}/sys/module/nvidia/version").content_string.strip() == VERSION


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"nvidia_driver_module_flavour": "proprietary"},
            "Only the open modules drive NVIDIA RTX PRO 6000 Blackwell",
        ),
        ({"nvidia_driver_headers_package": "proxmox-headers-6.8.99-1-pve"}, "cannot be installed"),
        ({"nvidia_driver_runfile_checksum": "md5:0"}, "sha256:<64 hex digits>"),
        (
            {"nvidia_driver_host_root": "/var/lib/specops/lab/pve-nd-unknown/"},
            "cannot be chosen for GPU generations unknown",
        ),
    ],
)
def test_preflight_refuses_before_changing_anything(
    host: Any, extra: dict[str, str], message: str, converge: Any
) -> None:
    host.run("touch /tmp/specops-refuse-marker && sleep 1")
    result = converge(**extra)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    newer = host.run(
        f"find /etc /usr /var/cache/specops {HW} -newer /tmp/specops-refuse-marker"
    ).stdout.split()
    assert newer == []


def test_nouveau_loaded_without_reboot_ok_stops_the_host_cleanly(host: Any, converge: Any) -> None:
    other = "/var/lib/specops/lab/pve-nd-nouveau"
    result = converge(nvidia_driver_host_root=other)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "reboot required: nouveau is loaded" in result.stdout
    assert "Run the installer" not in result.stdout
    assert not host.file(f"{other}/sys/module/nvidia").exists


def test_upgrade_stops_the_gpu_user_by_unit_name(host: Any, converge: Any) -> None:
    unit = "specops-lab-gpu-user.service"
    host.run(
        f"printf '%s\\n' '[Service]' 'ExecStart=/bin/sleep infinity' "
        f"'ExecStartPost=/bin/sh -c \"echo 1 > {HW}/sys/module/nvidia/refcnt\"' "
        f"'ExecStopPost=/bin/sh -c \"echo 0 > {HW}/sys/module/nvidia/refcnt\"' "
        f"> /etc/systemd/system/{unit} && systemctl daemon-reload && systemctl start {unit}"
    )
    assert host.service(unit).is_running
    # Without naming the unit the installer meets a module in use and the role fails.
    blocked = converge(nvidia_driver_version="550.144.03")
    assert blocked.returncode != 0
    assert "appears to already be loaded in your kernel and is in use" in (
        blocked.stdout + blocked.stderr
    )
    assert host.file(f"{HW}/sys/module/nvidia/version").content_string.strip() == VERSION
    upgraded = converge(nvidia_driver_version="550.144.03", nvidia_driver_stop_units=[unit])
    assert upgraded.returncode == 0, upgraded.stdout[-3000:]
    assert f"stopped {unit}" in upgraded.stdout
    assert not host.service(unit).is_running
    out = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert out.splitlines() == ["550.144.03", "550.144.03"]
    # Back to the pinned version; nothing of the GPU user's is running to stop.
    back = converge()
    assert back.returncode == 0, back.stdout[-3000:]
    assert host.file(f"{HW}/sys/module/nvidia/version").content_string.strip() == VERSION
