#!/usr/bin/python
"""Ansible module gpu_doctor: findings from the evidence of containers' GPU paths."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_doctor
short_description: Diagnose serving containers' GPU paths from their evidence (GPU doctor)
description:
  - Turns each container's record (its node's evidence from C(gpu_doctor_node), its own
    from C(gpu_doctor_container), what the inventory wants) into findings, each with
    the cause in one line and the fix (the variable or playbook that corrects it), and
    renders the summary table. Pure, it reads its arguments only.
  - Runs on the controller (delegated to localhost); check mode is the same run.
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
  records:
    description:
      - One per container - name, node_evidence, container_evidence (null when nothing
        came from inside), unreachable (bool), error (str), expect (gpu, gpus, gpu_model,
        gpu_count, userspace_version), simulated_hardware (bool, the lab's stand-in).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Diagnose every serving container of this run.
  specops.infra.gpu_doctor:
    records: "{{ ansible_play_hosts_all | map('extract', hostvars, 'gpu_doctor_record') | list }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
results:
  description: One diagnosis per container (container, node, vmid, status, findings, checks).
  returned: always
  type: list
  elements: dict
table:
  description: The summary table (Markdown lines) and one line per finding.
  returned: always
  type: list
  elements: str
healthy:
  description: No container is unhealthy.
  returned: always
  type: bool
counts:
  description: Containers by status (healthy, warning, unhealthy).
  returned: always
  type: dict
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.diagnosis import (
    Expectation,
    diagnose,
    render_table,
    summary,
)
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.router import (
    router_views,
)


class RecordError(ValueError):
    """A record the playbook should not have made; names the field."""


def diagnose_records(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The module's work as a plain function (pytest calls it directly)."""
    results: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        name = record.get("name")
        if not name:
            raise RecordError(f"records[{index}].name: missing")
        node_ev = record.get("node_evidence")
        if not isinstance(node_ev, Mapping) or not node_ev:
            node_ev = {
                "host": {"node": record.get("node")},
                "vmid": record.get("vmid"),
                "missing": f"no evidence from node {record.get('node')} in this run "
                "(unreachable, failed, or left out by --limit)",
            }
        ct_ev = record.get("container_evidence")
        if record.get("unreachable") or record.get("error"):
            ct_ev = {"reachable": False, "error": record.get("error") or None}
        elif not isinstance(ct_ev, Mapping):
            ct_ev = None
        diagnosis = diagnose(
            str(name),
            node_ev,
            ct_ev,
            Expectation.from_dict(record.get("expect")),
            simulated_hardware=bool(record.get("simulated_hardware")),
            routers=router_views(record.get("router_views")),
        )
        results.append(diagnosis.to_dict())
    counts = summary(results)
    return {
        "results": results,
        "table": render_table(results),
        "healthy": counts["unhealthy"] == 0,
        "counts": counts,
    }


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={"records": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    try:
        out = diagnose_records(module.params["records"])
    except RecordError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **out)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
