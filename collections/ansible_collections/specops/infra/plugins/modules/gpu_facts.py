#!/usr/bin/python
"""Ansible module gpu_facts: a PVE host's GPU facts as ansible_facts.specops_gpu."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read a Proxmox VE host's GPU facts (PCI functions, driver, majors, VM holders)
description:
  - Reads sysfs, procfs, C(/dev) and C(/etc/pve) and returns C(ansible_facts.specops_gpu),
    the contract every specops host role reads (see the collection README, "GPU facts").
  - Read-only. Runs no command (no lspci, qm or pveversion); check mode is the same run.
  - Each root can be pointed at a simulated or recorded host tree for tests.
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
  root:
    description: File system root; every other root defaults to a path under it.
    type: path
    default: /
  sys_root:
    description: Where sysfs is (default C(<root>/sys)).
    type: path
  proc_root:
    description: Where procfs is (default C(<root>/proc)).
    type: path
  etc_pve_root:
    description: Where the PVE cluster file system is (default C(<root>/etc/pve)).
    type: path
  dev_root:
    description: Where device nodes are (default C(<root>/dev)).
    type: path
  etc_root:
    description: Where /etc is (default C(<root>/etc)); boot loader files, hostname.
    type: path
  run_root:
    description: Where /run is (default C(<root>/run)); C(qemu-server/<vmid>.pid) files.
    type: path
  usr_share_root:
    description: Where /usr/share is (default C(<root>/usr/share)); C(perl5/PVE/pvecfg.pm).
    type: path
  var_lib_root:
    description: Where /var/lib is (default C(<root>/var/lib)); C(dpkg/status) fallback.
    type: path
  node:
    description:
      - This node's name in C(/etc/pve/mapping/pci.cfg) C(map) entries.
      - Default the kernel hostname read under I(proc_root).
    type: str
  running_vmids:
    description:
      - When set, the VMs that run (instead of reading C(<run_root>/qemu-server/<vmid>.pid)
        and the process it names). For stand-ins whose VMs are not processes.
    type: list
    elements: int
notes:
  - A VM holds a card when a C(hostpciN) line of its current config (not a snapshot or
    pending section) names one of the card's functions by C(host=) (no function = all
    functions) or through a C(mapping=) entry for this node. A mapping with several
    paths marks every candidate as held (exclusive false) since PVE picks one at VM start.
  - VM configs are read as PVE reads them (qemu-server C(parse_vm_config) and the
    C(hostpci) property-string format; module_utils C(gpu.parse_vm_config)), e.g.
    C(01:00.0,), C(pcie=1,01:00.0) and C(01:00.0,,pcie=1) are valid, and only a
    whole-line C([section]) header ends the current config.
  - Stricter than PVE on purpose, in doubt a card counts as held. A line PVE does not
    use although it looks like a hostpci entry (an upper-case id, an unknown option,
    C(hostpci16)) and a template's entries still count, with a warning. A line naming a
    device that cannot be read at all (C(host=zz)) fails the module with the file and
    line.
  - A card is free when no running VM holds it.
"""

