"""Role lxc_gpu_passthrough end to end on real LXC through the lab PVE stand-in.

A lab node ``ctgpu-b`` is the simulated host pve-b (4x RTX PRO 6000 at minors 0-3,
nvidia-uvm major 511, PVE 8.4, cgroup v2) with real device nodes (mknod). The role runs
with ansible-playbook against it (local connection, ``pct`` = scripts/lab/pct), writes
the container's conf, reboots the running container, and the container then opens the
nodes it was given with ENXIO (allowed by the device cgroup, no driver behind them) and a
card it was not given with EPERM (denied). This machine is cgroup v1 (hybrid): the
stand-in enforces the node's v2 lines through LXC's v1 key (lab/src/specops_lab/pve/README.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specops_lab import hosttree
from specops_lab.pve import pct
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.testing import (
    TEMPLATE_NAME,
    make_test_cluster,
    open_devices_in_ct,
    stop_lab_containers,
)

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

NODE = "ctgpu-b"


SNAPSHOT = """
[before-move]
#taken on the old host
arch: amd64
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
snaptime: 1732000000
"""

# GPU lines written on a host whose uvm major was 509 and whose cards were minors 0, 1.
OLD_HOST_LINES = """\
lxc.cgroup2.devices.allow: c 195:0 rwm
lxc.cgroup2.devices.allow: c 195:1 rwm
lxc.cgroup2.devices.allow: c 195:255 rwm
lxc.cgroup2.devices.allow: c 509:0 rwm
lxc.cgroup2.devices.allow: c 509:1 rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
"""


def _lab_node(
    base: Path, template: Path, build: Callable[..., Path], *, v1: bool = False
) -> tuple[Cluster, Node]:
    cluster = make_test_cluster(base, template, names=(NODE,), cgroup="v1" if v1 else "v2")
    lab_node = cluster.node(NODE)
    if v1:  # a PVE 6 host: cgroup v1, no devN entries
        build("pve-b", lab_node.root, node=NODE, cgroup=1, pve_version="6.4-1", pve_release="6.4")
    else:
        build("pve-b", lab_node.root, node=NODE)
    return cluster, lab_node


@pytest.fixture
def node(tmp_path: Path, rootfs_tarball: Path, host_builder: Callable[..., Path]) -> Iterator[Node]:
    cluster, lab_node = _lab_node(tmp_path, rootfs_tarball, host_builder)
    try:
        yield lab_node
    finally:
        stop_lab_containers(cluster)


@pytest.fixture
def node_v1(
    tmp_path: Path, rootfs_tarball: Path, host_builder: Callable[..., Path]
) -> Iterator[Node]:
    cluster, lab_node = _lab_node(tmp_path, rootfs_tarball, host_builder, v1=True)
    try:
        yield lab_node
    finally:
        stop_lab_containers(cluster)


def _create(node: Node, vmid: int, extra: str = "") -> Path:
    pct.ct_create(
        None,
        node,
        vmid,
        ostemplate=f"local:vztmpl/{TEMPLATE_NAME}",
        options={"hostname": f"ctgpu-{vmid}"},
    )
    conf = node.ct_conf(vmid)
    conf.write_text(conf.read_text() + extra)
    return conf


def _mknod_in_ct(node: Node, vmid: int, path: str, major: int, minor: int) -> None:
    proc = pct.ct_exec(node, vmid, ["mknod", path, "c", str(major), str(minor)], timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()


def _run_role(node: Node, tmp: Path, *options: str, **role_vars: Any) -> dict[str, Any]:
    """ansible-playbook with the role on the lab node; returns the json callback's output."""
    proc = _playbook(node, tmp, options, role_vars)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _run_role_failing(node: Node, tmp: Path, **role_vars: Any) -> str:
    """The role run that must fail; returns its output (the json callback's text)."""
    proc = _playbook(node, tmp, (), role_vars)
    assert proc.returncode != 0, proc.stdout[-3000:]
    return proc.stdout + proc.stderr


def _playbook(
    node: Node, tmp: Path, options: tuple[str, ...], role_vars: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    inventory = {
        "all": {
            "hosts": {
                NODE: {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "lxc_gpu_passthrough_host_root": str(node.root),
                    "lxc_gpu_passthrough_pct_command": [
                        str(REPO / "scripts" / "lab" / "pct"),
                        "--node-root",
                        str(node.root),
                    ],
                }
            }
        }
    }
    (tmp / "inventory.json").write_text(json.dumps(inventory))
    (tmp / "play.yml").write_text(
        "- hosts: " + NODE + "\n  gather_facts: false\n  roles: [lxc_gpu_passthrough]\n"
    )
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp / "facts"),
        SPECOPS_PYTHON=sys.executable,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp / "inventory.json"),
            str(tmp / "play.yml"),
            "-e",
            json.dumps(role_vars),
            *options,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _task(out: dict[str, Any], name_start: str) -> dict[str, Any]:
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ", 1)[-1].startswith(name_start):
                result: dict[str, Any] = task["hosts"][NODE]
                return result
    raise AssertionError(f"no task {name_start!r}")


