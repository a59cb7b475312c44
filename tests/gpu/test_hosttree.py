"""The simulated host tree generator (specops_lab.hosttree) and the lab descriptions."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu

from specops import cli
from specops.errors import ValidationError
from specops_lab import hosttree

REPO = Path(__file__).resolve().parent.parent.parent
LAB = REPO / "tests" / "fixtures" / "hosts" / "lab-converged"
HOSTS = REPO / "tests" / "fixtures" / "hosts"


def test_kernel_layout(host_tree) -> None:
    root = host_tree("a6000-3090")
    sys = root / "sys"
    link = sys / "bus/pci/devices/0000:01:00.0"
    assert os.readlink(link) == "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    dev = link.resolve()
    assert dev == (sys / "devices/pci0000:00/0000:00:01.0/0000:01:00.0").resolve()
    assert os.readlink(dev / "driver") == "../../../../bus/pci/drivers/vfio-pci"
    assert os.readlink(dev / "iommu_group") == "../../../../kernel/iommu_groups/14"
    member = sys / "kernel/iommu_groups/14/devices/0000:01:00.1"
    assert member.resolve() == (dev.parent / "0000:01:00.1").resolve()
    assert (dev / "driver_override").read_text() == "(null)\n"
    assert (dev / "class").read_text() == "0x030000\n"
    assert (dev / "vendor").read_text() == "0x10de\n"
    drv = sys / "bus/pci/drivers/vfio-pci"
    assert {"bind", "unbind", "new_id", "remove_id"} <= {p.name for p in drv.iterdir()}
    assert (drv / "0000:01:00.0").resolve() == dev.resolve()
    assert os.readlink(drv / "module") == "../../../../module/vfio_pci"
    assert (sys / "module/nouveau").is_dir()
    assert (root / "run/qemu-server/201.pid").read_text() == "5201\n"
    assert not (root / "run/qemu-server/203.pid").exists()
    assert (root / "proc/5201/cmdline").read_bytes().split(b"\0")[:3] == [
        b"/usr/bin/kvm",
        b"-id",
        b"201",
    ]
    assert os.readlink(root / "etc/pve/qemu-server") == "nodes/pve-t1/qemu-server"
    assert "hostpci0: 41:00,pcie=1,x-vga=1\n" in (root / "etc/pve/qemu-server/201.conf").read_text()


def test_device_nodes_are_real_char_devices(host_tree) -> None:
    root = host_tree("pro6000x4")
    st = os.lstat(root / "dev/nvidia-uvm")
    assert stat.S_ISCHR(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (511, 0)
    assert stat.S_IMODE(os.lstat(root / "dev/nvidia-caps/nvidia-cap1").st_mode) == 0o400
    proc_devices = (root / "proc/devices").read_text()
    assert "195 nvidia\n195 nvidiactl\n" in proc_devices
    assert "511 nvidia-uvm\n" in proc_devices
    info = (root / "proc/driver/nvidia/gpus/0000:21:00.0/information").read_text()
    assert "Device Minor: \t 1\n" in info


def test_lab_host_a(tmp_path: Path) -> None:
    spec = hosttree.load_spec(LAB / "pve-a.yml")
    facts = gpu.gather_facts(gpu.HostRoots.under(hosttree.build_tree(spec, tmp_path / "a")))
    assert facts.node == "pve-a"
    free = [c for c in facts.gpus if c.free]
    held = [c for c in facts.gpus if not c.free]
    assert [c.name for c in free] == ["NVIDIA RTX A6000"] * 2
    assert all(c.driver == "vfio-pci" for c in free)
    assert [c.name for c in held] == ["NVIDIA GeForce RTX 3090"] * 2
    assert [(c.held_by_running_vm, c.holders[0].via) for c in held] == [
        (201, "host"),
        (202, "mapping"),
    ]
    assert facts.nouveau_loaded
    assert not facts.nvidia_module.loaded
    assert facts.warnings == []
    assert (
        "options vfio-pci ids=10de:2230,10de:1aef"
        in (tmp_path / "a/etc/modprobe.d/vfio.conf").read_text()
    )
    # Once the driver is in, host A's uvm major is 508.
    loaded = hosttree.with_nvidia_loaded(spec)
    facts = gpu.gather_facts(gpu.HostRoots.under(hosttree.build_tree(loaded, tmp_path / "a2")))
    assert facts.uvm_major == 508
    assert facts.nvidia_module.version == "580.126.09"
    # ... and once vfio_release gave it the second A6000, that card is nvidia's minor 0.
    released = hosttree.with_cards_released(loaded, ["0000:02:00.0"])
    facts = gpu.gather_facts(gpu.HostRoots.under(hosttree.build_tree(released, tmp_path / "a3")))
    by_address = {c.address: c for c in facts.gpus}
    assert by_address["0000:02:00.0"].driver == "nvidia"
    assert by_address["0000:02:00.0"].nvidia.minor == 0
    assert by_address["0000:01:00.0"].driver == "vfio-pci"
    with pytest.raises(ValidationError, match=r"no such cards on pve-a: 0000:99:00\.0"):
        hosttree.with_cards_released(loaded, ["0000:99:00.0"])


def test_lab_host_b(tmp_path: Path) -> None:
    spec = hosttree.load_spec(LAB / "pve-b.yml")
    facts = gpu.gather_facts(gpu.HostRoots.under(hosttree.build_tree(spec, tmp_path / "b")))
    assert [c.name for c in facts.gpus] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 4
    assert all(c.free and c.driver == "nvidia" for c in facts.gpus)
    assert facts.uvm_major == 511
    assert facts.nvidia_module.flavour == "open"


def test_rebuild_is_stable_and_replaces_sys(host_tree, tmp_path: Path) -> None:
    root = host_tree("a6000-3090")
    (root / "sys" / "stray").write_text("left by a test")
    first = gpu.gather_facts(gpu.HostRoots.under(root))
    hosttree.build_tree(hosttree.load_spec(HOSTS / "a6000-3090.yml"), root)
    assert not (root / "sys" / "stray").exists()
    assert gpu.gather_facts(gpu.HostRoots.under(root)) == first
    assert not [p for p in root.iterdir() if p.name.startswith(".hosttree")]


def test_merges_into_an_existing_etc_pve(tmp_path: Path) -> None:
    root = tmp_path / "node"
    etc_pve = root / "etc/pve"
    (etc_pve / "nodes/pve-t4/lxc").mkdir(parents=True)
    (etc_pve / "nodes/pve-t4/qemu-server").mkdir(parents=True)
    (etc_pve / "lxc").symlink_to("nodes/pve-t4/lxc")
    (etc_pve / "qemu-server").symlink_to("nodes/pve-t4/qemu-server")
    (etc_pve / "lxc/100.conf").write_text("arch: amd64\n")
    (etc_pve / "qemu-server/999.conf").write_text("name: someone-elses\n")
    (etc_pve / "mapping").mkdir()
    (etc_pve / "mapping/pci.cfg").write_text("theirs\n\tmap node=pve-x,path=0000:09:00\n")
    (root / "dev").mkdir()
    os.mknod(root / "dev/fuse", stat.S_IFCHR | 0o666, os.makedev(10, 229))
    hosttree.build_tree(hosttree.load_spec(HOSTS / "mapping.yml"), root)
    assert (etc_pve / "lxc/100.conf").read_text() == "arch: amd64\n"
    assert (etc_pve / "qemu-server/999.conf").read_text() == "name: someone-elses\n"
    assert (etc_pve / "nodes/pve-t4/qemu-server/301.conf").exists()
    assert stat.S_ISCHR(os.lstat(root / "dev/fuse").st_mode)
    assert (root / "run/qemu-server/301.running").exists()
    assert not (root / "run/qemu-server/303.running").exists()
    cfg = (etc_pve / "mapping/pci.cfg").read_text()
    assert cfg.startswith("theirs\n\tmap node=pve-x,path=0000:09:00\n")
    sections = gpu.parse_pci_mapping_cfg(cfg, "pci.cfg")
    assert sorted(sections) == ["a6000-one", "gpu-pool", "moved", "theirs"]
    # Building again changes nothing and refuses nothing.
    hosttree.build_tree(hosttree.load_spec(HOSTS / "mapping.yml"), root)
    assert (etc_pve / "mapping/pci.cfg").read_text() == cfg


def test_refuses_to_clobber_before_changing_anything(tmp_path: Path) -> None:
    root = tmp_path / "node"
    qemu = root / "etc/pve/qemu-server"
    qemu.mkdir(parents=True)
    (qemu / "302.conf").write_text("name: not-ours\n")
    spec = hosttree.load_spec(HOSTS / "mapping.yml")
    with pytest.raises(ValidationError, match=r"^vms\[vmid=302\]: .*302\.conf exists with other"):
        hosttree.build_tree(spec, root)
    assert sorted(p.name for p in root.iterdir()) == ["etc"]
    assert sorted(p.name for p in qemu.iterdir()) == ["302.conf"]
    hosttree.build_tree(spec, root, replace_existing=True)
    assert "mapping=a6000-one" in (qemu / "302.conf").read_text()


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"cards": [{"address": "01:00.0", "model": "rtx-a6000"}]}, "cards[0].address"),
        ({"cards": [{"address": "0000:01:00.0", "model": "rtx-9090"}]}, "cards[0].model"),
        ({"cards": [{"address": "0000:01:00.0"}]}, "cards[0]"),
        ({"nvidia": {"version": "1", "majors": {"nvidia-caps": 300}}}, "nvidia.majors.nvidia-uvm"),
        ({"nvidia": {"version": "1", "majors": {"nvidia-uvm": 195}}}, "nvidia.majors.nvidia-uvm"),
        ({"nvidia": {"version": "1", "flavour": "closed", "majors": {}}}, "nvidia.flavour"),
        ({"boot": {"loader": "lilo"}}, "boot.loader"),
        ({"vms": [{"vmid": 5}]}, "vms[0].vmid"),
        ({"etc_files": {"../x": "y"}}, "etc_files.../x"),
        ({"etc_files": {"pve/user.cfg": "y"}}, "etc_files.pve/user.cfg"),
    ],
)
def test_bad_descriptions_name_the_field(patch: dict, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        hosttree.parse_spec({"node": "n", **patch})
    assert err.value.field == field


def test_cli_builds_a_lab_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "pve-b"
    assert (
        cli.main(
            ["lab", "hosttree", "build", "--spec", str(LAB / "pve-b.yml"), "--root", str(root)]
        )
        == 0
    )
    assert "built host tree for pve-b" in capsys.readouterr().out
    assert (root / "sys/module/nvidia/version").read_text() == "580.126.09\n"
    bad = tmp_path / "bad.yml"
    bad.write_text("node: x\ncgroup: 3\n")
    assert cli.main(["lab", "hosttree", "build", "--spec", str(bad), "--root", str(root)]) == 2
    assert (
        "specops lab hosttree build: error: cgroup: must be 1 or 2 (got 3)"
        in capsys.readouterr().err
    )


def test_registers_under_the_lab_group() -> None:
    parser = argparse.ArgumentParser()
    lab = parser.add_subparsers(dest="command").add_parser("lab").add_subparsers(dest="area")
    lab.add_parser("pve")
    hosttree.register(lab)
    assert sorted(lab.choices) == ["hosttree", "pve"]
    args = parser.parse_args(["lab", "hosttree", "build", "--spec", "x.yml"])
    assert (args.func, args.root, args.replace) == (hosttree._cmd_build, None, False)


def test_the_lab_starts_its_nodes_in_the_hard_real_state(tmp_path: Path) -> None:
    """inventory/lab/hardware: nouveau loaded, no driver, every card on vfio-pci by ids=,
    VM-held cards (issue 16); deploy.yml's host roles converge them."""
    lab = REPO / "inventory" / "lab" / "hardware"
    for name, held in (
        ("pve-a", {"0000:41:00.0": 201, "0000:42:00.0": 202}),
        ("pve-b", {"0000:61:00.0": 301}),
    ):
        spec = hosttree.load_spec(lab / f"{name}.yml")
        facts = gpu.gather_facts(gpu.HostRoots.under(hosttree.build_tree(spec, tmp_path / name)))
        assert facts.nouveau_loaded, name
        assert not facts.nvidia_module.loaded, name
        assert {c.driver for c in facts.gpus} == {"vfio-pci"}, name
        assert all(c.driver_override is None for c in facts.gpus), f"{name}: grabbed by ids="
        assert {c.address: c.held_by_running_vm for c in facts.gpus if c.held_by_running_vm} == held
        assert "ids=" in (tmp_path / name / "etc/modprobe.d/vfio.conf").read_text()
    stopped = hosttree.load_spec(lab / "pve-a.yml").vms[2]
    assert (stopped.vmid, stopped.running, stopped.hostpci) == (
        203,
        False,
        ("host=0000:03:00,pcie=1",),
    )
