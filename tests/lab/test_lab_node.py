"""A lab PVE node's system stand-ins (lab/src/specops_lab/node.py) on a node tree in a temp
dir: the initramfs decides what the emulated boot loads, the installer stand-in installs
into the node's root with the node's majors, the node's systemd runs its units, and a
boot brings the node up as a real one would (no LXC: the node has no containers here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostRoots, gather_facts
from ansible_collections.specops.infra.plugins.module_utils.vfio import (
    OVERRIDE_SCRIPT,
    render_modprobe_conf,
    render_override_script,
)

from specops_lab import node as labnode
from specops_lab.hosttree import build_tree, load_spec
from specops_lab.nvidia_installer_standin import make_runfile

REPO = Path(__file__).resolve().parents[2]
PVE_A = REPO / "inventory/lab/hardware/pve-a.yml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """pve-a as described (the hard real case), with its tools, as `specops lab up` makes it."""
    node = tmp_path / "pve-a"
    build_tree(load_spec(PVE_A), node)
    (node / labnode.HARDWARE_FILE).write_text(PVE_A.read_text())
    labnode.install_tools(node)
    return node


def run(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command as the node's connection runs it (the node's tools first on PATH)."""
    return subprocess.run(
        list(argv), env=labnode.node_env(root), capture_output=True, text=True, check=False
    )


def facts(root: Path) -> dict[str, object]:
    f = gather_facts(HostRoots.under(str(root)))
    return {
        "nouveau": f.nouveau_loaded,
        "module": f.nvidia_module.version,
        "uvm": f.uvm_major,
        "drivers": {c.address: c.driver for c in f.gpus},
    }


def test_the_node_boots_as_its_initramfs_and_installs_say(root: Path) -> None:
    before = facts(root)
    assert before["nouveau"] is True
    assert set(before["drivers"].values()) == {"vfio-pci"}  # type: ignore[union-attr]
    boot_id = (root / "proc/sys/kernel/random/boot_id").read_text()

    # Blacklisted in /etc only: the initramfs still loads nouveau at the next boot.
    (root / "etc/modprobe.d/blacklist-nouveau.conf").write_text("blacklist nouveau\n")
    assert labnode.booted_spec(root).modules == ("nouveau", "snd_hda_intel")
    assert run(root, "update-initramfs", "-u").returncode == 0
    assert run(root, "shutdown", "-r", "now").returncode == 0
    assert (root / "proc/sys/kernel/random/boot_id").read_text() != boot_id
    assert facts(root)["nouveau"] is False

    # The driver, from its installer stand-in, into the node's root (not this machine's).
    nvdir = root / "srv/specops-lab/nvidia"
    runfile = make_runfile("580.126.09", nvdir)
    inst = run(root, str(runfile), "--silent", "--dkms", "-m=kernel-open")
    assert inst.returncode == 0, inst.stderr
    assert (root / "usr/bin/nvidia-smi").is_file()
    manifest = (root / "var/lib/nvidia/specops-standin-files").read_text().split()
    assert manifest, "the installer records its files"
    assert all(p.startswith(f"{root}/") for p in manifest), "never this machine's files"
    loaded = facts(root)
    assert loaded["module"] == "580.126.09"
    assert loaded["uvm"] == 508, "the node's own majors (its description), not a constant"
    # Every card still on vfio-pci: nvidia-smi finds none (fault 2 of issue 16).
    smi = run(root, "nvidia-smi", "-L")
    assert smi.returncode == 6
    assert "No devices were found" in smi.stdout
    assert (
        "dkms" in run(root, "dkms", "status").stdout
        or (root / "var/lib/dkms/nvidia/580.126.09").is_dir()
    )

    # A boot now: ids= still grabs every card; the installed module comes up again.
    run(root, "reboot")
    again = facts(root)
    assert again["module"] == "580.126.09"
    assert set(again["drivers"].values()) == {"vfio-pci"}  # type: ignore[union-attr]


