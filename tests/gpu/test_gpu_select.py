"""One rule for "which card is free" and "which cards a model name means" (issue 19).

Each way of holding a card, on recorded host trees (tests/fixtures/hosts/*.yml built by
the hosttree stand-in: VM configs, pidfiles, /proc/<pid>/cmdline and fd links): a
running VM's hostpciN host= entry, a cluster mapping, an ``args:`` line, a QEMU outside
PVE with the vfio group open, a shared IOMMU group, a stopped VM's assignment. Then the
three callers (passthrough, vfio release, migration preflight) on the same host.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import gpu, lxc_gpu, vfio
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    card_state,
    matches_model,
    matching_cards,
    select_free,
)

from specops.migrate.preflight import select_cards
from specops_lab import hosttree

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


def _facts(root: Path) -> dict[str, Any]:
    return gpu.gather_facts(gpu.HostRoots.under(root)).to_dict()


@pytest.fixture
def tree(tmp_path: Path) -> Callable[..., Path]:
    def build(name: str, *, released: tuple[str, ...] = ()) -> Path:
        spec = hosttree.load_spec(HOSTS / f"{name}.yml")
        if released:
            spec = hosttree.with_cards_released(spec, list(released))
        return hosttree.build_tree(spec, tmp_path / name, device_nodes=False)

    return build


def _state(facts: dict[str, Any], address: str, **kw: Any) -> Any:
    cards = facts["gpus"]
    card = next(c for c in cards if c["address"] == address)
    return card_state(card, cards, **kw)


# --------------------------------------------------------------------------- model names


def test_model_is_the_exact_name_or_the_pci_id() -> None:
    card = {"name": "NVIDIA RTX A6000", "pci_id": "10de:2230"}
    assert matches_model(card, "NVIDIA RTX A6000")
    assert matches_model(card, "  nvidia   rtx a6000 ")  # case and spacing aside
    assert matches_model(card, "10DE:2230")
    for part in ("A6000", "RTX A6000", "6000", "10de", "2230", "NVIDIA RTX A600", ""):
        assert not matches_model(card, part), part
    pro = {"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "pci_id": "10de:2bb1"}
    assert not matches_model(pro, "RTX 6000")


def test_no_match_names_what_would(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("a6000-3090"))
    with pytest.raises(GpuSelectError) as err:
        matching_cards(facts["gpus"], "3090", node="pve-t1")
    assert err.value.field == "gpu_model"
    assert "no card named '3090' on pve-t1" in err.value.problem
    assert "did you mean 'NVIDIA GeForce RTX 3090'?" in err.value.problem
    with pytest.raises(GpuSelectError, match=r"no card named '5090'.*\(10de:2204\)") as err:
        matching_cards(facts["gpus"], "5090")
    assert "did you mean" not in str(err.value)
    with pytest.raises(GpuSelectError, match="is empty"):
        matching_cards(facts["gpus"], " ")


# --------------------------------------------------------------------------- ways of holding


def test_running_vm_hostpci_host_entry_holds_its_card(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("a6000-3090"))
    state = _state(facts, "0000:41:00.0", allow_stopped_vm_cards=True)
    assert not state.usable
    assert state.reasons[0].startswith("0000:41:00.0 held by running VM 201 (")
    assert "hostpci0 via host=" in state.reasons[0]


def test_running_vm_mapping_holds_every_candidate(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("mapping"))
    for address in ("0000:01:00.0", "0000:02:00.0"):  # gpu-pool offers either 3090
        state = _state(facts, address, allow_stopped_vm_cards=True)
        assert not state.usable
        assert "held by running VM 301" in state.reasons[0]
        assert "via mapping gpu-pool" in state.reasons[0]


def test_running_vm_args_line_holds_its_card(tree: Callable[..., Path]) -> None:
    root = tree("in-use")
    facts = _facts(root)
    card = next(c for c in facts["gpus"] if c["address"] == "0000:01:00.0")
    (holder,) = card["holders"]
    assert (holder["vmid"], holder["key"], holder["via"], holder["running"]) == (
        401,
        "args",
        "args",
        True,
    )
    assert holder["functions"] == ["0000:01:00.0", "0000:01:00.1"]
    state = _state(facts, "0000:01:00.0", allow_stopped_vm_cards=True)
    assert not state.usable
    assert "held by running VM 401" in state.reasons[0]
    assert "args via args: -device vfio-pci" in state.reasons[0]
    # Its pidfile gone but its QEMU still there: the open group still holds the card.
    (root / "run" / "qemu-server" / "401.pid").unlink()
    assert _state(_facts(root), "0000:01:00.0").reasons == (
        "0000:01:00.0 in use: process (pid 7401 /usr/bin/kvm) has /dev/vfio/11 open",
    )
    # Stopped, the args: VM keeps it like a hostpci entry: only with the override.
    shutil.rmtree(root / "proc" / "7401")
    stopped = _state(_facts(root), "0000:01:00.0")
    assert not stopped.usable
    assert stopped.stopped_vms == (401,)
    assert "set allow_stopped_vm_cards" in stopped.reasons[0]


def test_a_process_outside_pve_with_the_vfio_group_open(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("in-use"))
    card = next(c for c in facts["gpus"] if c["address"] == "0000:21:00.0")
    assert card["holders"] == []  # no VM config names it
    assert card["held_by_running_vm"] is None
    assert card["free"] is False
    assert card["open_by"] == [
        {
            "pid": 7021,
            "command": "/usr/bin/qemu-system-x86_64",
            "vmid": None,
            "path": "/dev/vfio/21",
        }
    ]
    state = _state(facts, "0000:21:00.0", allow_stopped_vm_cards=True)
    assert state.reasons == (
        "0000:21:00.0 in use: process (pid 7021 /usr/bin/qemu-system-x86_64) has /dev/vfio/21 open",
    )


def test_a_shared_iommu_group_with_a_running_vm(tree: Callable[..., Path]) -> None:
    root = tree("a6000-3090")
    facts = _facts(root)
    # With VM 201 gone entirely, 41:00 has no running holder of its own, but 42:00 of
    # its IOMMU group 30 belongs to running VM 202.
    for path in (root / "etc/pve/qemu-server/201.conf", root / "run/qemu-server/201.pid"):
        path.unlink()
    facts = _facts(root)
    state = _state(facts, "0000:41:00.0")
    assert not state.usable
    assert any("has /dev/vfio/30 open" in r for r in state.reasons)
    assert any(
        "shares IOMMU group 30 with 0000:42:00.0, 0000:42:00.1, held by running VM 202" in r
        for r in state.reasons
    )


def test_a_stopped_vm_card_only_with_the_override(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("in-use"))
    state = _state(facts, "0000:61:00.0")
    assert not state.usable
    assert state.stopped_vms == (403,)
    assert "assigned to stopped VM 403" in state.reasons[0]
    assert _state(facts, "0000:61:00.0", allow_stopped_vm_cards=True).usable
    # The API's view of running VMs adds to the node's: 403 running there holds it.
    api = _state(facts, "0000:61:00.0", allow_stopped_vm_cards=True, running_vms={403})
    assert not api.usable


def test_selection_order_and_notes(tree: Callable[..., Path]) -> None:
    facts = _facts(tree("in-use"))
    sel = select_free(facts["gpus"], "NVIDIA RTX A6000", 3, node="pve-t5")
    assert sel.chosen == ["0000:41:00.0", "0000:81:00.0"]
    assert not sel.ok
    assert sel.stopped_only == 1
    assert len(sel.refused) == 3
    with_stopped = select_free(
        facts["gpus"], "10de:2230", 3, allow_stopped_vm_cards=True, prefer=["0000:81:00.0"]
    )
    # preferred first, then unassigned, then the stopped VM's card
    assert with_stopped.chosen == ["0000:81:00.0", "0000:41:00.0", "0000:61:00.0"]
    assert "0000:61:00.0 free (vfio-pci, assigned to stopped VM 403)" in with_stopped.notes


# --------------------------------------------------------------------------- the three callers


def test_preflight_release_and_passthrough_agree(tree: Callable[..., Path]) -> None:
    """The issue's host: free A6000s at 41:00 and 81:00, a stopped VM's at 61:00. The
    preflight used to pick 41:00 + 61:00, which the target's vfio release then refused."""
    root = tree("in-use")
    facts = _facts(root)
    chosen, problems = select_cards(
        facts, "NVIDIA RTX A6000", 2, running_vms={401}, minors_in_use=set()
    )
    assert (chosen, problems) == (["0000:41:00.0", "0000:81:00.0"], [])
    # The target phase releases exactly those by address, and by model it picks them too.
    host = gpu.gather_facts(gpu.HostRoots.under(root))
    drivers = {"nvidia", "vfio-pci"}
    by_address = vfio.plan_release(
        host, vfio.parse_request(addresses=chosen, model=None, count=None), drivers
    )
    assert [c.address for c in by_address.release] == chosen
    by_model = vfio.plan_release(
        host, vfio.parse_request(addresses=None, model="NVIDIA RTX A6000", count=2), drivers
    )
    assert [c.address for c in by_model.release] == chosen
    # A third card is the stopped VM's: refused by all three without the override.
    _, problems = select_cards(facts, "NVIDIA RTX A6000", 3, running_vms={401}, minors_in_use=set())
    assert "pve-t5 has 2 free 'NVIDIA RTX A6000' card(s), 3 wanted (1 more assigned" in problems[0]
    with pytest.raises(vfio.VfioReleaseError, match="1 more are assigned to stopped VMs"):
        vfio.plan_release(
            host, vfio.parse_request(addresses=None, model="10de:2230", count=3), drivers
        )
    # After the release the cards are on nvidia; passthrough picks the same two and
    # takes the stopped VM's one only with the override.
    released = tree("in-use", released=("0000:41:00.0", "0000:61:00.0", "0000:81:00.0"))
    after = _facts(released)
    pick = lxc_gpu.select_gpus(after, "NVIDIA RTX A6000", 2, mine=set(), others={})
    assert pick == ["0000:41:00.0", "0000:81:00.0"]
    with pytest.raises(lxc_gpu.LxcGpuError, match=r"^gpu_count: .*assigned to stopped VM 403"):
        lxc_gpu.select_gpus(after, "NVIDIA RTX A6000", 3, mine=set(), others={})
    with pytest.raises(lxc_gpu.LxcGpuError, match=r"^gpus: 0000:61:00.0 is assigned to stopped"):
        lxc_gpu.plan_devices(after, ["61:00.0"])
    three = lxc_gpu.select_gpus(
        after, "10de:2230", 3, mine=set(), others={}, allow_stopped_vm_cards=True
    )
    assert three == ["0000:41:00.0", "0000:61:00.0", "0000:81:00.0"]


