"""GPU facts (module_utils/gpu.py) on simulated host trees and recorded inputs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu


def by_addr(facts: gpu.HostGpuFacts) -> dict[str, gpu.GpuCard]:
    return {card.address: card for card in facts.gpus}


# --------------------------------------------------------------- 2x A6000 + 2x 3090


def test_a6000_3090_cards_drivers_and_groups(host_facts) -> None:
    facts = host_facts("a6000-3090")
    cards = by_addr(facts)
    assert list(cards) == ["0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]
    a1, a2, g1, _g2 = cards.values()
    assert (a1.name, a1.pci_id, a1.architecture) == ("NVIDIA RTX A6000", "10de:2230", "ampere")
    assert g1.name == "NVIDIA GeForce RTX 3090"
    assert all(c.driver == "vfio-pci" for c in cards.values())
    # Bound by ids= (no override) vs pinned per address.
    assert a1.driver_override is None
    assert a2.driver_override == "vfio-pci"
    assert a1.class_code == "0x030000"
    assert a1.class_kind == "vga"
    assert [f.address for f in a1.functions] == ["0000:01:00.0", "0000:01:00.1"]
    audio = a1.functions[1]
    assert (audio.pci_id, audio.class_kind, audio.driver) == ("10de:1aef", "audio", "vfio-pci")
    assert a1.iommu_group == 14
    assert a1.iommu_group_members == ["0000:01:00.0", "0000:01:00.1"]
    assert a1.iommu_group_foreign == []
    # The two 3090s share group 30: each sees the other's functions as foreign.
    assert g1.iommu_group_foreign == ["0000:42:00.0", "0000:42:00.1"]
    assert a1.nvidia is None
    assert [d.address for d in facts.other_display] == ["0000:c3:00.0"]


def test_a6000_3090_holders(host_facts) -> None:
    cards = by_addr(host_facts("a6000-3090"))
    a1, a2, g1, g2 = cards.values()
    assert a1.holders == []
    assert a1.free
    # Stopped VM 203 names only the GPU function of the second A6000: held, not running.
    (old,) = a2.holders
    assert (old.vmid, old.running, old.functions) == (203, False, ["0000:02:00.0"])
    assert a2.free
    assert a2.held_by_running_vm is None
    # host=41:00 (no domain, no function) takes every function.
    (h1,) = g1.holders
    assert (h1.vmid, h1.running, h1.via, h1.key) == (201, True, "host", "hostpci0")
    assert h1.functions == ["0000:41:00.0", "0000:41:00.1"]
    assert h1.config.endswith("/etc/pve/qemu-server/201.conf")
    assert not g1.free
    assert g1.held_by_running_vm == 201
    (h2,) = g2.holders
    assert (h2.vmid, h2.functions) == (202, ["0000:42:00.0", "0000:42:00.1"])
    assert g2.held_by_running_vm == 202


def test_a6000_3090_host_wide(host_facts) -> None:
    facts = host_facts("a6000-3090")
    assert facts.node == "pve-t1"
    assert facts.kernel_release == "6.8.12-4-pve"
    assert (facts.pve_version, facts.pve_release) == ("8.3.0", "8.3")
    assert facts.boot.loader == "systemd-boot"
    assert facts.boot.cmdline_file.endswith("/etc/kernel/cmdline")
    assert facts.cgroup.version == 2
    assert facts.iommu_enabled
    assert facts.nouveau_loaded
    assert facts.modules_loaded["vfio_pci"]
    assert not facts.nvidia_module.loaded
    assert facts.nvidia_module.version is None
    # No driver loaded: no nvidia majors, no nodes, whatever the host will get later.
    assert facts.char_majors == {}
    assert facts.uvm_major is None
    assert facts.device_nodes == []
    assert facts.warnings == []


# --------------------------------------------------------------- 4x PRO 6000


def test_pro6000_on_nvidia(host_facts) -> None:
    facts = host_facts("pro6000x4")
    cards = facts.gpus
    assert len(cards) == 4
    assert [c.name for c in cards[:3]] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 3
    assert cards[3].name == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert {c.architecture for c in cards} == {"blackwell"}
    assert [c.nvidia.minor for c in cards if c.nvidia] == [0, 1, 2, 3]
    assert [c.nvidia.device_node for c in cards if c.nvidia] == [
        f"/dev/nvidia{i}" for i in range(4)
    ]
    assert all(c.free and c.driver == "nvidia" for c in cards)
    assert [f.driver for f in cards[0].functions] == ["nvidia", "snd_hda_intel"]
    assert cards[0].functions[1].pci_id == "10de:22e8"
    mod = facts.nvidia_module
    assert (mod.loaded, mod.version, mod.flavour) == (True, "580.126.09", "open")
    assert mod.version_source == "sys/module/nvidia/version"
    assert facts.uvm_major == 511
    assert facts.caps_major == 508
    assert facts.char_majors["nvidia"] == 195
    assert facts.char_majors["nvidiactl"] == 195
    nodes = {n.path: (n.major, n.minor) for n in facts.device_nodes}
    assert nodes["/dev/nvidiactl"] == (195, 255)
    assert nodes["/dev/nvidia-modeset"] == (195, 254)
    assert nodes["/dev/nvidia-uvm"] == (511, 0)
    assert nodes["/dev/nvidia-uvm-tools"] == (511, 1)
    assert nodes["/dev/nvidia-caps/nvidia-cap1"] == (508, 1)
    assert nodes["/dev/nvidia3"] == (195, 3)
    assert facts.boot.loader == "grub"
    assert not facts.nouveau_loaded


# --------------------------------------------------------------- half-migrated


def test_half_migrated(host_facts) -> None:
    facts = host_facts("half-migrated")
    on_nvidia, on_vfio = facts.gpus
    assert (on_nvidia.driver, on_nvidia.driver_override) == ("nvidia", "nvidia")
    assert on_nvidia.nvidia is not None
    assert on_nvidia.nvidia.minor == 0
    assert on_nvidia.nvidia.model == "NVIDIA RTX A6000"
    assert on_nvidia.nvidia.bus_location == "0000:17:00.0"
    assert (on_vfio.driver, on_vfio.nvidia) == ("vfio-pci", None)
    assert on_vfio.functions[1].driver == "vfio-pci"
    assert on_nvidia.functions[1].driver == "snd_hda_intel"
    mod = facts.nvidia_module
    assert (mod.version, mod.flavour) == ("550.144.03", "proprietary")
    assert facts.uvm_major == 509
    assert "nvidia-modeset" not in facts.char_majors
    assert (facts.pve_version, facts.pve_release) == ("7.4-3", "7.4")
    assert (facts.boot.loader, facts.boot.efi, facts.boot.secure_boot) == ("grub", False, None)
    assert (facts.cgroup.version, facts.cgroup.hybrid) == (1, True)


# --------------------------------------------------------------- mappings


def test_vm_holds_cards_through_mappings(host_facts) -> None:
    facts = host_facts("mapping")
    cards = by_addr(facts)
    g1, g2 = cards["0000:01:00.0"], cards["0000:02:00.0"]
    # gpu-pool has two candidate paths on this node: both count as held, not exclusive.
    for card in (g1, g2):
        (h,) = card.holders
        assert (h.vmid, h.via, h.mapping, h.exclusive, h.running) == (
            301,
            "mapping",
            "gpu-pool",
            False,
            True,
        )
        assert not card.free
    a6000 = cards["0000:03:00.0"]
    (h,) = a6000.holders
    assert (h.vmid, h.mapping, h.exclusive, h.functions) == (
        302,
        "a6000-one",
        True,
        ["0000:03:00.0"],
    )
    assert a6000.held_by_running_vm == 302
    odd = cards["0000:04:00.0"]
    assert odd.name == "NVIDIA GPU 10de:1234"
    assert odd.architecture == "unknown"
    assert odd.class_kind == "3d"
    (h,) = odd.holders
    assert (h.vmid, h.running) == (303, False)
    assert odd.free
    text = "\n".join(facts.warnings)
    assert "mapping 'not-defined' is not in" in text
    assert "mapping 'moved' expects 10de:2204 at 0000:04:00, found 10de:1234" in text
    assert facts.boot.secure_boot is True
    # proxmox-boot-tool with Secure Boot boots GRUB.
    assert facts.boot.loader == "grub"


def test_mapping_for_other_node_is_not_a_claim(host_tree) -> None:
    root = host_tree("mapping")
    facts = gpu.gather_facts(gpu.HostRoots.under(root), node="pve-other")
    assert by_addr(facts)["0000:01:00.0"].holders == []
    assert any("has no entry for node 'pve-other'" in w for w in facts.warnings)
    assert any("0000:81:00 is not a PCI device on this host" in w for w in facts.warnings)


# --------------------------------------------------------------- running check


def test_stale_pidfile_is_not_running(host_tree) -> None:
    root = host_tree("a6000-3090")
    shutil.rmtree(root / "proc" / "5201")  # VM 201's QEMU is gone, its pidfile stays
    facts = gpu.gather_facts(gpu.HostRoots.under(root))
    g1 = by_addr(facts)["0000:41:00.0"]
    assert g1.holders[0].running is False
    # 41:00 shares IOMMU group 30 with 42:00, whose VM 202 still has the group open.
    assert [(o.vmid, o.path) for o in g1.open_by] == [(202, "/dev/vfio/30")]
    assert g1.held_by_running_vm == 202
    assert not g1.free


def test_pid_of_another_process_is_not_running(host_tree) -> None:
    root = host_tree("a6000-3090")
    shutil.rmtree(root / "proc" / "5201" / "fd")
    (root / "proc" / "5201" / "cmdline").write_bytes(b"/usr/sbin/sshd\0-D\0")
    g1 = by_addr(gpu.gather_facts(gpu.HostRoots.under(root)))["0000:41:00.0"]
    assert g1.holders[0].running is False
    assert [o.pid for o in g1.open_by] == [5202]  # only VM 202 holds group 30 now


def test_running_check_is_pluggable(host_tree) -> None:
    asked: list[int] = []

    def only_203(vmid: int) -> bool:
        asked.append(vmid)
        return vmid == 203

    root = host_tree("a6000-3090")
    facts = gpu.gather_facts(gpu.HostRoots.under(root), vm_running=only_203)
    cards = by_addr(facts)
    assert cards["0000:41:00.0"].holders[0].running is False
    assert cards["0000:02:00.0"].held_by_running_vm == 203
    assert sorted(asked) == [201, 202, 203]  # each VM asked once
    # The check decides for config holders only: an open vfio group is the kernel's word.
    assert [o.vmid for o in cards["0000:41:00.0"].open_by] == [201, 202]


# --------------------------------------------------------------- hostpci values
# Read as PVE reads them: qemu-server parse_vm_config and PCI.pm's hostpci format through
# pve-common parse_property_string (see ../shared/pve-fixtures/README.md; the fixture
# comparison is tests/unit/test_pve_fixtures.py).


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("host=41-00", "not a PCI address"),
        ("host=zz,pcie=1", "not a PCI address"),
        ("41:00;zz", "not a PCI address"),
        ("mapping=9gpu", "not a valid PVE config id"),
    ],
)
def test_unreadable_hostpci_names_file_and_line(tmp_path: Path, value: str, problem: str) -> None:
    """A line naming a device that cannot be read fails the run: specops cannot tell
    which card the VM was meant to hold (PVE drops the line with a warning)."""
    qemu = tmp_path / "etc" / "pve" / "qemu-server"
    qemu.mkdir(parents=True)
    conf = qemu / "301.conf"
    conf.write_text(f"boot: order=scsi0\nhostpci0: host=01:00\nhostpci1: {value}\nmemory: 4096\n")
    with pytest.raises(gpu.GpuFactsError) as err:
        gpu.gather_facts(gpu.HostRoots.under(tmp_path))
    message = str(err.value)
    assert message.startswith(f"{conf}:3: hostpci1: ")
    assert problem in message
    assert "valid: 'host=[domain:]bus:dev[.func]" in message
    assert "fix the line" in message


@pytest.mark.parametrize(
    ("value", "hosts", "mapping", "options"),
    [
        ("01:00", ["0000:01:00"], None, {}),
        # Empty items are skipped; the default key may stand anywhere without its name.
        ("01:00.0,", ["0000:01:00.0"], None, {}),
        ("pcie=1,01:00.0", ["0000:01:00.0"], None, {"pcie": "1"}),
        ("01:00.0,,pcie=1", ["0000:01:00.0"], None, {"pcie": "1"}),
        ("host=41:00,,pcie=1", ["0000:41:00"], None, {"pcie": "1"}),
        (" ,01:00.0, ", ["0000:01:00.0"], None, {}),
        ("host=0000:01:00.0;0000:01:00.1,pcie=1", ["0000:01:00.0", "0000:01:00.1"], None,
         {"pcie": "1"}),
        ("0001:c1:00.3,rombar=0", ["0001:c1:00.3"], None, {"rombar": "0"}),
        ("1234:f0:43", ["1234:f0:43"], None, {}),
        # One hex digit for the function, as PVE's $PCIRE: .9 is valid and names nothing.
        ("0000:41:00.9", ["0000:41:00.9"], None, {}),
        ("00:ff.1,driver=keep,x-vga=on,rombar=False,vendor-id=0x10DE,sub-device-id=0x0000",
         ["0000:00:ff.1"], None,
         {"driver": "keep", "x-vga": "on", "rombar": "False", "vendor-id": "0x10DE",
          "sub-device-id": "0x0000"}),
        ("mapping=gpu-a_1,pcie=1,x-vga=1", [], "gpu-a_1", {"pcie": "1", "x-vga": "1"}),
        ("mapping=someGpu,mdev=some-model", [], "someGpu", {"mdev": "some-model"}),
    ],
)  # fmt: skip
def test_hostpci_values_pve_accepts(
    value: str, hosts: list[str], mapping: str | None, options: dict[str, str]
) -> None:
    parsed_hosts, parsed_mapping, parsed_options = gpu.parse_hostpci_value(value)
    assert [str(h) for h in parsed_hosts] == hosts
    assert parsed_mapping == mapping
    assert parsed_options == options
    warnings: list[str] = []
    (entry,) = gpu.parse_vm_config(f"hostpci3: {value}\n", 100, "100.conf", warnings)
    assert (entry.key, entry.line, entry.doubt, warnings) == ("hostpci3", 1, None, [])


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0A:00.0", "is not [domain:]bus:dev[.func]"),  # PCI ids are lower-case to PVE
        ("host=0000:41:00.0;", "is not [domain:]bus:dev[.func]"),
        ("01:00,foo=bar", "invalid key 'foo'"),
        ("01:00, pcie=1", "invalid key ' pcie'"),
        ("01:00,pcie=2", "pcie='2' is not a boolean"),
        ("01:00,driver=nvidia", "driver='nvidia' is not vfio or keep"),
        ("01:00,vendor-id=10de", "vendor-id='10de' is not a hex id"),
        ("01:00,mdev=a.b", "mdev='a.b' is not a mediated device type"),
        ("41:00,42:00", "property without '='"),
        ("host=41:00,host=42:00", "duplicate key"),
        ("01:00,=1", "missing key or value"),
        ("01:00,pcie=", "missing key or value"),
        ("pcie=1", "needs host="),
        ("host=0000:41:00,mapping=gpu", "mutually exclusive"),
        ("", "empty value"),
    ],
)
def test_hostpci_values_pve_refuses(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=r"\S") as err:
        gpu.parse_hostpci_value(value)
    assert problem in str(err.value)


def test_lines_pve_does_not_use_count_in_doubt(host_tree) -> None:
    """Stricter than PVE on purpose: what a line PVE drops names still counts as held
    (here by a running VM, so the card is not free), with a warning naming the line."""
    root = host_tree("a6000-3090")
    conf = root / "etc/pve/qemu-server/204.conf"
    conf.write_text(
        "boot: order=scsi0\n"
        "hostpci0: 0000:01:00.0,foo=bar\n"  # unknown option: PVE drops the value
        "HOSTPCI1: 0000:02:00.0\n"  # a line PVE cannot parse at all
        "hostpci2: pcie=1\n"  # names no device: the VM cannot start, nothing counted
        "memory: 4096\n"
    )
    facts = gpu.gather_facts(gpu.HostRoots.under(root), vm_running=lambda vmid: vmid == 204)
    cards = by_addr(facts)
    for address, key in (("0000:01:00.0", "hostpci0"), ("0000:02:00.0", "HOSTPCI1")):
        holder = next(h for h in cards[address].holders if h.vmid == 204)
        assert (holder.key, holder.running) == (key, True)
        assert cards[address].held_by_running_vm == 204
        assert not cards[address].free
    text = "\n".join(facts.warnings)
    assert f"{conf}:2: hostpci0: PVE does not use this line (invalid key 'foo'" in text
    assert "specops counts 0000:01:00.0 as held by VM 204 until the line is fixed" in text
    assert f"{conf}:3: HOSTPCI1: PVE does not use this line (PVE cannot parse the line)" in text
    assert f"{conf}:4: hostpci2: PVE does not use this line (needs host=" in text
    assert "it names no device" in text


def test_keys_and_duplicates_as_pve_applies_them() -> None:
    warnings: list[str] = []
    text = (
        "hostpci0: 01:00\n"
        "hostpci0: 02:00\n"  # a later readable line replaces the earlier one
        "hostpci1: 03:00\n"
        "hostpci1: 0B:00\n"  # a later unreadable one does not (and counts in doubt)
        "hostpci15: 04:00\n"
        "hostpci16: 05:00\n"  # PVE knows hostpci0..hostpci15: in doubt
        "args: -device vfio-pci,host=0000:06:00.0\n"
        "args: -device vfio-pci,host=0000:07:00.0\n"  # the last args: line is QEMU's
    )
    entries = gpu.parse_vm_config(text, 100, "100.conf", warnings)
    assert [(e.key, e.line, [str(h) for h in e.hosts], e.doubt is None) for e in entries] == [
        ("hostpci0", 2, ["0000:02:00"], True),
        ("hostpci1", 3, ["0000:03:00"], True),
        ("hostpci1", 4, ["0000:0b:00"], False),
        ("hostpci15", 5, ["0000:04:00"], True),
        ("hostpci16", 6, ["0000:05:00"], False),
        ("args", 8, ["0000:07:00.0"], True),
    ]
    assert "100.conf:1: hostpci0: replaced by line 2" in "\n".join(warnings)


def test_a_templates_entries_count_in_doubt() -> None:
    entries = gpu.parse_vm_config("hostpci0: 01:00\ntemplate: 1\n", 100, "100.conf")
    assert [(e.key, e.doubt) for e in entries] == [("hostpci0", "a template: PVE never starts it")]


@pytest.mark.parametrize(
    ("between", "ends"),
    [
        ("  [x]\n", False),  # indented: not a section header to PVE
        ("[x\n", False),  # not closed
        ("[x] y\n", False),
        ("\t[PENDING]\n", False),
        ("[PENDING]\n", True),
        ("[pending]\n", True),
        ("[snap1]\n", True),
        ("[a]\n", True),  # one letter: an unknown section to a VM config (skipped)
        ("[special:cloudinit]\n", True),
        ("[special:unknown]\n", True),
        ("[:3]\n", True),
        ("[snap1]   \n", True),
    ],
)
def test_only_a_whole_line_header_ends_the_current_config(between: str, ends: bool) -> None:
    text = f"hostpci0: host=01:00\nname: a\n{between}hostpci1: host=02:00\n"
    entries = gpu.parse_vm_config(text, 100, "/etc/pve/qemu-server/100.conf")
    assert [e.key for e in entries] == (["hostpci0"] if ends else ["hostpci0", "hostpci1"])


def test_snapshot_and_pending_sections_are_not_the_current_config() -> None:
    text = (
        "hostpci0: host=01:00\nname: a\n\n[PENDING]\nhostpci1: host=02:00\n"
        "[snap1]\nhostpci2: not-even-valid\n"
    )
    entries = gpu.parse_vm_config(text, 100, "/etc/pve/qemu-server/100.conf")
    assert [(e.key, e.line) for e in entries] == [("hostpci0", 1)]


def test_pci_cfg_errors_name_file_and_line() -> None:
    with pytest.raises(gpu.GpuFactsError, match=r"^pci\.cfg:3: map: needs node= and path="):
        gpu.parse_pci_mapping_cfg("gpu\n\tdescription x\n\tmap id=10de:2204\n", "pci.cfg")
    with pytest.raises(gpu.GpuFactsError, match=r"^pci\.cfg:2: map: path: not a PCI address"):
        gpu.parse_pci_mapping_cfg("gpu\n\tmap node=a,path=zz\n", "pci.cfg")
    parsed = gpu.parse_pci_mapping_cfg(
        "a\n\tmap id=10de:2204,node=n1,path=0000:01:00\n\tmap node=n2,path=0000:02:00.0\n\n"
        "b\n\tmap node=n1,path=0000:03:00;0000:04:00,iommugroup=7\n",
        "pci.cfg",
    )
    assert [m.node for m in parsed["a"]] == ["n1", "n2"]
    assert [str(p) for p in parsed["b"][0].paths] == ["0000:03:00", "0000:04:00"]
    assert parsed["b"][0].iommugroup == 7


# --------------------------------------------------------------- small parsers


def test_proc_devices_reads_only_char_section() -> None:
    text = "Character devices:\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n259 nvidia-fake\n"
    assert gpu.parse_proc_devices(text) == {"nvidia": 195, "nvidia-uvm": 508}


def test_nvidia_version_text_flavours() -> None:
    open_text = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build"
        "  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n"
    )
    assert gpu.parse_nvidia_version_text(open_text) == ("580.159.04", "open")
    prop = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.09  Wed Jan  7 22:54:28 UTC 2026\n"
    )
    assert gpu.parse_nvidia_version_text(prop) == ("580.126.09", "proprietary")
    assert gpu.parse_nvidia_version_text("garbage\n") == (None, None)


def test_pvecfg_and_dpkg_fallback(tmp_path: Path) -> None:
    old = "sub version {\n\treturn '5.2';\n}\nsub release {\n\treturn '8';\n}\n"
    assert gpu.parse_pvecfg(old) == {"version": "5.2", "release": "8"}
    status = tmp_path / "var" / "lib" / "dpkg" / "status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: pve-manager\nStatus: deinstall ok config-files\nVersion: 7.0-1\n\n"
        "Package: pve-manager\nStatus: install ok installed\nVersion: 8.2.4\n"
        "Description: x\n multi-line\n"
    )
    facts = gpu.gather_facts(gpu.HostRoots.under(tmp_path))
    assert (facts.pve_version, facts.pve_release) == ("8.2.4", "8.2")


def test_name_table_and_fallback() -> None:
    assert gpu.gpu_name("10de:2bb5").name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpu.gpu_name("10DE:2230").name == "NVIDIA RTX A6000"
    assert gpu.gpu_name("10de:abcd") == gpu.KnownGpu("NVIDIA GPU 10de:abcd", "unknown", False)


def test_empty_root_gives_empty_facts(tmp_path: Path) -> None:
    facts = gpu.gather_facts(gpu.HostRoots.under(tmp_path))
    assert facts.gpus == []
    assert facts.node is None
    assert not facts.nvidia_module.loaded
    assert any("no PCI devices read" in w for w in facts.warnings)


def test_roots_can_be_overridden_one_by_one(host_tree) -> None:
    root = host_tree("pro6000x4")
    moved = root.parent / "moved-proc"
    os.rename(root / "proc", moved)
    facts = gpu.gather_facts(gpu.HostRoots(root=str(root), proc=str(moved)))
    assert facts.uvm_major == 511
    assert gpu.gather_facts(gpu.HostRoots.under(root)).uvm_major is None


def test_facts_summary_lines(host_facts) -> None:
    cards = host_facts("a6000-3090").to_dict()["gpus"]
    assert gpu.facts_summary(cards) == [
        "0000:01:00.0 NVIDIA RTX A6000 vfio-pci free",
        "0000:02:00.0 NVIDIA RTX A6000 vfio-pci free",
        "0000:41:00.0 NVIDIA GeForce RTX 3090 vfio-pci held by running VM 201",
        "0000:42:00.0 NVIDIA GeForce RTX 3090 vfio-pci held by running VM 202",
    ]