def _changed(out: dict[str, Any]) -> int:
    return int(out["stats"][NODE]["changed"])


def _init_pid(node: Node, vmid: int) -> int | None:
    return pct.ct_status(node, vmid).pid


def test_dev_entries_enxio_for_given_eperm_for_other(node: Node, tmp_path: Path) -> None:
    vmid = 951
    conf = _create(node, vmid)
    pct.ct_start(node, vmid)
    pid_before = _init_pid(node, vmid)

    out = _run_role(
        node, tmp_path, lxc_gpu_passthrough_vmid=vmid, lxc_gpu_passthrough_gpus=["41:00.0"]
    )
    config = _task(out, "Ensure the container's GPU lines")
    assert config["changed"] is True
    assert config["method"] == "dev"  # PVE 8.4
    assert config["gpus"] == ["0000:41:00.0"]
    assert _task(out, "Reboot the container")["changed"] is True
    text = conf.read_text()
    assert "dev0: /dev/nvidia2,mode=0666\n" in text  # 41:00.0 has Device Minor 2
    assert "dev2: /dev/nvidia-uvm,mode=0666\n" in text
    assert _init_pid(node, vmid) != pid_before  # rebooted, running again

    seen = open_devices_in_ct(
        node, vmid, "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"
    )
    assert seen == {
        "/dev/nvidia2": "ENXIO",
        "/dev/nvidiactl": "ENXIO",
        "/dev/nvidia-uvm": "ENXIO",
        "/dev/nvidia-uvm-tools": "ENXIO",
    }
    # A card not given (minor 3), made inside the container: the device cgroup denies it.
    _mknod_in_ct(node, vmid, "/dev/nvidia3", 195, 3)
    assert open_devices_in_ct(node, vmid, "/dev/nvidia3") == {"/dev/nvidia3": "EPERM"}

    # Second run: nothing changes, no reboot.
    pid = _init_pid(node, vmid)
    again = _run_role(
        node, tmp_path, lxc_gpu_passthrough_vmid=vmid, lxc_gpu_passthrough_gpus=["41:00.0"]
    )
    assert _changed(again) == 0
    assert _task(again, "Reboot the container").get("skipped") is True
    assert conf.read_text() == text
    assert _init_pid(node, vmid) == pid


def test_migrated_raw_conf_corrected_enxio_eperm(node: Node, tmp_path: Path) -> None:
    """A conf from another host (uvm 509, minors 0,1) on pve-b (uvm 511, cards 2,3)."""
    vmid = 952
    conf = _create(node, vmid, OLD_HOST_LINES + SNAPSHOT)
    snapshot = conf.read_text().split("[before-move]", 1)[1]
    pct.ct_start(node, vmid)
    pid = _init_pid(node, vmid)
    role_vars = {
        "lxc_gpu_passthrough_vmid": vmid,
        "lxc_gpu_passthrough_gpus": ["0000:41:00.0", "0000:61:00.0"],
        "lxc_gpu_passthrough_method": "raw",
        # Two cards get NCCL's memlock line; this machine cannot raise the limit.
        "lxc_gpu_passthrough_memlock": str(_memlock_below_hard()),
    }

    # Check mode with diff: reports the change, writes nothing, restarts nothing.
    before = conf.read_text()
    checked = _run_role(node, tmp_path, "--check", "--diff", **role_vars)
    planned = _task(checked, "Ensure the container's GPU lines")
    assert planned["changed"] is True
    assert planned["diff"]["before"] == before
    assert "lxc.cgroup2.devices.allow: c 511:0 rwm\n" in planned["diff"]["after"]
    assert _task(checked, "Reboot the container").get("skipped") is True
    assert conf.read_text() == before
    assert _init_pid(node, vmid) == pid

    out = _run_role(node, tmp_path, **role_vars)
    config = _task(out, "Ensure the container's GPU lines")
    assert config["changed"] is True
    assert "lxc.cgroup2.devices.allow: c 509:0 rwm" in config["removed"]
    assert _task(out, "Reboot the container")["changed"] is True
    text = conf.read_text()
    main = text.split("[before-move]")[0]
    for line in (
        "lxc.cgroup2.devices.allow: c 195:2 rwm",
        "lxc.cgroup2.devices.allow: c 195:3 rwm",
        "lxc.cgroup2.devices.allow: c 511:0 rwm",
        "lxc.cgroup2.devices.allow: c 511:1 rwm",
        "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file",
    ):
        assert line + "\n" in main
    for stale in ("c 195:0 ", "c 195:1 ", "c 509:", "/dev/nvidia0 ", "/dev/nvidia1 "):
        assert stale not in main
    assert text.split("[before-move]", 1)[1] == snapshot  # byte-identical

    seen = open_devices_in_ct(node, vmid, "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia-uvm")
    assert seen == {"/dev/nvidia2": "ENXIO", "/dev/nvidia3": "ENXIO", "/dev/nvidia-uvm": "ENXIO"}
    # The old host's card 0 is gone from the container, and making it by hand is denied.
    assert open_devices_in_ct(node, vmid, "/dev/nvidia0") == {"/dev/nvidia0": "ENOENT"}
    _mknod_in_ct(node, vmid, "/dev/nvidia0", 195, 0)
    assert open_devices_in_ct(node, vmid, "/dev/nvidia0") == {"/dev/nvidia0": "EPERM"}

    again = _run_role(node, tmp_path, **role_vars)
    assert _changed(again) == 0
    assert conf.read_text() == text


