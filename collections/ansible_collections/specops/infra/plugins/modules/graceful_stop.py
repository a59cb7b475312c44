#!/usr/bin/python
"""Ansible module: stop an inference unit and wait until its GPU memory is released."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: graceful_stop
short_description: Stop an inference unit with systemd and wait for its GPU memory
description:
  - Records the unit's main process and its descendants, runs C(systemctl stop) on the
    unit, then waits until none of those processes is alive and, where C(nvidia-smi)
    exists, none is listed among the GPU compute apps (its memory is released).
  - Never signals processes itself (no killing by device file or by name). systemd stops the
    unit as its C(KillMode) and C(TimeoutStopSec) say; this module only watches.
  - Fails when the processes or their GPU memory outlive I(timeout).
  - An inactive or unknown unit is left as it is (C(changed=false)).
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it reports whether it would stop the unit.
  diff_mode:
    support: none
options:
  unit:
    description: The systemd unit to stop.
    type: str
    required: true
  timeout:
    description: Seconds to wait after C(systemctl stop) returns.
    type: int
    default: 300
  nvidia_smi:
    description: Path of nvidia-smi; default looks it up on PATH (absent in the lab, where the wait is for process exit only).
    type: path
notes:
  - Supports check mode (reports whether it would stop the unit).
"""

EXAMPLES = r"""
- name: Ensure the old server is stopped and its GPU memory released.
  specops.infra.graceful_stop:
    unit: specops-qwen3.6-27b.service
    timeout: 300
"""

RETURN = r"""
pids:
  description: The unit's processes when the stop began.
  returned: always
  type: list
  elements: int
seconds:
  description: Seconds from the stop to release.
  returned: always
  type: float
gpu_checked:
  description: Whether nvidia-smi was consulted.
  returned: always
  type: bool
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.service_stop import stop_unit


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 300},
            "nvidia_smi": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    try:
        result = stop_unit(
            p["unit"],
            timeout=p["timeout"],
            check_mode=module.check_mode,
            nvidia_smi=p["nvidia_smi"],
        )
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=result.changed,
        pids=result.pids,
        seconds=round(result.seconds, 2),
        gpu_checked=result.gpu_checked,
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
