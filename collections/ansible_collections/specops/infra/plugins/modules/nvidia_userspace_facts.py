#!/usr/bin/python
"""Ansible module nvidia_userspace_facts: the NVIDIA userspace driver inside a container."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_userspace_facts
short_description: Read (and optionally verify) the NVIDIA userspace driver of a container
description:
  - Returns C(ansible_facts.specops_nvidia_userspace) - the libnvidia-ml version(s)
    installed (the C(libnvidia-ml.so.1) soname target first), how they were installed
    (C(run), C(packages) with the owning package names, C(unknown), C(none)), whether
    C(nvidia-smi) is there, and the kernel module version the container sees.
  - With I(run_nvidia_smi) it also asks NVML through
    C(nvidia-smi --query-gpu=driver_version --format=csv,noheader); with
    I(expect_version) it fails, naming the userspace and the host module versions, when
    they differ, when other versions are left over, or when NVML answers
    "Driver/library version mismatch".
  - Read-only; check mode is the same run.
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
    description: Root the container's files are read under.
    type: path
    default: /
  kernel_root:
    description: Root under which C(/sys/module/nvidia/version) and C(/proc/driver/nvidia/version) are read.
    type: path
    default: /
  run_nvidia_smi:
    description: Ask NVML through nvidia-smi.
    type: bool
    default: false
  expect_version:
    description: The host's kernel module version; fail when the userspace does not serve it.
    type: str
"""

EXAMPLES = r"""
- name: Read the container's NVIDIA userspace.
  specops.infra.nvidia_userspace_facts:

- name: Verify it serves the host's module.
  specops.infra.nvidia_userspace_facts:
    run_nvidia_smi: true
    expect_version: 580.126.09
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    specops_nvidia_userspace:
      description: The container's NVIDIA userspace.
      returned: always
      type: dict
      contains:
        version: {description: "Userspace version (soname target, else the only one found); null if none.", type: str, sample: 580.126.09}
        versions: {description: "Every libnvidia-ml.so.<version> found.", type: list, elements: str}
        libraries: {description: "Their paths.", type: list, elements: str}
        soname_target: {description: "Target of libnvidia-ml.so.1.", type: str}
        installer: {description: "run, packages, unknown or none.", type: str}
        packages: {description: "dpkg packages owning the libraries.", type: list, elements: str}
        nvidia_smi: {description: "Path of nvidia-smi, null if absent.", type: str}
        kernel_module_version: {description: "nvidia module version visible to the container; null if not visible.", type: str}
        nvml:
          description: With run_nvidia_smi, NVML's answer (ok, mismatch, driver_version, library_version, message).
          type: dict
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from dataclasses import asdict
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.nvidia_userspace import (
    NvmlAnswer,
    classify_nvidia_smi,
    read_state,
    valid_version,
    verify,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "kernel_root": {"type": "path", "default": "/"},
            "run_nvidia_smi": {"type": "bool", "default": False},
            "expect_version": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    expected = params.get("expect_version")
    if expected is not None and not valid_version(expected):
        module.fail_json(
            msg=f"expect_version: {expected!r} is not a driver version like 580.126.09"
        )
    state = read_state(params["root"], params["kernel_root"])
    facts: dict[str, Any] = state.to_dict()
    nvml: NvmlAnswer | None = None
    if params["run_nvidia_smi"]:
        if state.nvidia_smi is None:
            nvml = NvmlAnswer(False, False, None, None, "nvidia-smi is not installed")
        else:
            rc, out, err = module.run_command(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            )
            nvml = classify_nvidia_smi(rc, out + err)
        facts["nvml"] = asdict(nvml)
    result: dict[str, Any] = {
        "changed": False,
        "ansible_facts": {"specops_nvidia_userspace": facts},
    }
    if expected is not None:
        problems = verify(state, nvml, expected)
        if problems:
            module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