def test_stopped_container_is_not_started_and_check_mode_writes_nothing(
    node: Node, tmp_path: Path
) -> None:
    vmid = 953
    conf = _create(node, vmid, OLD_HOST_LINES)
    before = conf.read_text()
    role_vars: dict[str, Any] = {
        "lxc_gpu_passthrough_vmid": vmid,
        "lxc_gpu_passthrough_gpu_model": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "lxc_gpu_passthrough_gpu_count": 2,
    }
    planned = _run_role(node, tmp_path, "--check", "--diff", **role_vars)
    lines = _task(planned, "Ensure the container's GPU lines")
    assert lines["changed"] is True, "check mode reports the change it would make"
    assert lines.get("diff"), "and shows it"
    assert conf.read_text() == before, "check mode writes nothing"
    assert pct.ct_status(node, vmid).status == "stopped"

    out = _run_role(node, tmp_path, **role_vars)
    assert _task(out, "Ensure the container's GPU lines")["gpus"] == [
        "0000:01:00.0",
        "0000:21:00.0",
    ]
    assert _task(out, "Reboot the container").get("skipped") is True
    assert pct.ct_status(node, vmid).status == "stopped"
    assert conf.read_text() != before


def test_raw_v1_lines_on_a_cgroup_v1_host(node_v1: Node, tmp_path: Path) -> None:
    """PVE 6 (cgroup v1): auto picks raw lines with the v1 key; ENXIO/EPERM as on v2."""
    vmid = 954
    conf = _create(node_v1, vmid, OLD_HOST_LINES)
    pct.ct_start(node_v1, vmid)
    out = _run_role(
        node_v1, tmp_path, lxc_gpu_passthrough_vmid=vmid, lxc_gpu_passthrough_gpus=["21:00.0"]
    )
    assert _task(out, "Ensure the container's GPU lines")["method"] == "raw"
    main = conf.read_text()
    assert "lxc.cgroup.devices.allow: c 195:1 rwm\n" in main
    assert "lxc.cgroup.devices.allow: c 511:0 rwm\n" in main
    assert "lxc.cgroup2." not in main  # the old host's v2 lines are replaced
    seen = open_devices_in_ct(node_v1, vmid, "/dev/nvidia1", "/dev/nvidia-uvm")
    assert seen == {"/dev/nvidia1": "ENXIO", "/dev/nvidia-uvm": "ENXIO"}
    _mknod_in_ct(node_v1, vmid, "/dev/nvidia2", 195, 2)
    assert open_devices_in_ct(node_v1, vmid, "/dev/nvidia2") == {"/dev/nvidia2": "EPERM"}


# --------------------------------------------------------------------------- multi-card

SHAPES = REPO / "inventory" / "lab" / "hardware"
PRO = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def _converged(spec_path: Path, root: Path, node_name: str) -> Any:
    """A lab shape after the host roles: every card no running VM holds released to the
    nvidia driver (vfio_release's rule), the driver loaded (the installer stand-in)."""
    spec = hosttree.load_spec(spec_path)
    held = {addr for vm in spec.vms if vm.running for addr in _vm_addresses(vm.hostpci)}
    free = [c.address for c in spec.cards if c.address not in held]
    spec = hosttree.with_nvidia_loaded(hosttree.with_cards_released(spec, free))
    spec = dataclasses.replace(spec, node=node_name)
    hosttree.build_tree(spec, root)
    return spec