def test_vfio_card_matches_model_is_the_same_rule(tree: Callable[..., Path]) -> None:
    host = gpu.gather_facts(gpu.HostRoots.under(tree("pro6000x4")))
    for card in host.gpus:
        for model in ("PRO 6000", card.name, card.pci_id, card.name.upper(), "Blackwell"):
            assert vfio.card_matches_model(card, model) == matches_model(asdict(card), model)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ("-device vfio-pci,host=0000:01:00.0,x-vga=on", ["0000:01:00.0"]),
        ("-cpu host --device vfio-pci,host=41:00.1 -m 4096", ["0000:41:00.1"]),
        ("-device=vfio-pci,sysfsdev=/sys/bus/pci/devices/0000:21:00.0", ["0000:21:00.0"]),
        ("-device 'driver=vfio-pci,host=0000:81:00.0'", ["0000:81:00.0"]),
        ("-device virtio-net-pci,netdev=n0 -device vfio-pci-nohotplug,host=01:00.0", []),
        ("-device usb-host,hostbus=1,hostaddr=2", []),
    ],
)
def test_args_line_devices(args: str, want: list[str]) -> None:
    assert [str(a) for a in gpu.parse_qemu_args_devices(args)] == want


def test_malformed_args_device_names_file_and_line(tmp_path: Path) -> None:
    qemu = tmp_path / "etc" / "pve" / "qemu-server"
    qemu.mkdir(parents=True)
    conf = qemu / "410.conf"
    conf.write_text("name: x\nargs: -device vfio-pci,x-vga=on\n")
    with pytest.raises(gpu.GpuFactsError) as err:
        gpu.gather_facts(gpu.HostRoots.under(tmp_path))
    assert str(err.value) == (
        f"{conf}:2: args: -device vfio-pci,x-vga=on: a vfio-pci device needs host= or sysfsdev="
    )
