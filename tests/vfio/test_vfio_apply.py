"""vfio_release's sysfs writes on a simulated tree with the PCI kernel stand-in."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import vfio
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostGpuFacts
from ansible_collections.specops.infra.plugins.modules import vfio_release as module

from specops_lab.pci_standin import PciStandin

HostTree = Callable[..., Path]


def params(root: Path, etc: Path, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "addresses": [],
        "model": None,
        "count": None,
        "allow_stopped_vm_cards": False,
        "root": str(root),
        "modprobe_dir": str(etc / "modprobe.d"),
        "grub_file": str(etc / "default" / "grub"),
        "kernel_cmdline_file": str(etc / "kernel" / "cmdline"),
        "timeout": 3.0,
    }
    base.update(over)
    return base


def drivers(facts: HostGpuFacts, slot: str) -> dict[str, str | None]:
    card = next(c for c in facts.gpus if c.slot == slot)
    return {f.address: f.driver for f in card.functions}


def test_release_binds_the_card_to_nvidia_and_is_idempotent(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    facts_of: Callable[[Path], HostGpuFacts],
    tmp_path: Path,
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    standin(root)
    result = module.run(params(root, tmp_path / "etc", addresses=["01:00"]), check_mode=False)
    assert result["changed"] is True
    assert [(r["address"], r["to_driver"]) for r in result["released"]] == [
        ("0000:01:00.0", "nvidia"),
        ("0000:01:00.1", "snd_hda_intel"),
    ]
    facts = facts_of(root)
    assert drivers(facts, "0000:01:00") == {
        "0000:01:00.0": "nvidia",
        "0000:01:00.1": "snd_hda_intel",
    }
    card = next(c for c in facts.gpus if c.slot == "0000:01:00")
    assert card.driver_override == "nvidia"
    assert card.nvidia is not None
    assert card.nvidia.minor == 0
    # Untouched: the VMs' cards.
    assert drivers(facts, "0000:41:00")["0000:41:00.0"] == "vfio-pci"
    again = module.run(params(root, tmp_path / "etc", addresses=["01:00"]), check_mode=False)
    assert again["changed"] is False
    assert list(again["plan"]["already_on_host"]) == ["0000:01:00.0"]


def test_running_vm_card_writes_nothing(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    snapshot: Callable[[Path], dict[str, str]],
    tmp_path: Path,
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    s = standin(root)
    before = snapshot(root)
    with pytest.raises(vfio.VfioReleaseError, match="held by running VM 202"):
        module.run(
            params(
                root, tmp_path / "etc", addresses=["01:00", "42:00"], allow_stopped_vm_cards=True
            ),
            check_mode=False,
        )
    assert snapshot(root) == before
    assert s.log == []


def test_check_mode_reports_and_writes_nothing(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    snapshot: Callable[[Path], dict[str, str]],
    tmp_path: Path,
) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    s = standin(root)
    before = snapshot(root)
    result = module.run(
        params(root, tmp_path / "etc", model="NVIDIA RTX A6000", count=1), check_mode=True
    )
    assert result["changed"] is True
    assert result["released"][0] == {
        "address": "0000:01:00.0",
        "card": "0000:01:00.0",
        "kind": "gpu",
        "from_driver": "vfio-pci",
        "to_driver": "nvidia",
        "driver_override": "nvidia",
    }
    assert snapshot(root) == before
    assert s.log == []


def test_failed_probe_restores_every_function_touched(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    facts_of: Callable[[Path], HostGpuFacts],
    tmp_path: Path,
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    s = standin(root)
    (root / ".standin").mkdir()
    # The first card goes over, the second card's GPU fails its nvidia probe.
    (root / ".standin" / "fail-probe").write_text("0000:02:00.0\n")
    before = facts_of(root)
    with pytest.raises(vfio.VfioReleaseError) as err:
        module.run(
            params(
                root,
                tmp_path / "etc",
                addresses=["01:00", "02:00"],
                allow_stopped_vm_cards=True,
                timeout=0.5,
            ),
            check_mode=False,
        )
    msg = str(err.value)
    assert "0000:02:00.0: bound to nothing 0.5s after drivers_probe, expected nvidia" in msg
    assert "every function touched was restored to its previous binding" in msg
    after = facts_of(root)
    for slot in ("0000:01:00", "0000:02:00"):
        assert drivers(after, slot) == drivers(before, slot)
        b = next(c for c in before.gpus if c.slot == slot)
        a = next(c for c in after.gpus if c.slot == slot)
        assert [f.driver_override for f in a.functions] == [f.driver_override for f in b.functions]
    assert "probe 0000:02:00.0 nvidia: fails (fault injected)" in s.log
    assert "bind 0000:01:00.0 nvidia" in s.log  # it had really moved, then came back


def test_boot_config_returned_for_the_role(
    host_tree: HostTree, standin: Callable[[Path], PciStandin], tmp_path: Path
) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    standin(root)
    etc = tmp_path / "etc"
    (etc / "modprobe.d").mkdir(parents=True)
    (etc / "modprobe.d" / "vfio.conf").write_text("options vfio-pci ids=10de:2230,10de:1aef\n")
    result = module.run(params(root, etc, addresses=["01:00"]), check_mode=True)
    files = result["boot_config"]["files"]
    assert files[str(etc / "modprobe.d" / "vfio.conf")].startswith("# specops vfio_release")
    assert str(etc / "modprobe.d" / "specops-vfio.conf") in files
    assert list(result["boot_config"]["refresh"]) == ["initramfs"]
    assert not (etc / "modprobe.d" / "specops-vfio.conf").exists()


# --------------------------------------------------------------------------- PVE VM lock


def _lock_taken(root: Path, vmid: int) -> bool:
    """Whether someone holds PVE's lock of ``vmid`` (a try from a separate open file)."""
    path = vfio.vm_lock_file(root, vmid)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


