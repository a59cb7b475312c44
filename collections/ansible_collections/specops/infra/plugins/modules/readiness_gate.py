#!/usr/bin/python
"""Ansible module: wait until an inference server is ready (health, model list, one token)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: readiness_gate
short_description: Wait until an OpenAI-compatible inference server is ready
description:
  - Probes the server until, in one probe, C(GET /health) answers 200, C(GET /v1/models)
    lists I(served_model_name), and C(POST /v1/completions) with C(max_tokens=1) returns a
    generation with C(usage.completion_tokens >= 1).
  - Fails after I(timeout) seconds with the failing check and, when I(unit) is given, the
    last I(journal_lines) lines of the unit's journal. A unit that is C(failed) or
    C(inactive) ends the wait early.
  - Read-only; never changes anything. The logic is
    C(ansible_collections.specops.infra.plugins.module_utils.readiness), which the
    controller-side sweep and rollout import too.
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
  url:
    description: Base URL of the server, as seen from the managed host.
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The name C(/v1/models) must list and the completion request uses.
    type: str
    required: true
  timeout:
    description: Seconds to wait for readiness in all.
    type: int
    default: 600
  interval:
    description: Seconds between probes.
    type: float
    default: 2.0
  request_timeout:
    description: Seconds one HTTP request may take.
    type: float
    default: 30.0
  api_key:
    description: Bearer token when the server requires one.
    type: str
  unit:
    description: systemd unit of the server; its state ends the wait early and its journal explains a failure.
    type: str
  journal_lines:
    description: Journal lines shown on failure.
    type: int
    default: 50
  prompt:
    description: Prompt of the one-token completion.
    type: str
    default: Hello
notes:
  - Supports check mode (it only reads).
"""

EXAMPLES = r"""
- name: Ensure the server answers a one-token generation.
  specops.infra.readiness_gate:
    url: http://127.0.0.1:8000
    served_model_name: qwen3.6-27b
    unit: specops-qwen3.6-27b.service
    timeout: 900
"""

RETURN = r"""
ready:
  description: Whether the server became ready.
  returned: always
  type: bool
seconds:
  description: Seconds until ready (or until the wait gave up).
  returned: always
  type: float
attempts:
  description: Probes made.
  returned: always
  type: int
models:
  description: Model ids C(/v1/models) listed in the last probe.
  returned: always
  type: list
  elements: str
stage:
  description: C(ready), or the failing check (C(health), C(models), C(generation)).
  returned: always
  type: str
journal:
  description: The unit's last journal lines (on failure with I(unit) only).
  returned: failure
  type: str
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.readiness import (
    journal_tail,
    unit_active_state,
    wait_ready,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8000"},
            "served_model_name": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 600},
            "interval": {"type": "float", "default": 2.0},
            "request_timeout": {"type": "float", "default": 30.0},
            "api_key": {"type": "str", "no_log": True},
            "unit": {"type": "str"},
            "journal_lines": {"type": "int", "default": 50},
            "prompt": {"type": "str", "default": "Hello"},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    unit = p["unit"]
    result = wait_ready(
        p["url"],
        p["served_model_name"],
        timeout=p["timeout"],
        interval=p["interval"],
        request_timeout=p["request_timeout"],
        api_key=p["api_key"],
        prompt=p["prompt"],
        unit_state=(lambda: unit_active_state(unit)) if unit else None,
    )
    out: dict[str, Any] = {
        "changed": False,
        "ready": result.ready,
        "seconds": round(result.seconds, 2),
        "attempts": result.attempts,
        "models": result.last.models,
        "stage": result.last.stage,
    }
    if result.ready:
        module.exit_json(**out)
    msg = (
        f"{p['url']} ({p['served_model_name']}) not ready after {result.seconds:.0f} s"
        f" ({result.attempts} probes): {result.last.stage}: {result.last.detail}"
    )
    if unit:
        out["journal"] = journal_tail(unit, p["journal_lines"])
        msg += f"\nlast {p['journal_lines']} journal lines of {unit}:\n{out['journal']}"
    module.fail_json(msg=msg, **out)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
