#!/usr/bin/python
"""Ansible module: drain a server of an HAProxy backend, or put it back, and wait."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_server
short_description: Drain a serving container in its router (HAProxy), or put it back, and wait
description:
  - Through HAProxy's runtime API (its admin C(stats socket)), on the router host.
  - V(drained) - no new request goes to the server (HAProxy's C(drain) state); waits until
    the requests it serves have finished (its current sessions and queue both 0). Requests
    still in flight after I(timeout) fail the task with the server put back as it was.
  - V(ready) - the server takes requests again; waits until HAProxy's health check (the
    engine's readiness endpoint) says UP, so that a rollout never drains the next server
    before this one serves.
  - V(maint) - out of the backend at once, health checks stopped (nothing waited for).
  - The state is runtime state. The router role keeps it across a reload
    (C(server-state-file)); a restart of HAProxy puts every server back to ready.
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it changes nothing in HAProxy; it reports the server's state now and whether its admin state would change.
  diff_mode:
    support: none
options:
  socket:
    description: HAProxy's admin runtime socket.
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: The backend (C(specops_<model>), module_utils/router_plan.py).
    type: str
    required: true
  server:
    description: The server (the serving container's inventory name).
    type: str
    required: true
  state:
    description: The server's state after the task.
    type: str
    choices: [drained, ready, maint]
    required: true
  timeout:
    description: Seconds to wait for the server to be idle (drained) or UP (ready).
    type: float
    default: 300
  keep_one_up:
    description:
      - V(drained) - refuse, changing nothing, when the backend has other servers and none of
        them is UP (draining this one would leave the model without a server).
    type: bool
    default: true
notes:
  - Supports check mode (reports the server's state and whether it would change).
"""

EXAMPLES = r"""
- name: Take the container out of its router before its server restarts.
  specops.infra.router_server:
    backend: specops_qwen3.6-27b
    server: ct129-qwen27b
    state: drained
    timeout: 300
  delegate_to: ct128-router
"""

RETURN = r"""
before:
  description: The server as C(show stat) reported it before (status, check, sessions, ...).
  returned: always
  type: dict
after:
  description: The server after the task.
  returned: always
  type: dict
seconds:
  description: Seconds waited.
  returned: always
  type: float
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.haproxy import (
    HaproxyError,
    drain,
    find,
    ready,
    set_state,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "backend": {"type": "str", "required": True},
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["drained", "ready", "maint"], "required": True},
            "timeout": {"type": "float", "default": 300},
            "keep_one_up": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    sock, backend, server, state = p["socket"], p["backend"], p["server"], p["state"]
    want = {"drained": "drain", "ready": "ready", "maint": "maint"}[state]
    try:
        now = find(sock, backend, server)
        if module.check_mode:
            module.exit_json(changed=now.admin != want, before=now.to_dict(),
                             after=now.to_dict(), seconds=0.0)  # fmt: skip
        if state == "drained":
            out = drain(sock, backend, server, timeout=p["timeout"], keep_one_up=p["keep_one_up"])
        elif state == "ready":
            out = ready(sock, backend, server, timeout=p["timeout"])
        else:
            if now.admin != "maint":
                set_state(sock, backend, server, "maint")
            after = find(sock, backend, server)
            module.exit_json(changed=now.admin != "maint", before=now.to_dict(),
                             after=after.to_dict(), seconds=0.0)  # fmt: skip
    except HaproxyError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=out.changed, before=out.before.to_dict(), after=out.after.to_dict(),
        seconds=out.seconds,
    )  # fmt: skip


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
