"""playbooks/host.yml's two passes on a lab of its own (the lab inventory's nodes, built in
a temp dir from inventory/lab/hardware, no containers, no network):

1. from the hard real state (nouveau loaded, every card on vfio-pci), the all-nodes pass
   converges what needs no outage and stops each node before its reboot; the reboots,
   driver installs and releases then run one node per batch;
2. a card newly asked for on a node that is otherwise converged: the all-nodes pass
   checks the request and stops before moving it; the one-node pass moves it;
3. a converged fleet: the one-node pass has nothing to do, changed=0 everywhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostRoots, gather_facts

from specops_lab.pve.testing import free_port
from specops_lab.up import LabPaths, down, up

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HARDWARE = REPO / "inventory" / "lab" / "hardware"
PASS_2 = "PLAY [PVE nodes - the steps that interrupt GPU work, one node at a time.]"  # noqa: S105
REBOOT = re.compile(
    r"TASK \[nvidia_driver : Reboot the host, one node at a time\.\][^\n]*\n(?:\S+: \[(\S+)\])"
)
FREE_A6000 = "0000:02:00.0"  # pve-a: free (03:00 is the stopped VM 203's, 41/42 running VMs')


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabPaths]:
    base = tmp_path_factory.mktemp("host-passes")
    template = base / "template.tar"
    template.write_bytes(b"not a rootfs: host.yml makes no container")
    paths = LabPaths(base / "lab")
    up(
        paths,
        hardware_dir=HARDWARE,
        template=template,
        cache=base / "cache",
        port=free_port(),
        with_network=False,
    )
    yield paths
    down(paths)  # never --destroy: the lab network is the main lab's


def host_yml(paths: LabPaths, *extra: str) -> tuple[int, str]:
    venv = Path(sys.executable).parent
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        # This lab's nodes (the node connection) and its own fact cache: the main lab's
        # nodes have the same names.
        SPECOPS_LAB_DIR=str(paths.lab_dir),
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(paths.lab_dir / "facts"),
        PROXMOX_TOKEN_SECRET=paths.token_secret_file.read_text().strip(),
        PATH=f"{venv}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    root = {"specops_host_root": f"{paths.lab_dir}/{{{{ inventory_hostname }}}}"}
    proc = subprocess.run(
        [
            str(venv / "ansible-playbook"),
            *("-i", "inventory/lab", "playbooks/host.yml", "-e", json.dumps(root)),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _recap(out: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.M)}


def _driver(paths: LabPaths, node: str, address: str) -> str | None:
    facts = gather_facts(HostRoots.under(str(paths.node_root(node))))
    return next(c.driver for c in facts.gpus if c.address == address)


@pytest.fixture(scope="module")
def first(lab: LabPaths) -> str:
    rc, out = host_yml(lab)
    assert rc == 0, out[-6000:]
    return out


def test_the_all_nodes_pass_stops_every_node_before_its_reboot(first: str) -> None:
    pass_1, _, pass_2 = first.partition(PASS_2)
    assert pass_2, "the one-node pass ran"
    assert not REBOOT.search(pass_1), "no reboot while every node runs at once"
    ended = re.search(
        r"TASK \[nvidia_driver : End this pass for the host before its reboot\.\]", pass_1
    )
    assert ended, pass_1[-3000:]
    for node in ("pve-a", "pve-b"):
        assert f"msg: '{node}: reboot to unload nouveau'" in pass_2


def test_reboots_and_releases_run_one_node_per_batch(lab: LabPaths, first: str) -> None:
    batches = first.split(PASS_2)[1:]
    assert len(batches) == 2, "serial: 1 over two deferred nodes"
    assert [REBOOT.findall(b) for b in batches] == [["pve-a"], ["pve-b"]]
    # pve-b's container asks for one RTX PRO 6000: released; pve-a hosts none.
    assert _driver(lab, "pve-b", "0000:01:00.0") == "nvidia"
    assert _driver(lab, "pve-a", FREE_A6000) == "vfio-pci"


def test_a_new_card_is_checked_at_once_and_moved_in_the_one_node_pass(
    lab: LabPaths, first: str
) -> None:
    rc, out = host_yml(
        lab, "-l", "pve-a", "-e", json.dumps({"vfio_release_addresses": [FREE_A6000]})
    )
    assert rc == 0, out[-6000:]
    pass_1, _, pass_2 = out.partition(PASS_2)
    # The check ran in the all-nodes pass and ended the node there, nothing moved.
    assert re.search(
        r"TASK \[vfio_release : Record why this host waits for that pass\.\][^\n]*\nok: \[pve-a\]"
        r"\n\nTASK \[vfio_release : End this pass for the host before moving a card\.\]",
        pass_1,
    ), pass_1[-3000:]
    assert "-> nvidia" not in pass_1
    assert f"msg: 'pve-a: move {FREE_A6000} to the host''s drivers'" in pass_2
    assert f"{FREE_A6000}: vfio-pci -> nvidia" in pass_2
    assert _driver(lab, "pve-a", FREE_A6000) == "nvidia"


def test_a_converged_fleet_needs_no_one_node_pass(lab: LabPaths, first: str) -> None:
    rc, out = host_yml(lab)
    assert rc == 0, out[-6000:]
    assert _recap(out) == {"localhost": 0, "pve-a": 0, "pve-b": 0}
    _, _, pass_2 = out.partition(PASS_2)
    assert "Say why this node needs the one-at-a-time pass" in pass_2
    assert not REBOOT.search(pass_2)
    assert "TASK [nvidia_driver :" not in pass_2