def _vm_addresses(hostpci: Any) -> list[str]:
    out = []
    for entry in hostpci:
        first = str(entry).split(",")[0]  # host=ADDR or mapping=ID (the lab's VMs)
        host = first.removeprefix("host=")
        if host and "=" not in host:
            out.append(host if "." in host else host + ".0")
    return out


def _memlock_below_hard() -> int:
    """A memlock limit this machine can apply: processes here lack CAP_SYS_RESOURCE (see
    docs/testing.md), so LXC can lower RLIMIT_MEMLOCK but not raise it to production's
    ``unlimited``; half the hard limit proves the line reaches the container."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return (64 << 20 if hard == resource.RLIM_INFINITY else hard) // 2


@pytest.mark.parametrize(
    ("shape", "count"), [("pve-b.yml", 2), ("shapes/pro8.yml", 4)], ids=["pve-b-2", "pro8-4"]
)
def test_multi_card_container_every_card_and_nccl_limits(
    tmp_path: Path, rootfs_tarball: Path, shape: str, count: int
) -> None:
    """2 cards on the lab's pve-b (its 4th card held by running VM 301) and 4 on pro8:
    every card's node opens (ENXIO: allowed, no driver), a card not given is denied, the
    VM's card appears nowhere, and the container's /dev/shm and memlock are the role's."""
    cluster = make_test_cluster(tmp_path, rootfs_tarball, names=(NODE,))
    node = cluster.node(NODE)
    spec = _converged(SHAPES / shape, node.root, NODE)
    held = {a for vm in spec.vms if vm.running for a in _vm_addresses(vm.hostpci)}
    try:
        vmid = 960 + count
        conf = _create(node, vmid)
        pct.ct_start(node, vmid)
        memlock = _memlock_below_hard()
        role_vars = {
            "lxc_gpu_passthrough_vmid": vmid,
            "lxc_gpu_passthrough_gpu_model": PRO,
            "lxc_gpu_passthrough_gpu_count": count,
            "lxc_gpu_passthrough_shm_size": "2g",
            "lxc_gpu_passthrough_memlock": str(memlock),
        }
        out = _run_role(node, tmp_path, **role_vars)
        given = _task(out, "Ensure the container's GPU lines")
        assert len(given["gpus"]) == count
        assert not set(given["gpus"]) & held
        minors = [d["minor"] for d in given["devices"] if d["kind"] == "card"]
        text = conf.read_text()
        for addr in held:  # the VM's card is on vfio-pci: no node, no line
            assert addr not in text
        assert "lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir,mode=1777," \
               "size=2g 0 0\n" in text  # fmt: skip
        assert f"lxc.prlimit.memlock: {memlock}\n" in text

        cards = [f"/dev/nvidia{m}" for m in minors]
        seen = open_devices_in_ct(node, vmid, *cards, "/dev/nvidiactl", "/dev/nvidia-uvm")
        assert set(seen.values()) == {"ENXIO"}, seen
        other = next(m for m in range(8) if m not in minors)
        _mknod_in_ct(node, vmid, f"/dev/nvidia{other}", 195, other)
        assert open_devices_in_ct(node, vmid, f"/dev/nvidia{other}") == {
            f"/dev/nvidia{other}": "EPERM"
        }
        shm = pct.ct_exec(node, vmid, ["df", "-k", "--output=size", "/dev/shm"], timeout=30)
        assert shm.stdout.decode().split()[-1] == str(2 << 20)  # 2 GiB in KiB
        limit = pct.ct_exec(node, vmid, ["sh", "-c", "ulimit -l"], timeout=30)
        assert limit.stdout.decode().strip() == str(memlock // 1024)
        print(f"\n{count} cards {given['gpus']}: shm {shm.stdout.decode().split()[-1]} KiB, "
              f"memlock {limit.stdout.decode().strip()} KiB, devices {seen}")  # fmt: skip

        again = _run_role(node, tmp_path, **role_vars)
        assert _changed(again) == 0
        assert conf.read_text() == text

        if held:  # four cards on pve-b: only three are free; refused before any change
            more = dict(role_vars, lxc_gpu_passthrough_gpu_count=4)
            failed = _run_role_failing(node, tmp_path, **more)
            assert "4 free NVIDIA RTX PRO 6000" in failed
            assert "3 available" in failed
            assert all(f"{a} is on vfio-pci" in failed for a in held), failed
            assert conf.read_text() == text
    finally:
        stop_lab_containers(cluster)
