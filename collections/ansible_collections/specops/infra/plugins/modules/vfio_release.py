#!/usr/bin/python
"""Ansible module vfio_release: give NVIDIA cards held by vfio-pci back to the host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vfio_release
short_description: Release NVIDIA cards from vfio-pci to the host's nvidia driver
description:
  - Reads the host's GPU facts (the same code as M(specops.infra.gpu_facts)), decides
    which cards and which of their PCI functions to move, and refuses before writing
    anything when the request cannot be met; the message lists every card and the VM
    that holds it.
  - Which cards O(model) means and which are free is module_utils C(gpu_select)'s one
    rule (shared with M(specops.infra.lxc_gpu_config) and the migration preflight). A
    card a running VM holds (C(hostpciN) host= or mapping=, C(args:) C(-device
    vfio-pci,host=)) or whose vfio device any process has open is never unbound. A card
    assigned to a stopped VM is taken only with O(allow_stopped_vm_cards), and then
    under PVE's lock of that VM (C(/var/lock/qemu-server/lock-<vmid>.conf), the lock
    C(qm start) takes), with the decision made again from fresh facts once it is held.
  - Per card, every function of the card (and nothing else of its IOMMU group) is
    unbound from vfio-pci, its C(driver_override) set (C(nvidia) for the GPU, the
    companion's host driver or none for the audio/USB functions), probed, and the new
    binding verified. On any failure every function touched in the run is restored to
    its previous binding and the module fails.
  - Also computes the boot-time configuration (returned as C(boot_config); the role
    writes it) that keeps the cards VMs still use on vfio-pci by address and removes the
    released cards' IDs from C(options vfio-pci ids=) lines and C(vfio-pci.ids=).
  - Check mode reports the plan and writes nothing.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode no card is moved; the result lists the functions it would move.
  diff_mode:
    support: none
options:
  addresses:
    description: Cards to release, by PCI address (C(0000:01:00.0), C(0000:01:00) or C(01:00)).
    type: list
    elements: str
    default: []
  model:
    description:
      - Release cards of this model until O(count) are the host's. The exact product name
        as the GPU facts report it (C(NVIDIA RTX A6000)) or the PCI ID (C(10de:2230)); a
        part of a name (C(A6000)) is refused, naming the cards that would match.
    type: str
  count:
    description: How many cards of O(model) the host should have.
    type: int
  allow_stopped_vm_cards:
    description: Take cards assigned (C(hostpciN)) to VMs that are stopped.
    type: bool
    default: false
  root:
    description: File system root of the host whose sysfs, procfs, /etc/pve and /run are read and written (a simulated tree in tests).
    type: path
    default: /
  system_root:
    description:
      - Root the host's system files are read under (O(modprobe_dir), O(grub_file),
        O(kernel_cmdline_file), the override hook); a lab node's directory in the lab.
      - The returned C(boot_config) names them as the host sees them (without this root).
    type: path
    default: /
  modprobe_dir:
    description: Directory of modprobe configuration files to clean of the released IDs.
    type: path
    default: /etc/modprobe.d
  grub_file:
    description: GRUB defaults file.
    type: path
    default: /etc/default/grub
  kernel_cmdline_file:
    description: systemd-boot kernel command line (proxmox-boot-tool).
    type: path
    default: /etc/kernel/cmdline
  timeout:
    description: Seconds to wait for each unbind and probe to take effect.
    type: float
    default: 10
notes:
  - Writes only sysfs. The boot configuration is returned, not written.
"""

EXAMPLES = r"""
- name: Give the two A6000s at 01:00 and 02:00 to the host.
  specops.infra.vfio_release:
    addresses: ["0000:01:00.0", "0000:02:00.0"]

- name: Make sure the host has two RTX A6000.
  specops.infra.vfio_release:
    model: NVIDIA RTX A6000
    count: 2
"""

RETURN = r"""
released:
  description: One entry per function moved (or, in check mode, to be moved).
  returned: always
  type: list
  elements: dict
  sample: [{address: "0000:01:00.0", card: "0000:01:00.0", kind: gpu, from_driver: vfio-pci, to_driver: nvidia, driver_override: nvidia}]
plan:
  description: >-
    The decision (cards to release with their steps, cards already on the host, functions kept
    on vfio-pci, released IDs, one line per card on the host, warnings).
  returned: always
  type: dict
boot_config:
  description: Files to write (path -> content), files to remove, and boot tools to run (initramfs, grub, proxmox-boot-tool).
  returned: always
  type: dict
boot_loader:
  description: The node's boot loader (grub or systemd-boot), from the GPU facts.
  returned: always
  type: str
"""