class _WatchedSysfs(vfio.FileSysfs):
    """The real sysfs writes, noting at each unbind whether VM 203's lock is held."""

    def __init__(self, root: Path) -> None:
        super().__init__(root / "sys")
        self.node_root = root
        self.locked_at_unbind: list[bool] = []

    def unbind(self, address: str, driver: str) -> None:
        self.locked_at_unbind.append(_lock_taken(self.node_root, 203))
        super().unbind(address, driver)


def _start_vm_203(root: Path) -> None:
    """What `qm start 203` leaves on a node: pidfile, the QEMU's cmdline and vfio fds."""
    (root / "run" / "qemu-server" / "203.pid").write_text("5203\n")
    proc = root / "proc" / "5203"
    (proc / "fd").mkdir(parents=True)
    (proc / "cmdline").write_text("\0".join(["/usr/bin/kvm", "-id", "203", ""]))
    (proc / "fd" / "0").symlink_to("/dev/vfio/15")


def test_stopped_vm_card_is_released_under_pve_vm_lock(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    facts_of: Callable[[Path], HostGpuFacts],
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    standin(root)
    request = vfio.parse_request(
        addresses=["02:00"], model=None, count=None, allow_stopped_vm_cards=True
    )
    drivers = vfio.available_pci_drivers(root / "sys")
    plan = vfio.plan_release(facts_of(root), request, drivers)
    assert plan.release[0].stopped_vm_holders == (203,)
    sysfs = _WatchedSysfs(root)
    applied, report = vfio.release_locked(
        root, plan, lambda: vfio.plan_release(facts_of(root), request, drivers), sysfs
    )
    assert [r["to_driver"] for r in report] == ["nvidia", "snd_hda_intel"]
    assert sysfs.locked_at_unbind == [True, True]  # qm start 203 would have waited
    assert not _lock_taken(root, 203)  # released afterwards
    assert applied.release[0].address == "0000:02:00.0"


def test_vm_started_before_the_lock_keeps_its_card(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    snapshot: Callable[[Path], dict[str, str]],
    facts_of: Callable[[Path], HostGpuFacts],
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    s = standin(root)
    request = vfio.parse_request(
        addresses=["02:00"], model=None, count=None, allow_stopped_vm_cards=True
    )
    drivers = vfio.available_pci_drivers(root / "sys")
    plan = vfio.plan_release(facts_of(root), request, drivers)  # VM 203 stopped here
    _start_vm_203(root)  # ... and started before the release got PVE's lock
    before = snapshot(root)
    with pytest.raises(vfio.VfioReleaseError, match="held by running VM 203"):
        vfio.release_locked(
            root,
            plan,
            lambda: vfio.plan_release(facts_of(root), request, drivers),
            vfio.FileSysfs(root / "sys"),
        )
    after = snapshot(root)
    assert after.pop("var/lock/qemu-server/lock-203.conf") is not None  # PVE creates it too
    assert after == before
    assert s.log == []


def test_a_held_vm_lock_refuses_before_anything_changes(
    host_tree: HostTree,
    standin: Callable[[Path], PciStandin],
    snapshot: Callable[[Path], dict[str, str]],
    tmp_path: Path,
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    s = standin(root)
    lock = vfio.vm_lock_file(root, 203)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # a qm start / backup of VM 203 in progress
        before = snapshot(root)
        with pytest.raises(vfio.VfioReleaseError, match=r"VM 203: PVE's lock .* is still held"):
            module.run(
                params(
                    root,
                    tmp_path / "etc",
                    addresses=["02:00"],
                    allow_stopped_vm_cards=True,
                    timeout=0.3,
                ),
                check_mode=False,
            )
        assert snapshot(root) == before
    assert s.log == []


def test_system_files_are_read_under_the_system_root_and_named_as_the_host_sees_them(
    host_tree: HostTree, standin: Callable[[Path], PciStandin], tmp_path: Path
) -> None:
    """A lab node (issue 16): its modprobe.d and kernel command line live under its root;
    the boot config names them as the node sees them (the role writes them under it)."""
    root = host_tree("a6000-3090", nvidia=True)
    standin(root)
    (root / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=10de:2230,10de:1aef\n")
    over = {
        "system_root": str(root),
        "modprobe_dir": "/etc/modprobe.d",
        "grub_file": "/etc/default/grub",
        "kernel_cmdline_file": "/etc/kernel/cmdline",
    }
    result = module.run({**params(root, tmp_path), **over, "addresses": ["01:00"]}, check_mode=True)
    files = result["boot_config"]["files"]
    assert files["/etc/modprobe.d/vfio.conf"].startswith("# specops vfio_release")
    assert "/etc/modprobe.d/specops-vfio.conf" in files
    assert all(p.startswith("/etc/") or p.startswith("/usr/local/") for p in files)


def test_check_mode_plans_a_release_before_the_driver_is_loaded(
    host_tree: HostTree, tmp_path: Path
) -> None:
    """A check run of a fresh node: nvidia_driver only planned the module; the release is
    planned as the real run will find the host, with a warning (a real run refuses)."""
    root = host_tree("a6000-3090")  # no nvidia driver registered
    etc = tmp_path / "etc"
    result = module.run(params(root, etc, addresses=["01:00"]), check_mode=True)
    assert result["changed"] is True
    assert [s["to_driver"] for s in result["released"] if s["kind"] == "gpu"] == ["nvidia"]
    assert any("not loaded yet" in w for w in result["warnings_text"])
    with pytest.raises(vfio.VfioReleaseError, match="the nvidia driver is not loaded"):
        module.run(params(root, etc, addresses=["01:00"]), check_mode=False)
