"""The `pct`/`qm` wrappers and `specops lab` commands, as a role or a person runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu, vfio

from specops_lab import hosttree
from specops_lab.pve import pct
from specops_lab.pve.layout import Cluster, Node
from specops_lab.pve.pct import PveError
from specops_lab.pve.testing import TEMPLATE_NAME, make_test_cluster

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"


def _run(tool: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "scripts" / "lab" / tool), "--node-root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cluster_init_cli(tmp_path: Path) -> None:
    template = tmp_path / "tiny-rootfs.tar"
    template.write_bytes(b"\0" * 10240)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specops.cli",
            "lab",
            "cluster",
            "init",
            "--cluster",
            str(tmp_path / "c"),
            "--node",
            f"pvetest-c={tmp_path / 'c-root'}",
            "--cgroup",
            "v1",
            "--template",
            str(template),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert proc.returncode == 0, proc.stderr
    cluster = Cluster.load(tmp_path / "c")
    assert cluster.node("pvetest-c").cgroup == "v1"
    assert (tmp_path / "c-root" / "etc/pve/storage.cfg").read_text().startswith("dir: local\n")
    placed = tmp_path / "c-root" / "var/lib/vz/template/cache" / template.name
    assert placed.read_bytes() == template.read_bytes()
    assert "template local:vztmpl/tiny-rootfs.tar" in proc.stdout


def test_qm_flag_and_config(tmp_path: Path) -> None:
    node = make_test_cluster(tmp_path, None).node("pvetest-a")
    node.vm_conf(200).write_text("hostpci0: host=0000:41:00.0\nmemory: 4096\nname: gpu-vm\n")
    assert _run("qm", node.root, "status", "200").stdout == "status: stopped\n"
    assert _run("qm", node.root, "start", "200").returncode == 0
    assert _run("qm", node.root, "status", "200").stdout == "status: running\n"
    assert "hostpci0: host=0000:41:00.0\n" in _run("qm", node.root, "config", "200").stdout
    missing = _run("qm", node.root, "status", "201")
    assert missing.returncode == 2
    assert "Configuration file 'nodes/pvetest-a/qemu-server/201.conf' does not exist" in (
        missing.stderr
    )


def test_qm_start_waits_for_the_vm_lock_and_shows_as_running(tmp_path: Path) -> None:
    """The stand-in's qm start takes PVE's VM lock (what vfio_release holds while it
    unbinds a stopped VM's card) and leaves what a node shows for a running VM."""
    root = tmp_path / "node"
    hosttree.build_tree(
        hosttree.load_spec(REPO / "tests/fixtures/hosts/in-use.yml"), root, device_nodes=False
    )
    node = Node(name="pve-t5", root=root, cgroup="v2", lxcpath=tmp_path / "lxc")
    with vfio.vm_config_locks(root, [403], timeout=1):
        with pytest.raises(PveError, match=r"can't lock file '.*/lock-403.conf' - got timeout"):
            pct.vm_set_running(node, 403, True, lock_timeout=0.2)
        assert not pct.vm_running(node, 403)
    pct.vm_set_running(node, 403, True)
    assert pct.vm_running(node, 403)
    card = next(
        c for c in gpu.gather_facts(gpu.HostRoots.under(root)).gpus if c.address == "0000:61:00.0"
    )
    assert card.held_by_running_vm == 403
    assert [(o.vmid, o.path) for o in card.open_by] == [(403, "/dev/vfio/61")]
    pct.vm_set_running(node, 403, False)
    card = next(
        c for c in gpu.gather_facts(gpu.HostRoots.under(root)).gpus if c.address == "0000:61:00.0"
    )
    assert (card.held_by_running_vm, card.open_by, card.free) == (None, [], True)


@pytest.mark.lxc
def test_pct_wrapper_lifecycle(lab_cluster: Cluster, tmp_path: Path) -> None:
    node = lab_cluster.node("pvetest-a")
    created = _run(
        "pct", node.root, "create", "110", f"local:vztmpl/{TEMPLATE_NAME}", "--hostname", "wrap"
    )
    assert created.returncode == 0, created.stderr
    # pct set takes what the API takes: raw lxc keys are refused, devN accepted.
    refused = _run("pct", node.root, "set", "110", "--lxc.cgroup2.devices.allow", "c 1:1 rwm")
    assert refused.returncode == 255
    assert "property is not defined in schema" in refused.stderr
    assert _run("pct", node.root, "set", "110", "--cores", "2", "--delete", "swap").returncode == 0
    config = _run("pct", node.root, "config", "110").stdout
    assert "cores: 2\n" in config
    assert "swap:" not in config
    assert _run("pct", node.root, "start", "110").returncode == 0
    assert _run("pct", node.root, "status", "110").stdout == "status: running\n"
    listing = _run("pct", node.root, "list").stdout.splitlines()
    assert listing[0].split() == ["VMID", "Status", "Lock", "Name"]
    assert listing[1].split() == ["110", "running", "wrap"]
    src = tmp_path / "hello.txt"
    src.write_text("hello from the host\n")
    pushed = _run("pct", node.root, "push", "110", str(src), "/root/hello.txt", "--perms", "0600")
    assert pushed.returncode == 0, pushed.stderr
    shown = _run("pct", node.root, "exec", "110", "--", "stat", "-c", "%a %n", "/root/hello.txt")
    assert shown.stdout == "600 /root/hello.txt\n"
    failed = _run("pct", node.root, "exec", "110", "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7
    again = _run("pct", node.root, "start", "110")
    assert again.returncode == 2
    assert "CT 110 already running" in again.stderr
    assert _run("pct", node.root, "shutdown", "110", "--timeout", "30").returncode == 0
    assert _run("pct", node.root, "destroy", "110").returncode == 0
    assert not node.ct_conf(110).exists()
    assert not node.volume_path("local:110/subvol-110-disk-0.subvol").exists()
