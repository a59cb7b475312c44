"""The pct stand-in on real LXC: GPU lines from a PVE conf decide ENXIO vs EPERM."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specops_lab.pve import pct
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.lxcconf import StartError
from specops_lab.pve.testing import TEMPLATE_NAME, open_devices_in_ct

pytestmark = pytest.mark.lxc


SNAPSHOT = """
[before-gpu]
#taken before the GPU was added
arch: amd64
lxc.cgroup2.devices.allow: c 509:* rwm
snaptime: 1732000000
"""


def _mknod(node: Node, path: str, major: int, minor: int) -> None:
    host = node.host_path(path)
    host.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(host, 0o020666, os.makedev(major, minor))


def _create(node: Node, vmid: int, extra: str) -> Path:
    pct.ct_create(
        None,
        node,
        vmid,
        ostemplate=f"local:vztmpl/{TEMPLATE_NAME}",
        options={"hostname": f"ct{vmid}"},
    )
    conf = node.ct_conf(vmid)
    main = conf.read_text()
    conf.write_text(main + extra + SNAPSHOT)
    return conf


def test_raw_gpu_lines_enxio_then_eperm_without_allow(lab_cluster: Cluster) -> None:
    node = lab_cluster.node("pvetest-a")
    _mknod(node, "/dev/nvidia0", 195, 0)
    _mknod(node, "/dev/nvidia-uvm", 509, 0)
    conf = _create(
        node,
        101,
        (
            "lxc.cgroup2.devices.allow: c 195:* rwm\n"
            "lxc.cgroup2.devices.allow: c 509:* rwm\n"
            "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
            "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
        ),
    )
    snapshot_before = conf.read_text().split("[before-gpu]")[1]
    pct.ct_start(node, 101)
    assert pct.ct_status(node, 101).status == "running"
    # Allowed, no driver behind the node: ENXIO, for the card and for uvm.
    assert open_devices_in_ct(node, 101, "/dev/nvidia0", "/dev/nvidia-uvm") == {
        "/dev/nvidia0": "ENXIO",
        "/dev/nvidia-uvm": "ENXIO",
    }

    # Drop the uvm allow line through the API-equivalent edit path and reboot: EPERM.
    text = conf.read_text().replace("lxc.cgroup2.devices.allow: c 509:* rwm\n", "", 1)
    conf.write_text(text)
    pct.ct_reboot(node, 101, timeout=30)
    assert open_devices_in_ct(node, 101, "/dev/nvidia0", "/dev/nvidia-uvm") == {
        "/dev/nvidia0": "ENXIO",
        "/dev/nvidia-uvm": "EPERM",
    }
    # The snapshot section (which still allows 509) was ignored and left byte-identical.
    assert conf.read_text().split("[before-gpu]")[1] == snapshot_before
    pct.ct_stop(node, 101)
    assert pct.ct_status(node, 101).status == "stopped"


def test_dev_entries_allow_real_major_minor_only(lab_cluster: Cluster) -> None:
    node = lab_cluster.node("pvetest-a")
    _mknod(node, "/dev/nvidia2", 195, 2)
    _mknod(node, "/dev/nvidia-uvm", 511, 0)
    conf = _create(node, 102, "dev0: /dev/nvidia2,gid=44,mode=0666\ndev1: /dev/nvidia-uvm\n")
    before = conf.read_text()
    pct.ct_start(node, 102)
    seen = open_devices_in_ct(node, 102, "/dev/nvidia2", "/dev/nvidia-uvm")
    assert seen == {"/dev/nvidia2": "ENXIO", "/dev/nvidia-uvm": "ENXIO"}
    # devN allows exactly 195:2: another card's minor made inside the CT is denied.
    proc = pct.ct_exec(node, 102, ["sh", "-c", "mknod /dev/nvidia3 c 195 3 && ls -ln /dev/nvidia2"])
    assert proc.returncode == 0, proc.stderr.decode()
    assert " 44 " in proc.stdout.decode()  # gid=44 applied to the node
    assert open_devices_in_ct(node, 102, "/dev/nvidia3") == {"/dev/nvidia3": "EPERM"}
    assert conf.read_text() == before  # start never writes the PVE conf


def _wait_for_systemd(node: Node, vmid: int, timeout: float = 120) -> None:
    """Until the container's systemd answers (its signal handlers are set up by then)."""
    deadline = time.monotonic() + timeout
    while True:
        state = pct.ct_exec(node, vmid, ["systemctl", "is-system-running"], timeout=30)
        if state.stdout.strip():
            return
        assert time.monotonic() < deadline, f"CT {vmid}: systemd did not answer: {state}"
        time.sleep(0.5)


