"""GPU requests refused by the preflight, before any change (issue 36).

The example inventory with one bad overlay per row: each problem names the host and the
variable and says what would be valid, all problems of a run at once. The checks are
the node's own code (``vfio.parse_request``, ``gpu_select``'s model rule) run on the
controller over the GPU catalogue; what only the node knows (free cards, VM holders) is
the node's. The last tests run ``playbooks/preflight.yml`` itself on a copy of the
example inventory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import inventory_problems
from plugins.problems import assert_named

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"


def example() -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """The example inventory's groups and its host_vars (what the checks read)."""
    tree = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]
    groups = {g: list(tree[g]["hosts"]) for g in ("pve_nodes", "serving")}
    hostvars: dict[str, dict[str, Any]] = {}
    for host in groups["pve_nodes"] + groups["serving"]:
        path = EXAMPLE / "host_vars" / f"{host}.yml"
        hostvars[host] = yaml.safe_load(path.read_text()) if path.exists() else {}
    return groups, hostvars


def overlaid(changes: dict[str, dict[str, Any]]) -> list[str]:
    """The problems of the example with ``changes`` per host (None drops a key)."""
    groups, hostvars = example()
    for host, values in changes.items():
        for key, value in values.items():
            if value is None:
                hostvars[host].pop(key, None)
            else:
                hostvars[host][key] = value
    return inventory_problems(groups, hostvars)


CT = "ct129-qwen27b"  # two NVIDIA RTX A6000 on gpu-node-01
CT2 = "ct131-qwen122b"  # four RTX PRO 6000 Blackwell on gpu-node-02
NODE = "gpu-node-03"  # no container
MODEL = "lxc_gpu_passthrough_gpu_model"
COUNT = "lxc_gpu_passthrough_gpu_count"
GPUS = "lxc_gpu_passthrough_gpus"
BY_ADDRESS = {MODEL: None, COUNT: None}
FOUR = [f"0000:8{i}:00.0" for i in range(1, 5)]  # CT2's four cards by address
VALID_ADDR = "(valid: 0000:01:00.0, 0000:01:00 or 01:00)"
VALID_COUNT = "must be an integer 1-16"

# family -> row id -> (overlay, the expected problems: each a (start, text it contains))
ROWS: dict[str, tuple[str, dict[str, dict[str, Any]], list[tuple[str, str]]]] = {
    "near-miss-name": ("model", {CT: {MODEL: "RTX A6000"}},
                       [(f"{CT}: {MODEL}: no card named 'RTX A6000'",
                         "did you mean 'NVIDIA RTX A6000'?")]),
    "typo": ("model", {CT: {MODEL: "NVIDA RTX A6000"}},
             [(f"{CT}: {MODEL}: no card named", "did you mean 'NVIDIA RTX A6000'?")]),
    "part-of-a-name": ("model", {CT: {MODEL: "A6000"}},
                       [(f"{CT}: {MODEL}: no card named 'A6000'", "NVIDIA RTX A6000")]),
    "ambiguous-part": ("model", {CT2: {MODEL: "RTX PRO 6000"}},
                       [(f"{CT2}: {MODEL}: no card named",
                         "'NVIDIA RTX PRO 6000 Blackwell Server Edition' or")]),
    "catalogue-id": ("model", {CT: {MODEL: "rtx-a6000"}},
                     [(f"{CT}: {MODEL}: no card named 'rtx-a6000'",
                       "give the product name exactly")]),
    "unknown-card": ("model", {CT: {MODEL: "Quadro X9"}},
                     [(f"{CT}: {MODEL}: no card named 'Quadro X9'", "by its PCI id")]),
    "model-a-number": ("model", {CT: {MODEL: 6000}},
                       [(f"{CT}: {MODEL}: must be a product name or PCI id", "6000")]),
    "count-zero": ("count", {CT: {COUNT: 0}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "(got 0)")]),
    "count-negative": ("count", {CT: {COUNT: -2}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "-2")]),
    "count-64": ("count", {CT: {COUNT: 64}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "(got 64)")]),
    "count-word": ("count", {CT: {COUNT: "two"}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "'two'")]),
    "count-bool": ("count", {CT: {COUNT: True}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "True")]),
    "count-float": ("count", {CT: {COUNT: 2.5}}, [(f"{CT}: {COUNT}: {VALID_COUNT}", "2.5")]),
    "address-not-a-list": ("address", {CT: {**BY_ADDRESS, GPUS: "0000:41:00.0"}},
                           [(f"{CT}: {GPUS}: must be a list of PCI addresses", "0000:41:00.0")]),
    "addresses-malformed": ("address", {CT: {**BY_ADDRESS, GPUS: ["41:00.0", "bogus", "41:0"]}},
                            [(f"{CT}: {GPUS}[1]: 'bogus' is not a PCI address", VALID_ADDR),
                             (f"{CT}: {GPUS}[2]: '41:0' is not a PCI address", VALID_ADDR)]),
    "address-a-mapping": ("address", {CT: {**BY_ADDRESS, GPUS: {"a": 1}}},
                          [(f"{CT}: {GPUS}: must be a list", "{'a': 1}")]),
    "address-plus-model": ("address+model", {CT: {GPUS: ["0000:41:00.0"]}},
                           [(f"{CT}: {GPUS}: give the cards by address or by {MODEL}",
                             "not both")]),
    "node-model-and-count": ("node", {NODE: {"vfio_release_model": "RTX A6000",
                                             "vfio_release_count": 0}},
                             [(f"{NODE}: vfio_release_model: no card named", "did you mean"),
                              (f"{NODE}: vfio_release_count: {VALID_COUNT}", "(got 0)")]),
    "node-address-string": ("node", {NODE: {"vfio_release_addresses": "01:00.0"}},
                            [(f"{NODE}: vfio_release_addresses: must be a list", "01:00.0")]),
    "node-address-plus-model": ("node", {NODE: {"vfio_release_addresses": ["01:00.0"],
                                                "vfio_release_model": "NVIDIA RTX A6000",
                                                "vfio_release_count": 1}},
                                [(f"{NODE}: vfio_release_addresses: give the cards by address",
                                  "not both")]),
    "two-models-on-a-node": ("combined", {CT2: {"pve_container_node": "gpu-node-01"}},
                             [("gpu-node-01: vfio_release: its containers ask for more than one",
                               "NVIDIA RTX A6000: ct129-qwen27b")]),
    "address-and-model-on-a-node": ("combined", {CT2: {"pve_container_node": "gpu-node-01",
                                                       **BY_ADDRESS, GPUS: FOUR}},
                                    [("gpu-node-01: vfio_release: its containers ask for cards"
                                      " by address (ct131-qwen122b) and by model",
                                      "give them all")]),
    "every-problem-at-once": ("all at once", {CT: {MODEL: "RTX A6000", COUNT: 64},
                                              CT2: {COUNT: "two"}},
                              [(f"{CT}: {MODEL}: no card named", "did you mean"),
                               (f"{CT}: {COUNT}: {VALID_COUNT}", "64"),
                               (f"{CT2}: {COUNT}: {VALID_COUNT}", "'two'")]),
}  # fmt: skip