def test_vfio_ids_removed_and_pins_decide_the_next_boot(root: Path) -> None:
    (root / labnode.KMOD_MARK).parent.mkdir(parents=True, exist_ok=True)
    (root / labnode.KMOD_MARK).write_text("580.126.09 open\n")
    # What vfio_release persists after releasing 01:00: the A6000/audio IDs gone from
    # ids=, every other vfio card pinned by address (3090s of running VMs, the rest).
    (root / "etc/modprobe.d/vfio.conf").write_text("options vfio-pci ids=10de:2204\n")
    script = root / OVERRIDE_SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        render_override_script(["0000:02:00.0", "0000:02:00.1", "0000:03:00.0", "0000:03:00.1"])
    )
    (root / "etc/modprobe.d/specops-vfio.conf").write_text(render_modprobe_conf())
    assert run(root, "update-initramfs", "-u", "-k", "all").returncode == 0
    spec = labnode.booted_spec(root)
    drivers = {c.address: (c.driver, c.driver_override) for c in spec.cards}
    assert drivers == {
        "0000:01:00.0": ("nvidia", None),  # released: neither listed nor pinned
        "0000:02:00.0": ("vfio-pci", "vfio-pci"),  # pinned by address
        "0000:03:00.0": ("vfio-pci", "vfio-pci"),  # the stopped VM's card, pinned
        "0000:41:00.0": ("vfio-pci", "vfio-pci"),  # 3090 of running VM 201 (and ids=)
        "0000:42:00.0": ("vfio-pci", "vfio-pci"),  # 3090 of running VM 202 (mapping)
    }
    # The grub/systemd-boot command line applies only once refreshed.
    (root / "etc/kernel/cmdline").write_text(
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet vfio-pci.ids=10de:2230\n"
    )
    assert labnode.booted_spec(root).cards[0].driver == "nvidia"
    assert run(root, "proxmox-boot-tool", "refresh").returncode == 0
    assert labnode.booted_spec(root).cards[0].driver == "vfio-pci"
    calls = (root / labnode.CALLS).read_text()
    assert "update-initramfs -u -k all" in calls
    assert "proxmox-boot-tool refresh" in calls


def test_node_systemd_runs_the_units(root: Path) -> None:
    units = root / "etc/systemd/system"  # every node has it (and usr/local/bin)
    tool = root / "usr/local/bin/make-nodes"
    tool.write_text('#!/bin/sh\necho made > "$SPECOPS_LAB_NODE_ROOT/run/made"\n')
    tool.chmod(0o755)
    (units / "nodes.service").write_text(
        "[Unit]\nDescription=make nodes\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/usr/local/bin/make-nodes\nExecStart=-/usr/bin/false-not-there\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    (units / "daemon.service").write_text(
        "[Unit]\nAfter=nodes.service\n[Service]\nExecStart=/bin/sleep 300\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    (units / "broken.service").write_text("[Service]\nType=oneshot\nExecStart=/bin/false\n")
    show = run(root, "systemctl", "show", "nodes.service").stdout
    assert "LoadState=loaded" in show
    assert "ActiveState=inactive" in show
    assert "UnitFileState=disabled" in show
    assert run(root, "systemctl", "is-enabled", "nodes.service").returncode == 1
    assert run(root, "systemctl", "enable", "nodes.service").returncode == 0
    assert run(root, "systemctl", "enable", "daemon.service").returncode == 0
    assert run(root, "systemctl", "start", "nodes.service").returncode == 0
    assert (root / "run/made").read_text() == "made\n"
    assert run(root, "systemctl", "is-active", "nodes.service").stdout.strip() == "active"
    failed = run(root, "systemctl", "start", "broken.service")
    assert failed.returncode == 1
    assert "Job for broken.service failed" in failed.stderr
    assert "LoadState=not-found" in run(root, "systemctl", "show", "nope.service").stdout
    # A boot starts the enabled units in After= order and ends the node's processes.
    run(root, "reboot")
    state = labnode.Units(root).state("daemon.service")
    pid = int(state["MainPID"])
    assert state["ActiveState"] == "active"
    assert pid > 0
    assert f"SPECOPS_LAB_NODE_ROOT={root}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    assert labnode.stop_node_processes(root) == [pid]


def test_apt_is_refused_on_a_lab_node(root: Path) -> None:
    out = run(root, "apt-get", "install", "-y", "dkms")
    assert out.returncode == 1
    assert "not emulated on a lab node" in out.stderr


def test_a_reboot_that_does_not_come_back(root: Path) -> None:
    """The lab fault of issue 31: with NO_RETURN_FAULT set, a reboot takes the node down
    (no boot id: the reboot's boot check fails) and boots nothing; once it is removed,
    a boot brings the node back as a reboot would."""
    boot_id = root / "proc/sys/kernel/random/boot_id"
    (root / labnode.NO_RETURN_FAULT).write_text("issue 31\n")
    (root / "etc/modprobe.d/blacklist-nouveau.conf").write_text("blacklist nouveau\n")
    assert run(root, "update-initramfs", "-u").returncode == 0
    assert run(root, "shutdown", "-r", "now").returncode == 0
    assert not boot_id.exists()
    assert facts(root)["nouveau"] is True, "nothing booted: the kernel's view is as it was"
    calls = (root / "var/log/specops-lab/boot-tools.calls").read_text()
    assert "down: the reboot does not come back (lab fault)" in calls
    (root / labnode.NO_RETURN_FAULT).unlink()
    assert run(root, "reboot").returncode == 0
    assert boot_id.read_text().strip()
    assert facts(root)["nouveau"] is False