EXAMPLES = r"""
- name: Read the GPU facts of the PVE node.
  specops.infra.gpu_facts:

- name: Read them from a lab host tree.
  specops.infra.gpu_facts:
    root: /var/lib/specops/lab/pve-a

- name: Show the free cards.
  ansible.builtin.debug:
    msg: "{{ ansible_facts.specops_gpu.gpus | selectattr('free') | map(attribute='address') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    specops_gpu:
      description: GPU facts of the host (schema_version 1).
      returned: always
      type: dict
      contains:
        schema_version: {description: "Version of this shape; bumped on breaking changes.", type: int, sample: 1}
        node: {description: "Node name (kernel hostname).", type: str, sample: pve-a}
        kernel_release: {description: "Running kernel (proc/sys/kernel/osrelease).", type: str, sample: 6.8.12-4-pve}
        pve_version: {description: "pve-manager version from PVE/pvecfg.pm or dpkg status; null off PVE.", type: str, sample: 8.3.0}
        pve_release: {description: "PVE major.minor release.", type: str, sample: "8.3"}
        boot:
          description: Boot loader and where the kernel command line lives.
          type: dict
          contains:
            loader: {description: "grub or systemd-boot.", type: str, sample: systemd-boot}
            efi: {description: "Booted by UEFI (sys/firmware/efi).", type: bool}
            secure_boot: {description: "Secure Boot state; null when not EFI or unreadable.", type: bool}
            proxmox_boot_tool: {description: "/etc/kernel/proxmox-boot-uuids lists ESPs.", type: bool}
            cmdline_file: {description: "File that holds the kernel command line (/etc/kernel/cmdline or /etc/default/grub).", type: str}
            evidence: {description: "What the choice was made from.", type: list, elements: str}
        cgroup:
          description: cgroup hierarchy.
          type: dict
          contains:
            version: {description: "2 (unified) or 1 (v1/hybrid: the v1 device key is enforced); null if unknown.", type: int}
            hybrid: {description: "v1 with a cgroup2 mount beside it.", type: bool}
            source: {description: "proc/mounts or the sysfs file read.", type: str}
        iommu_enabled: {description: "sys/kernel/iommu_groups has groups.", type: bool}
        nvidia_module:
          description: The NVIDIA kernel module.
          type: dict
          contains:
            loaded: {description: "sys/module/nvidia or proc/driver/nvidia/version present.", type: bool}
            version: {description: "Module version (sys/module/nvidia/version, else proc/driver/nvidia/version).", type: str, sample: 580.126.09}
            flavour: {description: "open or proprietary (from the NVRM version line); null if not loaded.", type: str, sample: open}
            version_source: {description: "Which file gave the version.", type: str}
            version_text: {description: "First line of proc/driver/nvidia/version.", type: str}
        nouveau_loaded: {description: "sys/module/nouveau present.", type: bool}
        modules_loaded: {description: "nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm, nouveau, vfio, vfio_pci, vfio_iommu_type1 -> loaded.", type: dict}
        char_majors:
          description: "Every nvidia* character device name in proc/devices -> major."
          type: dict
          sample: {nvidia: 195, nvidiactl: 195, nvidia-uvm: 508, nvidia-caps: 507}
        uvm_major: {description: "Major of nvidia-uvm (dynamic, per host); null when not loaded.", type: int, sample: 508}
        caps_major: {description: "Major of nvidia-caps; null when absent.", type: int}
        device_nodes:
          description: Char nodes /dev/nvidia* and /dev/nvidia-caps/* that exist.
          type: list
          elements: dict
          contains:
            path: {description: "Path as on the host.", type: str, sample: /dev/nvidia-uvm}
            major: {description: "Major.", type: int}
            minor: {description: "Minor.", type: int}
        gpus:
          description: One entry per NVIDIA card (PCI slot with a VGA 0x0300xx or 3D 0x0302xx function), by address.
          type: list
          elements: dict
          contains:
            address: {description: "Display function address.", type: str, sample: "0000:01:00.0"}
            slot: {description: "Domain:bus:device.", type: str, sample: "0000:01:00"}
            pci_id: {description: "vendor:device.", type: str, sample: "10de:2230"}
            subsystem_id: {description: "Subsystem vendor:device.", type: str}
            name: {description: "Product name (table, else \"NVIDIA GPU 10de:XXXX\").", type: str, sample: NVIDIA RTX A6000}
            architecture: {description: "ampere, hopper, blackwell or unknown.", type: str}
            open_module_required: {description: "Only the open NVIDIA kernel modules drive it (GPU catalogue).", type: bool}
            class_code: {description: "PCI class.", type: str, sample: "0x030000"}
            class_kind: {description: "vga or 3d.", type: str}
            driver: {description: "Bound driver (nvidia, vfio-pci, nouveau) or null.", type: str}
            driver_override: {description: "driver_override, null when unset (\"(null)\").", type: str}
            iommu_group: {description: "IOMMU group, null without IOMMU.", type: int}
            iommu_group_members: {description: "Every function in that group.", type: list, elements: str}
            iommu_group_foreign: {description: "Group members that are not this card's functions.", type: list, elements: str}
            functions:
              description: >-
                All functions of the card, display function first (address, pci_id, vendor_id,
                device_id, subsystem_id, class_code, class_kind, driver, driver_override, iommu_group).
              type: list
              elements: dict
            nvidia:
              description: When bound to nvidia, minor (Device Minor, the N of /dev/nvidiaN), model, uuid, bus_location, device_node (when present); else null.
              type: dict
            holders:
              description: >-
                VMs whose current config names the card (vmid, running, config, key hostpciN or args,
                line, via host|mapping|args, mapping, functions, exclusive).
              type: list
              elements: dict
            open_by:
              description: >-
                Processes with the card's vfio device open, from /proc/*/fd (pid, command, vmid of a
                PVE VM's QEMU or null, path /dev/vfio/GROUP, noiommu-GROUP or devices/vfioN); read
                only when a function is on vfio-pci.
              type: list
              elements: dict
            held_by_running_vm: {description: "vmid of a running holder (else of a QEMU with its vfio group open), else null.", type: int}
            free: {description: "No running VM holds the card and no process has its vfio device open.", type: bool}
        other_display:
          description: Display functions of other vendors (e.g. a BMC's VGA), same keys as gpus[].functions[].
          type: list
          elements: dict
        warnings: {description: "Things worth a look (mapping missing, hostpci naming an absent device).", type: list, elements: str}
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.gpu import (
    GpuFactsError,
    HostRoots,
    gather_facts,
)


def _roots(params: dict[str, Any]) -> HostRoots:
    return HostRoots(
        root=params["root"],
        sys=params.get("sys_root") or "",
        proc=params.get("proc_root") or "",
        etc_pve=params.get("etc_pve_root") or "",
        dev=params.get("dev_root") or "",
        etc=params.get("etc_root") or "",
        run=params.get("run_root") or "",
        usr_share=params.get("usr_share_root") or "",
        var_lib=params.get("var_lib_root") or "",
    )


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "sys_root": {"type": "path"},
            "proc_root": {"type": "path"},
            "etc_pve_root": {"type": "path"},
            "dev_root": {"type": "path"},
            "etc_root": {"type": "path"},
            "run_root": {"type": "path"},
            "usr_share_root": {"type": "path"},
            "var_lib_root": {"type": "path"},
            "node": {"type": "str"},
            "running_vmids": {"type": "list", "elements": "int"},
        },
        supports_check_mode=True,
    )
    params = module.params
    running = params.get("running_vmids")
    check = None if running is None else (lambda vmid: vmid in set(running))
    try:
        facts = gather_facts(_roots(params), node=params.get("node"), vm_running=check)
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc))
    data = facts.to_dict()
    for warning in facts.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"specops_gpu": data})


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