def test_dev_entry_follows_a_changed_major(lab_cluster: Cluster) -> None:
    """PVE stats the node at every start: a new uvm major needs no conf edit."""
    node = lab_cluster.node("pvetest-b")
    _mknod(node, "/dev/nvidia-uvm", 509, 0)
    _create(node, 103, "dev0: /dev/nvidia-uvm\n")
    pct.ct_start(node, 103)
    assert open_devices_in_ct(node, 103, "/dev/nvidia-uvm") == {"/dev/nvidia-uvm": "ENXIO"}
    # systemd, the container's PID 1, drops the shutdown signal until it has installed its
    # handler (a namespace's init ignores a signal it does not handle): a shutdown sent
    # early in its boot waits out the whole timeout (PVE's `pct shutdown` too). CI, 2026-12-04.
    _wait_for_systemd(node, 103)
    pct.ct_shutdown(node, 103, timeout=30)
    node.host_path("/dev/nvidia-uvm").unlink()
    _mknod(node, "/dev/nvidia-uvm", 511, 0)
    pct.ct_start(node, 103)
    assert open_devices_in_ct(node, 103, "/dev/nvidia-uvm") == {"/dev/nvidia-uvm": "ENXIO"}
    config = (node.lxcpath / node.lxc_name(103) / "config").read_text()
    assert "c 511:0 rw" in config
    assert "509" not in config


def test_missing_device_fails_start_with_pve_wording(lab_cluster: Cluster) -> None:
    node = lab_cluster.node("pvetest-a")
    _create(node, 104, "dev0: /dev/nvidia7\n")
    with pytest.raises(StartError, match=r"^Device /dev/nvidia7 does not exist$"):
        pct.ct_start(node, 104)
    assert pct.ct_status(node, 104).status == "stopped"
    assert not (node.lxcpath / node.lxc_name(104) / "config").exists()


def test_v1_node_ignores_v2_lines(lab_cluster_v1: Cluster) -> None:
    """A conf written for cgroup v2 on a v1 (PVE 6) host: the allow line does nothing."""
    node = lab_cluster_v1.node("pvetest-a")
    _mknod(node, "/dev/nvidia0", 195, 0)
    _create(
        node,
        105,
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
    )
    pct.ct_start(node, 105)
    assert open_devices_in_ct(node, 105, "/dev/nvidia0") == {"/dev/nvidia0": "EPERM"}


def test_memlock_above_this_machine_s_hard_limit_is_lowered_to_it() -> None:
    """PVE's root sets any ``lxc.prlimit.memlock``; the lab's processes cannot raise it,
    so the stand-in lowers each part above the hard limit to it (and says so)."""
    import resource  # noqa: PLC0415

    from specops_lab.pve.lxcconf import memlock_here  # noqa: PLC0415

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        assert memlock_here("unlimited") == ("unlimited", "")
        return
    assert memlock_here("unlimited") == (str(hard), memlock_here("unlimited")[1])
    assert "lowered" in memlock_here("unlimited")[1]
    assert memlock_here(f"{hard // 2}:unlimited")[0] == f"{hard // 2}:{hard}"
    assert memlock_here(str(hard // 2)) == (str(hard // 2), "")
