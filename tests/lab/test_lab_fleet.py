"""The lab fleet (specops_lab.fleet): N nodes of the lab's shapes, an inventory of the
example's shape that points at THIS lab directory, and the unreachable-node fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostRoots, gather_facts

from specops.errors import ValidationError
from specops_lab.fleet import SHAPES, fleet_plan, write_fleet
from specops_lab.fleet_run import profile_summary, recap
from specops_lab.hosttree import MODELS, build_tree, load_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_plan_keeps_the_lab_nodes_first_then_cycles_the_shapes() -> None:
    assert fleet_plan(1) == {"pve-b": "pro4"}
    plan = fleet_plan(8)
    assert list(plan) == ["pve-b", "pve-a", *(f"pve-{i:02d}" for i in range(3, 9))]
    assert list(plan.values()) == [
        "pro4", "kpro5", "pro8", "nofree", "kpro5", "pro4", "pro8", "nofree",
    ]  # fmt: skip
    assert set(fleet_plan(32).values()) == set(SHAPES)


@pytest.mark.parametrize("n", [0, 100])
def test_a_size_out_of_range_is_refused_naming_the_flag(n: int) -> None:
    with pytest.raises(ValidationError, match=r"--nodes.*valid: 1 to 99"):
        fleet_plan(n)


def test_descriptions_are_the_shapes_under_each_node_name(tmp_path: Path) -> None:
    files = write_fleet(tmp_path / "lab", 6)
    assert sorted(p.stem for p in files.hardware_dir.glob("*.yml")) == sorted(files.nodes)
    # The lab's own nodes keep their descriptions (their serving container stays).
    for node in ("pve-a", "pve-b"):
        mine = load_spec(files.hardware_dir / f"{node}.yml")
        assert mine == load_spec(REPO / "inventory" / "lab" / "hardware" / f"{node}.yml")
    nofree = load_spec(files.hardware_dir / "pve-04.yml")
    assert nofree.node == "pve-04"
    assert {e["node"] for m in nofree.mappings for e in m.maps} == {"pve-04"}
    pro8 = load_spec(files.hardware_dir / "pve-03.yml")
    assert [c.pci_id for c in pro8.cards] == [MODELS["rtx-pro-6000"].pci_id] * 8
    # Shrinking the fleet drops the descriptions of the nodes it no longer has.
    write_fleet(tmp_path / "lab", 2)
    assert sorted(p.stem for p in files.hardware_dir.glob("*.yml")) == ["pve-a", "pve-b"]


def test_the_nofree_node_has_no_card_a_container_could_get(tmp_path: Path) -> None:
    files = write_fleet(tmp_path / "lab", 4)
    root = tmp_path / "pve-04"
    build_tree(load_spec(files.hardware_dir / "pve-04.yml"), root, device_nodes=False)
    facts = gather_facts(HostRoots.under(str(root)))
    displays = [g for g in facts.gpus if g.address.endswith(".0")]
    assert len(displays) == 2
    assert all(g.held_by_running_vm is not None and not g.free for g in displays), displays


def test_the_inventory_has_the_example_shape_and_this_lab_s_paths(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    files = write_fleet(lab, 3)
    hosts = yaml.safe_load((files.inventory_dir / "hosts.yml").read_text())
    groups = hosts["all"]["children"]
    assert list(groups["pve_nodes"]["hosts"]) == ["pve-b", "pve-a", "pve-03"]
    assert list(groups["serving"]["hosts"]) == ["lab-ct801"]
    venv = Path(sys.executable).parent
    out = subprocess.run(
        [str(venv / "ansible-inventory"), "-i", str(files.inventory_dir), "--list"],
        cwd=REPO,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    hostvars = json.loads(out)["_meta"]["hostvars"]
    node = hostvars["pve-03"]
    assert node["ansible_connection"] == "specops.lab.node"  # the lab overlay
    assert node["specops_host_root"] == f"{lab}/{{{{ inventory_hostname }}}}"  # this lab's
    assert node["lxc_gpu_passthrough_pct_command"][0] == str(REPO / "scripts" / "lab" / "pct")
    ct = hostvars["lab-ct801"]
    assert ct["pve_container_node"] == "pve-b"
    assert ct["pve_container_api_ca_file"] == str(lab / "cluster" / "pki" / "pve-ssl.pem")


RECAP_AND_PROFILE = """\
PLAY RECAP *********************************************************************
localhost                  : ok=5    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
pve-03                     : ok=0    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0
pve-a                      : ok=30   changed=4    unreachable=0    failed=1    skipped=12   rescued=1    ignored=0

TASKS RECAP ********************************************************************
Thursday 03 December 2026  15:16:50 +0000 (0:00:00.036)       0:01:05.284 *****
===============================================================================
nvidia_driver : Reboot the host, one node at a time. -------------------- 4.54s
Read the node's GPU facts. ---------------------------------------------- 1.85s
"""  # noqa: E501  (Ansible's own lines)


def test_the_recap_and_profile_readers() -> None:
    hosts = recap(RECAP_AND_PROFILE)
    assert set(hosts) == {"localhost", "pve-03", "pve-a"}
    assert hosts["pve-03"].unreachable == 1
    assert hosts["pve-03"].tasks == 1
    assert (hosts["pve-a"].failed, hosts["pve-a"].changed, hosts["pve-a"].tasks) == (1, 4, 43)
    assert profile_summary(RECAP_AND_PROFILE) == [
        ("nvidia_driver : Reboot the host, one node at a time.", 4.54),
        ("Read the node's GPU facts.", 1.85),
    ]
    assert recap("no recap") == {}
