#!/usr/bin/python
"""Ansible module gpu_doctor_node: a PVE node's evidence of its containers' GPU path."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_doctor_node
short_description: Read what a Proxmox VE node says about its containers' GPU path (GPU doctor)
description:
  - For each container I(vmids), returns the node's GPU facts that matter to it (module
    version, char majors of /proc/devices, device nodes, each card's driver, Device
    Minor and holder VM), the GPU lines of C(/etc/pve/lxc/<vmid>.conf) (every device
    allow and deny line with its key, the C(lxc.mount.entry) and C(devN) entries of
    C(/dev/nvidia*)), whether it runs (C(pct status)), and the device paths to look
    at inside it.
  - Returns C(ansible_facts.specops_gpu_doctor_node) keyed by vmid (as a string);
    the C(gpu_doctor_container) and C(gpu_doctor) modules read it.
  - Read-only (C(pct status) is the only command); check mode is the same run.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - It changes nothing; check mode is the same run.
  diff_mode:
    support: N/A
    details:
      - It changes nothing.
options:
  vmids:
    description: Containers of this node to read.
    type: list
    elements: int
    required: true
  root:
    description: Root the node's files (C(/etc/pve), sysfs, procfs, C(/dev)) are read under.
    type: path
    default: /
  pct_command:
    description: The pct command as an argv list; empty skips the status check.
    type: list
    elements: str
    default: [pct]
"""

EXAMPLES = r"""
- name: Read the node's evidence of CT 801 and 802.
  specops.infra.gpu_doctor_node:
    vmids: [801, 802]
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the node.
  returned: always
  type: dict
  contains:
    specops_gpu_doctor_node:
      description: vmid (string) -> evidence (schema, vmid, running, host, conf, paths).
      type: dict
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    GpuFactsError,
    HostRoots,
    gather_facts,
    parse_proc_devices,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    node_evidence,
)


def _read(path: str) -> str | None:
    try:
        with open(path, newline="") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def ct_running(pct: Sequence[str], vmid: int) -> bool | None:
    """``pct status`` says running (True) or not (False); None when it cannot tell."""
    if not pct:
        return None
    try:
        proc = subprocess.run(
            [*pct, "status", str(vmid)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return "status: running" in proc.stdout


def gather(params: dict[str, Any]) -> dict[str, Any]:
    """The module's work as a plain function (pytest calls it directly)."""
    root = params["root"]
    facts = gather_facts(HostRoots.under(root)).to_dict()
    names = parse_proc_devices(_read(os.path.join(root, "proc/devices")) or "")
    char_devices = {major: name for name, major in names.items()}
    out: dict[str, Any] = {}
    for vmid in params["vmids"]:
        text = _read(os.path.join(root, f"etc/pve/lxc/{vmid}.conf"))
        running = ct_running(params["pct_command"], vmid) if text is not None else None
        out[str(vmid)] = node_evidence(
            facts, vmid, text, running=running, char_devices=char_devices
        )
    return out


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "vmids": {"type": "list", "elements": "int", "required": True},
            "root": {"type": "path", "default": "/"},
            "pct_command": {"type": "list", "elements": "str", "default": ["pct"]},
        },
        supports_check_mode=True,
    )
    bad = [v for v in module.params["vmids"] if not 100 <= v <= 999999999]
    if bad:
        module.fail_json(msg=f"vmids: {bad} are not container ids (100-999999999)")
    try:
        evidence = gather(module.params)
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"specops_gpu_doctor_node": evidence})


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
