#!/usr/bin/python
"""Ansible module: the router's view of each backend server (HAProxy's show stat)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_view
short_description: What the router (HAProxy) says of each backend server - read only
description:
  - Reads C(show stat) on HAProxy's admin runtime socket - for each server of each backend,
    its status (UP, DOWN, DRAIN, MAINT), its last health check, the requests it serves and
    has queued, how many it was sent.
  - With I(save_state), also writes C(show servers state) to that file (what
    C(load-server-state-from-file) reads at a reload, so that a drained server stays
    drained across it); the router role does it before each reload.
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - Read only; in check mode it does not write I(save_state).
  diff_mode:
    support: none
options:
  socket:
    description: HAProxy's admin runtime socket.
    type: path
    default: /run/haproxy/admin.sock
  backends:
    description: Only these backends (all of them when empty).
    type: list
    elements: str
    default: []
  save_state:
    description: A file to write the servers' runtime state to (not in check mode).
    type: path
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Read the router's view of its backends.
  specops.infra.router_view:
  register: view
"""

RETURN = r"""
servers:
  description: One entry per backend server - backend, server, status, up, admin, check_status,
    check_code, last_check, sessions, queued, total, weight, address, last_change_s.
  returned: always
  type: list
  elements: dict
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.haproxy import (
    HaproxyError,
    save_state,
    show_stat,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "backends": {"type": "list", "elements": "str", "default": []},
            "save_state": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    try:
        rows = show_stat(p["socket"])
        if p["save_state"] and not module.check_mode:
            save_state(p["socket"], p["save_state"])
    except (HaproxyError, OSError) as exc:
        module.fail_json(msg=str(exc))
    wanted = set(p["backends"])
    servers = [r.to_dict() for r in rows if not wanted or r.backend in wanted]
    module.exit_json(changed=False, servers=servers)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
