"""Failure at scale, small (issue 34): a lab fleet of three nodes (specops_lab.fleet, in a
temp dir: no container, no network) from the hard real state, batches of two with
specops_host_max_fail_percentage 50, and two nodes failing:

- pve-03 cannot be reached (the lab's unreachable fault on its connection);
- pve-a's emulated reboot never comes back (specops_lab.node.NO_RETURN_FAULT).

host.yml converges the rest (pve-b: its card released to the host), names the two and
changes nothing on them past the failure (pve-03 untouched, pve-a still without a driver);
once both are back, a run limited to them completes the fleet.
scripts/experiments/bench-fleet-scale.py's failure case is the same at N = 16.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.gpu import HostRoots, gather_facts

from specops_lab.fleet import write_fleet
from specops_lab.fleet_run import PlaybookRun, run_playbook
from specops_lab.node import NO_RETURN_FAULT, boot
from specops_lab.paths import UNREACHABLE_FAULT
from specops_lab.pve.testing import free_port
from specops_lab.up import LabPaths, down, up

pytestmark = [pytest.mark.slow]

UNREACHABLE, NO_RETURN, HEALTHY = "pve-03", "pve-a", "pve-b"
# The lab's reboot is instant: a node that is not back within a few seconds is not coming.
FAST = ("-e", json.dumps({"nvidia_driver_reboot_timeout": 6}))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LabPaths, Path]]:
    base = tmp_path_factory.mktemp("fleet-failures")
    lab = base / "lab"
    files = write_fleet(lab, 3, batch=2, max_fail_percentage=50)
    template = base / "template.tar"
    template.write_bytes(b"not a rootfs: host.yml makes no container")
    paths = LabPaths(lab)
    up(paths, hardware_dir=files.hardware_dir, template=template, cache=base / "cache",
       port=free_port(), with_network=False)  # fmt: skip
    yield paths, files.inventory_dir
    down(paths)  # never --destroy: the lab network is the main lab's


def _facts(paths: LabPaths, node: str) -> tuple[str | None, list[str | None]]:
    facts = gather_facts(HostRoots.under(str(paths.node_root(node))))
    version = facts.nvidia_module.version if facts.nvidia_module.loaded else None
    return version, [g.driver for g in facts.gpus if g.address.endswith(".0")]


def _fault(paths: LabPaths, node: str, fault: Path) -> Path:
    path = paths.node_root(node) / fault
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("issue 34\n")
    return path


@pytest.fixture(scope="module")
def failed(fleet: tuple[LabPaths, Path]) -> tuple[PlaybookRun, dict[str, object]]:
    paths, inventory = fleet
    before = {n: _facts(paths, n) for n in (UNREACHABLE, NO_RETURN)}
    _fault(paths, UNREACHABLE, UNREACHABLE_FAULT)
    _fault(paths, NO_RETURN, NO_RETURN_FAULT)
    run = run_playbook(paths.lab_dir, inventory, "playbooks/host.yml", *FAST, timeout=600)
    return run, before


def test_the_run_converges_the_rest_and_names_the_two(
    fleet: tuple[LabPaths, Path], failed: tuple[PlaybookRun, dict[str, object]]
) -> None:
    paths, _ = fleet
    run, _ = failed
    out = run.output
    assert run.rc != 0, "a fleet with failed nodes does not end green"
    hosts = run.hosts
    assert hosts[UNREACHABLE].unreachable == 1, out[-4000:]
    assert hosts[UNREACHABLE].changed == 0
    assert hosts[NO_RETURN].failed == 1, out[-4000:]
    assert (hosts[HEALTHY].failed, hosts[HEALTHY].unreachable) == (0, 0), out[-4000:]
    # The healthy node went all the way: driver loaded, its container's card released.
    version, drivers = _facts(paths, HEALTHY)
    assert version is not None
    assert "nvidia" in drivers, drivers
    # The two named: each failure says which node and why, and the closing play both.
    assert f"specops.lab.node: {UNREACHABLE} is unreachable (lab fault" in out
    assert f"{NO_RETURN} did not come back within nvidia_driver_reboot_timeout" in out
    named = re.search(r"Not converged: (\S+), (\S+) \(failed or unreachable", out)
    assert named, out[-3000:]
    assert {named[1], named[2]} == {UNREACHABLE, NO_RETURN}
    assert f"--limit {named[1]},{named[2]}" in out


def test_the_two_are_left_unchanged_past_their_failure(
    fleet: tuple[LabPaths, Path], failed: tuple[PlaybookRun, dict[str, object]]
) -> None:
    paths, _ = fleet
    _, before = failed
    # Unreachable: nothing ran there. No return: down after its reboot, no driver installed.
    assert _facts(paths, UNREACHABLE) == before[UNREACHABLE]
    assert not (paths.node_root(NO_RETURN) / "proc/sys/kernel/random/boot_id").exists()
    assert not (paths.node_root(NO_RETURN) / "var/lib/nvidia").exists()


def test_a_run_limited_to_the_two_completes_the_fleet(
    fleet: tuple[LabPaths, Path], failed: tuple[PlaybookRun, dict[str, object]]
) -> None:
    paths, inventory = fleet
    # Both come back: the network returns; the dead node is booted (console, BMC).
    (paths.node_root(UNREACHABLE) / UNREACHABLE_FAULT).unlink()
    (paths.node_root(NO_RETURN) / NO_RETURN_FAULT).unlink()
    boot(paths.node_root(NO_RETURN), say=lambda _msg: None)
    run = run_playbook(
        paths.lab_dir, inventory, "playbooks/host.yml", "--limit", f"{UNREACHABLE},{NO_RETURN}",
        *FAST, timeout=600,
    )  # fmt: skip
    assert run.rc == 0, run.output[-6000:]
    assert set(run.hosts) == {UNREACHABLE, NO_RETURN}
    for node in (UNREACHABLE, NO_RETURN, HEALTHY):
        version, _ = _facts(paths, node)
        assert version is not None, node
    assert "Not converged" not in run.output