import glob
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    GpuFactsError,
    HostRoots,
    gather_facts,
)
from ansible_collections.specops.infra.plugins.module_utils.vfio import (
    GPU_DRIVER,
    OVERRIDE_SCRIPT,
    FileSysfs,
    VfioReleaseError,
    available_pci_drivers,
    boot_config,
    parse_request,
    plan_release,
    release_locked,
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def run(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    request = parse_request(
        addresses=params["addresses"],
        model=params["model"],
        count=params["count"],
        allow_stopped_vm_cards=params["allow_stopped_vm_cards"],
    )
    roots = HostRoots.under(params["root"])
    facts = gather_facts(roots)
    drivers = available_pci_drivers(roots.sys)
    notes: list[str] = []
    if check_mode and GPU_DRIVER not in drivers:
        # A check run of a fresh host: the driver role before this one has only planned
        # the nvidia module; plan as the real run will find the host, and say so.
        drivers = {*drivers, GPU_DRIVER}
        notes.append(
            "the nvidia driver is not loaded yet: planned as after the driver's install "
            "(a real run installs it first, role nvidia_driver)"
        )
    plan = plan_release(facts, request, drivers)

    sysroot = params.get("system_root") or "/"

    def on_host(path: str) -> str:
        return os.path.join(sysroot, path.lstrip("/"))

    conf_file = os.path.join(params["modprobe_dir"], "specops-vfio.conf")
    modprobe_files = sorted(
        "/" + os.path.relpath(p, sysroot)
        for p in glob.glob(os.path.join(on_host(params["modprobe_dir"]), "*.conf"))
    )
    paths = [*modprobe_files, conf_file, OVERRIDE_SCRIPT, params["grub_file"]]
    paths.append(params["kernel_cmdline_file"])
    current = {p: _read(on_host(p)) for p in paths}
    boot = boot_config(
        plan,
        current=current,
        loader=facts.boot.loader,
        modprobe_files=modprobe_files,
        grub_file=params["grub_file"],
        kernel_cmdline_file=params["kernel_cmdline_file"],
        conf_file=conf_file,
    )

    if check_mode:
        released = [
            {
                "address": s.address,
                "card": c.address,
                "kind": s.kind,
                "from_driver": s.current_driver,
                "to_driver": s.expect_driver,
                "driver_override": s.new_override,
            }
            for c in plan.release
            for s in c.steps
        ]
    else:
        # Cards a stopped VM keeps are released under that VM's PVE lock, decided again
        # from fresh facts once the lock is held (the VM cannot start in between).
        plan, released = release_locked(
            roots.root,
            plan,
            lambda: plan_release(gather_facts(roots), request, drivers),
            FileSysfs(roots.sys),
            timeout=params["timeout"],
        )
    return {
        "changed": bool(plan.release),
        "released": released,
        "plan": plan.to_dict(),
        "boot_config": boot.to_dict(),
        "boot_loader": facts.boot.loader,
        "warnings_text": notes + list(plan.warnings) + list(facts.warnings),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "addresses": {"type": "list", "elements": "str", "default": []},
            "model": {"type": "str"},
            "count": {"type": "int"},
            "allow_stopped_vm_cards": {"type": "bool", "default": False},
            "root": {"type": "path", "default": "/"},
            "system_root": {"type": "path", "default": "/"},
            "modprobe_dir": {"type": "path", "default": "/etc/modprobe.d"},
            "grub_file": {"type": "path", "default": "/etc/default/grub"},
            "kernel_cmdline_file": {"type": "path", "default": "/etc/kernel/cmdline"},
            "timeout": {"type": "float", "default": 10.0},
        },
        mutually_exclusive=[("addresses", "model")],
        required_together=[("model", "count")],
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except (VfioReleaseError, GpuFactsError) as exc:
        module.fail_json(msg=str(exc))
    for warning in result.pop("warnings_text"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
