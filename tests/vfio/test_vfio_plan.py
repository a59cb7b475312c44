"""Decision logic of vfio_release on the recorded host descriptions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils import vfio
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    HostGpuFacts,
    HostRoots,
    gather_facts,
)
from ansible_collections.specops.infra.plugins.module_utils.vfio import (
    ReleaseRequest,
    VfioReleaseError,
    parse_request,
    plan_release,
)

HostTree = Callable[..., Path]


def facts_of(root: Path) -> HostGpuFacts:
    return gather_facts(HostRoots.under(root))


def plan(root: Path, **request: object) -> vfio.ReleasePlan:
    req = parse_request(
        addresses=request.get("addresses"),  # type: ignore[arg-type]
        model=request.get("model"),  # type: ignore[arg-type]
        count=request.get("count"),  # type: ignore[arg-type]
        allow_stopped_vm_cards=bool(request.get("allow_stopped_vm_cards", False)),
    )
    return plan_release(facts_of(root), req, vfio.available_pci_drivers(root / "sys"))


def test_free_card_by_address_moves_gpu_and_audio_and_keeps_the_rest(
    host_tree: HostTree,
) -> None:
    root = host_tree("a6000-3090", nvidia=True, drivers=("snd_hda_intel",))
    p = plan(root, addresses=["01:00"])
    assert [c.address for c in p.release] == ["0000:01:00.0"]
    steps = {s.address: s for s in p.release[0].steps}
    assert steps["0000:01:00.0"].new_override == "nvidia"
    assert steps["0000:01:00.0"].expect_driver == "nvidia"
    assert steps["0000:01:00.0"].current_driver == "vfio-pci"
    assert steps["0000:01:00.1"].new_override == "snd_hda_intel"
    assert steps["0000:01:00.1"].kind == "audio"
    # The cards VMs keep are pinned by address, every function of them.
    assert p.keep_on_vfio == (
        "0000:02:00.0",
        "0000:02:00.1",
        "0000:41:00.0",
        "0000:41:00.1",
        "0000:42:00.0",
        "0000:42:00.1",
    )
    assert p.released_ids == ("10de:1aef", "10de:2230")


def test_audio_without_host_driver_gets_no_override(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    p = plan(root, addresses=["0000:01:00.0"])
    audio = next(s for s in p.release[0].steps if s.kind == "audio")
    assert audio.new_override is None
    assert audio.expect_driver is None


def test_card_of_running_vm_is_refused_naming_the_vm(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    with pytest.raises(VfioReleaseError) as err:
        plan(root, addresses=["0000:41:00.0"], allow_stopped_vm_cards=True)
    msg = str(err.value)
    assert "held by running VM 201" in msg
    assert "never unbound while its VM runs" in msg
    assert (
        "0000:41:00.0 shares IOMMU group 30 with 0000:42:00.0, 0000:42:00.1, "
        "held by running VM 202" in msg
    )
    # The listing says which card each VM holds.
    assert "0000:42:00.0 NVIDIA GeForce RTX 3090 [vfio-pci] held by VM 202 (running" in msg
    assert "0000:01:00.0 NVIDIA RTX A6000 [vfio-pci] held by no VM" in msg


def test_card_of_stopped_vm_needs_the_override(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    with pytest.raises(VfioReleaseError, match=r"stopped VM 203 .*allow_stopped_vm_cards"):
        plan(root, addresses=["02:00"])
    p = plan(root, addresses=["02:00"], allow_stopped_vm_cards=True)
    assert p.release[0].stopped_vm_holders == (203,)
    assert p.release[0].steps[0].current_override == "vfio-pci"


def test_model_and_count_prefers_unassigned_cards(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    p = plan(root, model="NVIDIA RTX A6000", count=1)
    assert [c.address for c in p.release] == ["0000:01:00.0"]
    with pytest.raises(VfioReleaseError) as err:
        plan(root, model="10de:2230", count=2)
    assert "asked for 2 card(s) matching '10de:2230', only 1 can be the host's" in str(err.value)
    assert "1 more are assigned to stopped VMs" in str(err.value)
    p2 = plan(root, model="nvidia  rtx a6000", count=2, allow_stopped_vm_cards=True)
    assert [c.address for c in p2.release] == ["0000:01:00.0", "0000:02:00.0"]


def test_model_held_only_by_running_vms_is_refused(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    with pytest.raises(VfioReleaseError, match=r"only 0 can be the host's"):
        plan(root, model="NVIDIA GeForce RTX 3090", count=1, allow_stopped_vm_cards=True)


def test_nvidia_driver_must_be_loaded(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090")
    with pytest.raises(VfioReleaseError, match="nvidia driver is not loaded"):
        plan(root, addresses=["01:00"])


def test_half_migrated_counts_the_card_already_on_nvidia(host_tree: HostTree) -> None:
    root = host_tree("half-migrated")
    p = plan(root, model="NVIDIA RTX A6000", count=2)
    assert p.already_on_host == ("0000:17:00.0",)
    assert [c.address for c in p.release] == ["0000:65:00.0"]
    assert p.keep_on_vfio == ()
    p1 = plan(root, model="10de:2230", count=1)
    assert p1.release == ()
    assert p1.already_on_host == ("0000:17:00.0",)


def test_mapping_holders_are_respected(host_tree: HostTree) -> None:
    root = host_tree("mapping", nvidia=True)
    with pytest.raises(
        VfioReleaseError, match=r"running VM 301 \(.*via mapping gpu-pool.*never unbound"
    ):
        plan(root, addresses=["0000:02:00.0"])
    with pytest.raises(VfioReleaseError, match=r"stopped VM 303"):
        plan(root, addresses=["04:00"])
    p = plan(root, addresses=["04:00"], allow_stopped_vm_cards=True)
    assert [c.address for c in p.release] == ["0000:04:00.0"]


def test_unknown_address_lists_the_cards(host_tree: HostTree) -> None:
    root = host_tree("pro6000x4")
    with pytest.raises(VfioReleaseError) as err:
        plan(root, addresses=["0000:99:00.0"])
    assert "0000:99:00 is not an NVIDIA card on node pve-t2" in str(err.value)
    assert "0000:61:00.0 NVIDIA RTX PRO 6000 Blackwell Max-Q" in str(err.value)


def test_cards_already_on_nvidia_need_nothing(host_tree: HostTree) -> None:
    root = host_tree("pro6000x4")
    p = plan(root, model="NVIDIA RTX PRO 6000 Blackwell Workstation Edition", count=3)
    assert p.release == ()
    assert len(p.already_on_host) == 3


def test_a_part_of_a_name_matches_nothing(host_tree: HostTree) -> None:
    """One rule for model names (module_utils gpu_select): the exact product name or the
    PCI id. "PRO 6000" would have taken the Workstation and the Max-Q cards alike."""
    root = host_tree("pro6000x4")
    with pytest.raises(VfioReleaseError) as err:
        plan(root, model="PRO 6000", count=4)
    msg = str(err.value)
    assert msg.startswith("model: no card named 'PRO 6000' on pve-t2")
    # nearest first: the shorter name differs from "PRO 6000" by less
    assert (
        "did you mean 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition' or"
        " 'NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition'?"
    ) in msg
    a6000 = host_tree("a6000-3090", nvidia=True)
    with pytest.raises(VfioReleaseError, match=r"no card named '5090'.*10de:2230"):
        plan(a6000, model="5090", count=1)
    with pytest.raises(VfioReleaseError, match=r"did you mean 'NVIDIA RTX A6000'"):
        plan(a6000, model="A6000", count=1)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"addresses": ["01:00"], "model": "A6000", "count": 1}, "mutually exclusive"),
        ({"addresses": None, "model": "A6000", "count": 0}, "count: must be an integer >= 1"),
        ({"addresses": None, "model": None, "count": 2}, "count: only valid together with model"),
        ({"addresses": ["1:0"], "model": None, "count": None}, "addresses[0]: '1:0' is not a PCI"),
        ({"addresses": None, "model": " ", "count": 1}, "model: must be a PCI ID"),
    ],
)
def test_bad_requests_name_the_option(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(VfioReleaseError) as err:
        parse_request(**kwargs)  # type: ignore[arg-type]
    assert problem in str(err.value)


def test_request_addresses_are_normalised_to_slots() -> None:
    req = parse_request(addresses=["01:00.0", "0000:01:00.1", "02:00"], model=None, count=None)
    assert req == ReleaseRequest(addresses=("0000:01:00", "0000:02:00"))


# --------------------------------------------------------------------------- boot config


def test_modprobe_ids_lose_only_the_released_ids() -> None:
    text = (
        "# passthrough\n"
        "options vfio-pci ids=10de:2230,10de:1aef,10de:2204 disable_vga=1\n"
        "options vfio_pci ids=10de:2230\n"
        "options kvm ignore_msrs=1\n"
    )
    out = vfio.strip_ids_from_modprobe(text, ["10de:2230", "10de:1aef"])
    assert out == (
        "# passthrough\n"
        "options vfio-pci ids=10de:2204 disable_vga=1\n"
        "# specops vfio_release: cards released by address; was: options vfio_pci ids=10de:2230\n"
        "options kvm ignore_msrs=1\n"
    )
    assert vfio.strip_ids_from_modprobe(out, ["10de:2230", "10de:1aef"]) == out


def test_kernel_cmdline_and_grub_lose_the_released_ids() -> None:
    cmd = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet vfio-pci.ids=10de:2230,10de:1aef iommu=pt"
    assert vfio.strip_ids_from_cmdline(cmd, ["10de:2230", "10de:1aef"]) == (
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet iommu=pt"
    )
    grub = (
        'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:2230,10de:2204"\n'
        'GRUB_CMDLINE_LINUX=""\n'
    )
    assert vfio.strip_ids_from_grub(grub, ["10de:2230"]) == (
        'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet vfio-pci.ids=10de:2204"\n'
        'GRUB_CMDLINE_LINUX=""\n'
    )


def test_boot_config_pins_vm_cards_and_cleans_ids(host_tree: HostTree) -> None:
    root = host_tree("a6000-3090", nvidia=True)
    p = plan(root, addresses=["01:00"])
    current = {
        "/etc/modprobe.d/vfio.conf": "options vfio-pci ids=10de:2230,10de:1aef\n",
        "/etc/modprobe.d/specops-vfio.conf": None,
        vfio.OVERRIDE_SCRIPT: None,
        "/etc/kernel/cmdline": "root=ZFS=rpool/ROOT/pve-1 boot=zfs vfio-pci.ids=10de:2230\n",
        "/etc/default/grub": None,
    }
    boot = vfio.boot_config(
        p,
        current=current,
        loader="systemd-boot",
        modprobe_files=["/etc/modprobe.d/vfio.conf"],
    )
    assert boot.files["/etc/kernel/cmdline"] == "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n"
    assert boot.files["/etc/modprobe.d/vfio.conf"].startswith("# specops vfio_release")
    script = boot.files[vfio.OVERRIDE_SCRIPT]
    assert "devices/0000:41:00.1/driver_override" in script
    assert "0000:01:00" not in script
    assert "install vfio-pci" in boot.files["/etc/modprobe.d/specops-vfio.conf"]
    assert "ids=" not in boot.files["/etc/modprobe.d/specops-vfio.conf"]
    assert boot.refresh == ("initramfs", "proxmox-boot-tool")
    # Applied once, nothing more to do.
    again = vfio.boot_config(
        p,
        current={**current, **boot.files},
        loader="systemd-boot",
        modprobe_files=["/etc/modprobe.d/vfio.conf"],
    )
    assert again.files == {}
    assert again.remove == ()
    assert again.refresh == ()


def test_boot_config_removes_the_pin_when_no_card_stays(host_tree: HostTree) -> None:
    root = host_tree("half-migrated")
    p = plan(root, addresses=["65:00"])
    boot = vfio.boot_config(
        p,
        current={"/etc/modprobe.d/specops-vfio.conf": "old\n", vfio.OVERRIDE_SCRIPT: "old\n"},
        loader="grub",
    )
    assert boot.remove == ("/etc/modprobe.d/specops-vfio.conf", vfio.OVERRIDE_SCRIPT)
    assert boot.refresh == ("initramfs",)