@pytest.mark.parametrize(("family", "overlay", "expected"), ROWS.values(), ids=ROWS.keys())
def test_a_bad_gpu_request_is_named_by_host_and_variable(
    family: str, overlay: dict[str, dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    assert_named(overlaid(overlay), expected)


@pytest.mark.parametrize(
    "overlay",
    [
        {},  # the example as it is
        {CT: {COUNT: "2"}},  # -e gives strings: digits are a count
        {CT: {MODEL: "10de:2684"}},  # a card the catalogue lacks, by its PCI id
        {CT: {MODEL: "nvidia  rtx a6000"}},  # case and spaces do not matter (the rule)
        {CT: {**BY_ADDRESS, GPUS: ["41:00.0", "0000:42:00"]}},  # addresses, short forms
        {CT: {MODEL: "RTX A6000", "lxc_gpu_passthrough_state": "absent"}},  # no request
        {NODE: {"vfio_release_model": "NVIDIA H200", "vfio_release_count": 8}},
    ],
    ids=["example", "count-string", "pci-id", "case", "addresses", "absent", "node"],
)
def test_a_good_gpu_request_passes(overlay: dict[str, dict[str, Any]]) -> None:
    """The controls: each row above fails for the one thing it changed."""
    assert overlaid(overlay) == []


def _preflight(inventory: Path) -> subprocess.CompletedProcess[str]:
    bindir = Path(sys.executable).parent
    return subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", str(inventory), "playbooks/preflight.yml"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
             "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
             "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"},
    )  # fmt: skip


def test_the_preflight_playbook_refuses_them_all_before_any_change(tmp_path: Path) -> None:
    """The real preflight on a copy of the example inventory: the filter hands the GPU
    variables over, every problem is listed, nothing changed (it runs on the controller
    only, and its recap says changed=0)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    ct = inventory / "host_vars" / f"{CT}.yml"
    data = yaml.safe_load(ct.read_text())
    data.update({MODEL: "RTX A6000", COUNT: 64})
    ct.write_text(yaml.safe_dump(data))
    (inventory / "host_vars" / f"{NODE}.yml").write_text(
        yaml.safe_dump({"vfio_release_addresses": ["bogus"]})
    )
    before = {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    result = _preflight(inventory)
    assert result.returncode != 0, result.stdout[-3000:]
    run = json.loads(result.stdout)
    failed = [
        (task["task"]["name"], task["hosts"]["localhost"]["msg"])
        for task in run["plays"][0]["tasks"]
        if task["hosts"].get("localhost", {}).get("failed")
    ]
    assert len(failed) == 1, failed
    name, msg = failed[0]
    assert name == "Ensure the inventory describes a deployable fleet."
    assert msg[0] == "Inventory problems (fix them before anything changes):"
    assert [line.split(": ", 2)[:2] for line in msg[1:]] == [
        [CT, MODEL], [CT, COUNT], [NODE, "vfio_release_addresses[0]"],
    ], msg  # fmt: skip
    assert "did you mean 'NVIDIA RTX A6000'?" in msg[1]
    assert msg[2].endswith(f"{VALID_COUNT} (got 64)")
    assert "'bogus' is not a PCI address" in msg[3]
    assert run["stats"]["localhost"]["changed"] == 0
    assert {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()} == before


def test_the_preflight_playbook_passes_the_example_inventory() -> None:
    result = _preflight(EXAMPLE)
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_host_in_both_groups_is_named_as_such() -> None:
    """Issue 36: a container also listed as a PVE node got "pve_container_node is not
    set"; the problem is the placement, and nothing else is said of that host."""
    groups, hostvars = example()
    groups["pve_nodes"].append(CT)
    assert inventory_problems(groups, hostvars) == [
        f"{CT}: is in both groups pve_nodes and serving: a PVE node (the host) and a serving"
        " container (an LXC on a node) are two inventory hosts; keep it in one"
    ]
