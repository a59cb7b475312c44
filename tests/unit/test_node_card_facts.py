"""The node facts pass refuses what only a node knows, before any change (issue 36).

A PVE node stand-in built in a tmp dir from the lab's hardware description
(``inventory/lab/hardware/pve-a.yml``: three RTX A6000, one assigned to the STOPPED VM
203; two RTX 3090 held by the RUNNING VMs 201 (``host=``) and 202 (``mapping=``)). Each
row places containers on it and asks for cards; the node's GPU facts are read from the
tree (``gpu.gather_facts``, what ``specops.infra.gpu_facts`` returns) and judged by
``plugin_utils/inventory.node_card_problems``: each problem names the node, the container
and the variable and says what would be valid, and the node's tree is byte for byte as
before (a checksum of every file, link and mode). The last tests run the real playbooks
(``playbooks/host.yml``, which imports ``preflight-nodes.yml`` first) on a small
inventory whose node is that tree, without the shared lab.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils import gpu
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import (
    inventory_problems,
    node_card_problems,
)
from plugins.problems import assert_named

from specops_lab import hosttree

REPO = Path(__file__).resolve().parents[2]
NODE = "pve-a"
A6000 = "NVIDIA RTX A6000"
R3090 = "NVIDIA GeForce RTX 3090"
GPUS = "lxc_gpu_passthrough_gpus"
MODEL = "lxc_gpu_passthrough_gpu_model"
COUNT = "lxc_gpu_passthrough_gpu_count"


def tree_digest(root: Path) -> str:
    """Every path under ``root`` with its mode and its content or link target."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath) / name
            info = path.lstat()
            digest.update(f"{path.relative_to(root)}\0{info.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def node_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = hosttree.load_spec(REPO / "inventory" / "lab" / "hardware" / f"{NODE}.yml")
    return hosttree.build_tree(spec, tmp_path_factory.mktemp("node") / NODE, device_nodes=False)


def containers(**asks: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Groups and hostvars: each keyword a container on the node with its request."""
    hostvars = {h: {"pve_container_node": NODE, **v} for h, v in asks.items()}
    return {"pve_nodes": [NODE], "serving": sorted(asks)}, hostvars


def judged(root: Path, allow_stopped: bool = False, **asks: dict[str, Any]) -> list[str]:
    """The node's problems for ``asks``; the node's tree must not change."""
    before = tree_digest(root)
    facts = gpu.gather_facts(gpu.HostRoots.under(root)).to_dict()
    groups, hostvars = containers(**asks)
    problems = node_card_problems(
        groups, hostvars, NODE, facts, allow_stopped_vm_cards=allow_stopped
    )
    assert tree_digest(root) == before
    return problems


HELD = f"{NODE}: ct1: {GPUS}[0]: 0000:41:00.0 held by running VM 201"
FREE = f"free cards on {NODE}: 0000:01:00.0 {A6000}, 0000:02:00.0 {A6000}"
STOPPED = "0000:03:00.0 is assigned to stopped VM 203"

# row id -> (family, containers and their requests, expected: each (start, text in it))
ROWS: dict[str, tuple[str, dict[str, dict[str, Any]], list[tuple[str, str]]]] = {
    "address-held-by-running-vm": ("held by a VM", {"ct1": {GPUS: ["0000:41:00.0"]}},
                                   [(HELD, FREE)]),
    "address-held-through-a-mapping": ("held by a VM", {"ct1": {GPUS: ["42:00"]}},
                                       [(f"{NODE}: ct1: {GPUS}[0]: 0000:42:00.0 held by "
                                         "running VM 202", "via mapping rtx3090-b")]),
    "address-of-a-stopped-vm": ("held by a VM", {"ct1": {GPUS: ["03:00"]}},
                                [(f"{NODE}: ct1: {GPUS}[0]: {STOPPED}",
                                  "set vfio_release_allow_stopped_vm_cards: true")]),
    "model-all-held-by-vms": ("held by a VM", {"ct1": {MODEL: R3090}},
                              [(f"{NODE}: ct1: {COUNT}: asks for 1 '{R3090}'; {NODE} has 2 of "
                                "them, 0 free", "valid: another model or node")]),
    "count-above-the-node": ("count", {"ct1": {MODEL: A6000, COUNT: 4}},
                             [(f"{NODE}: ct1: {COUNT}: asks for 4 '{A6000}'; {NODE} has 3 of "
                               "them, 2 free", "valid: a count of at most 2 (up to 3")]),
    "count-above-the-free": ("count", {"ct1": {MODEL: A6000, COUNT: 3}},
                             [(f"{NODE}: ct1: {COUNT}: asks for 3", STOPPED)]),
    "counts-of-two-containers": ("count", {"ct1": {MODEL: A6000, COUNT: 2},
                                           "ct2": {MODEL: A6000}},
                                 [(f"{NODE}: ct1: {COUNT}: asks for 2 '{A6000}' (3 with ct2 1)",
                                   "valid: counts adding up to at most 2"),
                                  (f"{NODE}: ct2: {COUNT}: asks for 1 '{A6000}' (3 with ct1 2)",
                                   "valid: counts adding up to at most 2")]),
    "model-not-on-the-node": ("model", {"ct1": {MODEL: "NVIDIA H200", COUNT: 1}},
                              [(f"{NODE}: ct1: {MODEL}: no card named 'NVIDIA H200' on {NODE}",
                                f"'{A6000}' (10de:2230)")]),
    "address-not-on-the-node": ("address", {"ct1": {GPUS: ["0000:05:00.0"]}},
                                [(f"{NODE}: ct1: {GPUS}[0]: 0000:05:00.0 is not an NVIDIA card "
                                  f"on {NODE}", f"the node has: 0000:01:00.0 {A6000}")]),
    "second-address-not-on-the-node": ("address", {"ct1": {GPUS: ["01:00", "0000:c3:00.0"]}},
                                       [(f"{NODE}: ct1: {GPUS}[1]: 0000:c3:00.0 is not an "
                                         "NVIDIA card", "0000:42:00.0 NVIDIA GeForce")]),
    "every-problem-at-once": ("all at once", {"ct1": {GPUS: ["41:00.0"]},
                                              "ct2": {GPUS: ["05:00"]},
                                              "ct3": {GPUS: ["02:00", "03:00"]}},
                              [(HELD, FREE),
                               (f"{NODE}: ct2: {GPUS}[0]: 05:00 is not an NVIDIA card", "has:"),
                               (f"{NODE}: ct3: {GPUS}[1]: {STOPPED}", "allow_stopped")]),
}  # fmt: skip


@pytest.mark.parametrize(("family", "asks", "expected"), ROWS.values(), ids=ROWS.keys())
def test_a_request_the_node_cannot_meet_is_named(
    node_root: Path, family: str, asks: dict[str, dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    assert_named(judged(node_root, **asks), expected)


@pytest.mark.parametrize(
    ("asks", "allow_stopped"),
    [
        ({"ct1": {MODEL: A6000, COUNT: 2}}, False),  # the two free A6000
        ({"ct1": {MODEL: A6000}, "ct2": {MODEL: A6000}}, False),  # one each
        ({"ct1": {MODEL: A6000, COUNT: 3}}, True),  # the stopped VM's card, allowed
        ({"ct1": {GPUS: ["01:00", "0000:02:00.0"]}}, False),  # free cards by address
        ({"ct1": {MODEL: "10de:2230", COUNT: 2}}, False),  # by PCI id
        ({"ct1": {}}, False),  # CPU-only
        ({"ct1": {GPUS: ["41:00"], "lxc_gpu_passthrough_state": "absent"}}, False),
        ({"ct1": {GPUS: ["bogus"]}}, False),  # malformed: the controller preflight's
    ],
    ids=["two-free", "one-each", "stopped-allowed", "addresses", "pci-id", "cpu-only",
         "absent", "malformed"],
)  # fmt: skip
def test_a_request_the_node_can_meet_passes(
    node_root: Path, asks: dict[str, dict[str, Any]], allow_stopped: bool
) -> None:
    """The controls: each bad row above fails for the one thing it changed."""
    assert judged(node_root, allow_stopped, **asks) == []


def test_a_container_on_another_node_is_not_judged_here(node_root: Path) -> None:
    facts = gpu.gather_facts(gpu.HostRoots.under(node_root)).to_dict()
    groups, hostvars = containers(ct1={GPUS: ["41:00"]})
    hostvars["ct1"]["pve_container_node"] = "pve-b"
    assert node_card_problems(groups, hostvars, NODE, facts) == []


# --------------------------------------------------------------------------- playbooks

PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


@pytest.fixture(scope="module")
def node_b_root(node_root: Path) -> Path:
    """pve-b beside pve-a: four RTX PRO 6000, the fourth held by the running VM 301."""
    spec = hosttree.load_spec(REPO / "inventory" / "lab" / "hardware" / "pve-b.yml")
    return hosttree.build_tree(spec, node_root.parent / "pve-b", device_nodes=False)


def _inventory(
    tmp_path: Path, roots: dict[str, Path], asks: dict[str, dict[str, Any]]
) -> tuple[Path, dict[str, list[str]], dict[str, dict[str, Any]]]:
    """A small inventory: each node tree as a PVE node (local connection, its root as
    ``specops_host_root``), the containers (each ``asks`` value names its node)."""
    serving = {h: {"pve_container_vmid": 901 + i, **v} for i, (h, v) in enumerate(asks.items())}
    nodes = {
        n: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "specops_host_root": str(root)}
        for n, root in roots.items()
    }  # fmt: skip
    hosts = {"all": {"children": {"pve_nodes": {"hosts": nodes},
                                  "serving": {"hosts": serving}}}}  # fmt: skip
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(hosts))
    return path, {"pve_nodes": sorted(roots), "serving": sorted(serving)}, serving


def _play(inventory: Path, playbook: str, *extra: str) -> tuple[int, dict[str, Any]]:
    bindir = Path(sys.executable).parent
    result = subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", str(inventory), *extra, playbook],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
             "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
             "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
             "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"},
    )  # fmt: skip
    assert result.stdout.startswith("{"), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


@pytest.mark.parametrize("mode", [(), ("--check",)], ids=["run", "check"])
def test_host_playbook_stops_at_the_node_facts_pass(
    node_root: Path, node_b_root: Path, tmp_path: Path, mode: tuple[str, ...]
) -> None:
    """``playbooks/host.yml`` (deploy.yml's first import), run for real and in check
    mode, on two nodes: the three facts-only problems at once (a card a running VM
    holds, an address not on the node, a count above the node's cards), each naming
    node, container and variable; the controller preflight passed them; no task of
    nvidia_driver or vfio_release ran and neither node changed."""
    asks = {"ct1": {"pve_container_node": NODE, GPUS: ["0000:41:00.0"]},
            "ct2": {"pve_container_node": NODE, GPUS: ["0000:05:00.0"]},
            "ct3": {"pve_container_node": "pve-b", MODEL: PRO6000, COUNT: 5}}  # fmt: skip
    roots = {NODE: node_root, "pve-b": node_b_root}
    inventory, groups, hostvars = _inventory(tmp_path, roots, asks)
    assert inventory_problems(groups, hostvars) == []  # the controller finds nothing
    before = {n: tree_digest(r) for n, r in roots.items()}
    rc, run = _play(inventory, "playbooks/host.yml", *mode)
    assert rc != 0
    tasks = [t for play in run["plays"] for t in play["tasks"]]
    failed = {
        host: (t["task"]["name"], result["msg"])
        for t in tasks for host, result in t["hosts"].items() if result.get("failed")
    }  # fmt: skip
    check = "Ensure every container placed on the node can get its cards."
    assert {h: name for h, (name, _m) in failed.items()} == {NODE: check, "pve-b": check}
    msg_a, msg_b = failed[NODE][1], failed["pve-b"][1]
    assert msg_a[0] == f"Card problems on {NODE} (fix them before anything changes):"
    assert [line.split(": ", 3)[:3] for line in msg_a[1:] + msg_b[1:]] == [
        [NODE, "ct1", f"{GPUS}[0]"], [NODE, "ct2", f"{GPUS}[0]"], ["pve-b", "ct3", COUNT],
    ], (msg_a, msg_b)  # fmt: skip
    assert "held by running VM 201" in msg_a[1]
    assert "is not an NVIDIA card on pve-a" in msg_a[2]
    assert f"asks for 5 '{PRO6000}'; pve-b has 4 of them, 3 free" in msg_b[1]
    assert "held by running VM 301" in msg_b[1]
    assert not [t for t in tasks if t["task"]["name"].startswith(("nvidia_driver", "vfio_"))]
    assert all(s["changed"] == 0 for s in run["stats"].values())
    assert {n: tree_digest(r) for n, r in roots.items()} == before


def test_the_node_facts_pass_lets_a_good_request_through_once(
    node_root: Path, tmp_path: Path
) -> None:
    """The control: two free A6000 pass; a playbook importing the pass twice (deploy.yml
    through host.yml and container.yml) reads the node's facts once."""
    asks = {"ct1": {"pve_container_node": NODE, MODEL: A6000, COUNT: 2}}
    inventory, _groups, _hostvars = _inventory(tmp_path, {NODE: node_root}, asks)
    playbook = tmp_path / "twice.yml"
    twice = f"{REPO}/playbooks/preflight-nodes.yml"
    playbook.write_text(
        f"- name: First.\n  ansible.builtin.import_playbook: {twice}\n"
        f"- name: Second.\n  ansible.builtin.import_playbook: {twice}\n"
    )
    before = tree_digest(node_root)
    rc, run = _play(inventory, str(playbook))
    assert rc == 0, json.dumps(run)[-3000:]
    reads = [
        t for play in run["plays"] for t in play["tasks"]
        if t["task"]["name"] == "Read the node's GPU facts." and not t["hosts"][NODE].get("skipped")
    ]  # fmt: skip
    assert len(reads) == 1
    assert tree_digest(node_root) == before


def test_host_and_container_playbooks_import_the_node_pass_first() -> None:
    for name in ("host.yml", "container.yml"):
        plays = yaml.safe_load((REPO / "playbooks" / name).read_text())
        assert plays[0]["ansible.builtin.import_playbook"] == "preflight-nodes.yml", name
