"""A lab fleet of N PVE nodes: hardware descriptions and an inventory of the example's shape.

``specops lab up --nodes N`` brings up N simulated PVE nodes in the one PVE stand-in
cluster instead of the two of ``inventory/lab/hardware``. The nodes take a few realistic
shapes, in this order, cycling from the third node on:

=========  ==============================================================================
``pro4``   ``pve-b``: 4 RTX PRO 6000 Blackwell, the fourth held by a running VM
``kpro5``  ``pve-a``: 3 RTX A6000 (one kept by a stopped VM) beside 2 RTX 3090 held by
           running VMs (the kpro5 mix)
``pro8``   8 RTX PRO 6000 Blackwell, no VM
``nofree`` 2 RTX 3090, both held by running VMs: no card free for a container
=========  ==============================================================================

Every node starts in the hard real state (nouveau loaded, no NVIDIA driver, every card on
vfio-pci). Node 1 is ``pve-b`` and node 2 ``pve-a``, the lab's own nodes with their
descriptions unchanged, so that the lab's serving container (``lab-ct801`` on ``pve-b``)
stays where it is; the other nodes (``pve-03`` ...) host no container.

:func:`write_fleet` writes, under ``<lab dir>/fleet/``:

- ``hardware/<node>.yml``: each node's description (the shape's, under the node's name);
- ``inventory/``: ``hosts.yml`` (groups ``pve_nodes`` and ``serving``), ``group_vars/``
  linking the example's files and the lab's overlay of each group (as ``inventory/lab``
  does) but the example's ``batching.yml``: the fleet's own batches are written there,
  ``host_vars`` linking the lab's, and one more overlay per group with the paths of THIS
  lab directory (``overlay-fleet.yml``: the node roots, the pct stand-in, the API's CA),
  which ``inventory/lab`` spells for the default lab directory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specops.errors import ValidationError

__all__ = ["MAX_NODES", "SHAPES", "FleetFiles", "fleet_plan", "write_fleet"]

REPO_ROOT = Path(__file__).resolve().parents[3]
HARDWARE = REPO_ROOT / "inventory" / "lab" / "hardware"
# Shape name -> its description (the lab's two nodes are shapes too).
SHAPES: dict[str, Path] = {
    "pro4": HARDWARE / "pve-b.yml",
    "kpro5": HARDWARE / "pve-a.yml",
    "pro8": HARDWARE / "shapes" / "pro8.yml",
    "nofree": HARDWARE / "shapes" / "nofree.yml",
}
# The first nodes are the lab's own, under their names (the serving container's node first).
_FIXED = (("pve-b", "pro4"), ("pve-a", "kpro5"))
_CYCLE = ("pro8", "nofree", "kpro5", "pro4")
MAX_NODES = 99
_GROUPS = ("all", "pve_nodes", "serving")
OVERLAY = "overlay-fleet.yml"  # sorts after lab.yml: loaded last, so it wins
BATCHING = "batching.yml"  # playbooks/host.yml reads this one file for its batches


@dataclass(frozen=True)
class FleetFiles:
    """Where :func:`write_fleet` put the fleet's descriptions and inventory."""

    hardware_dir: Path
    inventory_dir: Path
    nodes: dict[str, str]  # node -> shape


def fleet_plan(n: int) -> dict[str, str]:
    """The fleet's nodes in order, each with its shape."""
    if not 1 <= n <= MAX_NODES:
        raise ValidationError("--nodes", f"{n} is not a fleet size (valid: 1 to {MAX_NODES})")
    plan = dict(_FIXED[: min(n, len(_FIXED))])
    for i in range(len(_FIXED), n):
        plan[f"pve-{i + 1:02d}"] = _CYCLE[(i - len(_FIXED)) % len(_CYCLE)]
    return plan


