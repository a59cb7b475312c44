#!/usr/bin/python
"""Ansible module: wait until an inference engine runs no requests (drain)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.engine_idle import wait_idle

__all__ = ["main"]

DOCUMENTATION = r"""
---
module: engine_idle
short_description: Wait until a vLLM or SGLang server runs no requests
description:
  - Polls the server's Prometheus C(/metrics) and sums C(vllm:num_requests_running)
    (vLLM) or C(sglang:num_running_reqs) (SGLang) until the sum is 0.
  - Used by the rollout's drain step after the node was taken out of the load balancer.
  - Fails after I(timeout) seconds naming the requests still running, or when the
    server exports neither gauge.
options:
  url:
    description: Base URL of the server as seen from the host the module runs on.
    type: str
    default: http://127.0.0.1:8000
  timeout:
    description: Seconds to wait for zero running requests.
    type: float
    default: 300
  interval:
    description: Seconds between polls.
    type: float
    default: 1.0
notes:
  - Supports check mode (it only reads).
author: specops
"""

EXAMPLES = r"""
- name: Wait until the engine has finished its running requests.
  specops.infra.engine_idle:
    url: http://127.0.0.1:8000
    timeout: 300
"""

RETURN = r"""
idle:
  description: Whether the engine reported zero running requests in time.
  returned: always
  type: bool
running:
  description: Running requests at the last poll (null when unknown).
  returned: always
  type: float
seconds:
  description: Seconds waited.
  returned: always
  type: float
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8000"},
            "timeout": {"type": "float", "default": 300.0},
            "interval": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    result = wait_idle(p["url"], timeout=p["timeout"], interval=p["interval"])
    out = {
        "changed": False,
        "idle": result.idle,
        "running": result.running,
        "seconds": round(result.seconds, 2),
    }
    if result.idle:
        module.exit_json(**out)
    why = result.error or f"{result.running:g} request(s) still running"
    module.fail_json(msg=f"{p['url']} not idle after {result.seconds:.0f} s: {why}", **out)


if __name__ == "__main__":
    main()