def _description(shape: str, node: str) -> tuple[str, dict[str, Any]]:
    """The shape's description under the node's name (its mappings' node entries too)."""
    source = SHAPES[shape]
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    old = data["node"]
    data["node"] = node
    for mapping in (data.get("mappings") or {}).values():
        for entry in mapping.get("map") or []:
            if entry.get("node") == old:
                entry["node"] = node
    rel = source.relative_to(REPO_ROOT)
    header = f"# Fleet node {node}: shape {shape} ({rel}), written by specops_lab.fleet.\n"
    return header, data


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _overlays(lab_dir: Path) -> dict[str, dict[str, Any]]:
    """Per group, the lab inventory's values that name the default lab directory or the
    inventory's own place, for this lab directory and this repository."""
    ca = str(lab_dir / "cluster" / "pki" / "pve-ssl.pem")
    return {
        "all": {
            "migrate_api_ca_file": ca,
            "migrate_api_token_secret_file": str(lab_dir / "secrets" / "pve-api-token-secret"),
        },
        "pve_nodes": {
            "specops_host_root": f"{lab_dir}/{{{{ inventory_hostname }}}}",
            "lxc_gpu_passthrough_pct_command": [
                str(REPO_ROOT / "scripts" / "lab" / "pct"),
                "--node-root",
                "{{ specops_host_root }}",
            ],
        },
        "serving": {"pve_container_api_ca_file": ca},
    }


def write_fleet(
    lab_dir: Path, n: int, *, batch: str | int = 1, max_fail_percentage: int = 0
) -> FleetFiles:
    """Write the N nodes' descriptions and the fleet's inventory (idempotent; a node
    dropped from the fleet loses its description). ``batch`` and
    ``max_fail_percentage``: the inventory's ``group_vars/pve_nodes/batching.yml``
    (``specops_host_batch``, ``specops_host_max_fail_percentage``)."""
    plan = fleet_plan(n)
    base = lab_dir / "fleet"
    hardware_dir = base / "hardware"
    inventory_dir = base / "inventory"
    hardware_dir.mkdir(parents=True, exist_ok=True)
    for stale in hardware_dir.glob("*.yml"):
        if stale.stem not in plan:
            stale.unlink()
    for node, shape in plan.items():
        header, data = _description(shape, node)
        text = header + "---\n" + yaml.safe_dump(data, sort_keys=False, width=100)
        _write_if_changed(hardware_dir / f"{node}.yml", text)

    inventory_dir.mkdir(parents=True, exist_ok=True)
    hosts = {
        "all": {
            "children": {
                "pve_nodes": {"hosts": dict.fromkeys(plan)},
                "serving": {"hosts": dict.fromkeys(_serving_hosts())},
                "routers": {"hosts": {}},
            }
        }
    }
    _write_if_changed(
        inventory_dir / "hosts.yml",
        "# The lab fleet (specops_lab.fleet): N simulated PVE nodes; written by\n"
        "# `specops lab up --nodes N`, do not edit.\n---\n"
        + yaml.safe_dump(hosts, sort_keys=False),
    )
    lab_inv = REPO_ROOT / "inventory" / "lab"
    example = REPO_ROOT / "inventory" / "example"
    for group, values in _overlays(lab_dir).items():
        gdir = inventory_dir / "group_vars" / group
        gdir.mkdir(parents=True, exist_ok=True)
        if (gdir / "example").is_symlink():
            (gdir / "example").unlink()
        # The example's files one by one (the fleet writes its own batching.yml).
        for source in sorted((example / "group_vars" / group).glob("*.yml")):
            if not (group == "pve_nodes" and source.name == BATCHING):
                _link(gdir / f"example-{source.name}", source)
        _link(gdir / "lab.yml", lab_inv / "group_vars" / group / "lab.yml")
        _write_if_changed(
            gdir / OVERLAY,
            "# This lab directory's paths (specops_lab.fleet), over lab.yml's defaults.\n---\n"
            + yaml.safe_dump(values, sort_keys=False, width=100),
        )
    batching = {
        "specops_host_batch": batch,
        "specops_host_max_fail_percentage": max_fail_percentage,
    }
    _write_if_changed(
        inventory_dir / "group_vars" / "pve_nodes" / BATCHING,
        "# The fleet's batches (inventory/example/group_vars/pve_nodes/batching.yml).\n---\n"
        + yaml.safe_dump(batching, sort_keys=False),
    )
    host_vars = inventory_dir / "host_vars"
    if host_vars.is_dir() and not host_vars.is_symlink():
        shutil.rmtree(host_vars)
    _link(host_vars, lab_inv / "host_vars")
    return FleetFiles(hardware_dir, inventory_dir, plan)


def _serving_hosts() -> list[str]:
    """The lab's serving containers (``inventory/lab/hosts.yml``), as they are."""
    data = yaml.safe_load((REPO_ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    serving = data["all"]["children"]["serving"]["hosts"] or {}
    return list(serving)
