#!/usr/bin/python
"""Ansible module: take, renew, release or read the node lock on the node itself."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_lock
short_description: One specops run at a time on a node - take, renew, release or read its lock
description:
  - The node-side half of the node lock (C(module_utils/node_lock.py) says what the lock
    is). Called through the action plugin of the same name, which adds the holder (this
    run - controller host, user, process, playbook), waits in steps, takes over a lock
    whose run is gone from this controller, and keeps renewing the lease while the run
    lives. Calling the module directly is for tests and for an operator's look.
  - The record is C(/var/lib/specops/lock/node.json) under I(root); it stays after a
    release (C(held false)) and names who held the lock last.
  - Never reports C(changed); the lock is bookkeeping, not the node's wanted state (a
    converged node stays C(changed=0) on every run).
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it takes, renews and releases nothing; it reports the holder it finds and whether the run would take or release the lock.
  diff_mode:
    support: none
options:
  root:
    description: The node's root (C(/); the lab's node tree).
    type: path
    default: /
  state:
    description:
      - V(acquired) takes the lock (or renews it, for the same holder), waiting up to
        I(wait) seconds while another holds it, then fails naming the holder.
      - V(renewed) extends the lease of I(holder)'s lock; fails when it is no longer its.
      - V(released) releases I(holder)'s lock (another's is left alone).
      - V(query) reads who holds it.
    type: str
    choices: [acquired, renewed, released, query]
    default: query
  holder:
    description:
      - Who asks - C(id) (required for every state but V(query); one id per run),
        C(controller), C(user), C(pid), C(playbook), C(run_started_at).
    type: dict
    default: {}
  lease:
    description: Seconds the lock stays held without a renewal.
    type: float
    default: 300
  wait:
    description: Seconds to wait while another run holds the lock (V(acquired)).
    type: float
    default: 0
  take_over_from:
    description:
      - The id of a holder whose run is known to be gone (the action plugin checks that
        on the controller the holder ran on); its lock is taken over at once.
    type: str
notes:
  - Supports check mode (V(acquired) then only says whether the lock would be had now).
"""

EXAMPLES = r"""
- name: Read who holds the node lock.
  specops.infra.node_lock:
    state: query
  register: lock

- name: Take the lock for a run (what the action plugin sends).
  specops.infra.node_lock:
    state: acquired
    holder: {id: "ctl-1:4242:1733480000", controller: ctl-1, user: ops, pid: 4242, playbook: rollout.yml}
    lease: 300
    wait: 15
"""

RETURN = r"""
held:
  description: Whether the asker holds the lock after the call (V(query) - whether anyone does).
  returned: always
  type: bool
acquired_now:
  description: The asker did not hold the lock before this call.
  returned: always
  type: bool
taken_over:
  description: The holder whose lock was taken over (lease expired, or its run gone), else null.
  returned: always
  type: dict
message:
  description: One line - who holds the lock and how long its lease runs, or what was done.
  returned: always
  type: str
record:
  description: The record on the node after the call.
  returned: always
  type: dict
busy:
  description: The lock is another's (V(acquired) failed, or in check mode would fail).
  returned: always
  type: bool
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.node_lock import (
    STATES,
    LockError,
    Outcome,
    acquire,
    lock_path,
    query,
    release,
    renew,
)


def _call(p: dict[str, Any], check_mode: bool) -> Outcome:
    path = lock_path(p["root"])
    holder = p["holder"] or {}
    state = p["state"]
    if state == "query":
        return query(path)
    holder_id = str(holder.get("id") or "")
    if not holder_id:
        raise ValueError(f"holder.id is required with state={state}")
    if state == "acquired":
        return acquire(
            path, holder, lease=p["lease"], wait=p["wait"],
            take_over_from=p["take_over_from"], check_mode=check_mode,
        )  # fmt: skip
    if state == "renewed":
        if check_mode:
            return query(path)
        return renew(path, holder_id, lease=p["lease"])
    return release(path, holder_id, check_mode=check_mode)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "state": {"type": "str", "choices": list(STATES), "default": "query"},
            "holder": {"type": "dict", "default": {}},
            "lease": {"type": "float", "default": 300},
            "wait": {"type": "float", "default": 0},
            "take_over_from": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    try:
        out = _call(p, module.check_mode)
    except LockError as exc:
        module.fail_json(
            msg=str(exc), busy=True, held=False, acquired_now=False, taken_over=None,
            message=str(exc), record=exc.record,
        )  # fmt: skip
    except (OSError, ValueError, TimeoutError) as exc:
        module.fail_json(msg=f"node lock {lock_path(p['root'])}: {exc}")
    busy = p["state"] == "acquired" and not out.held
    module.exit_json(changed=False, busy=busy, **out.to_dict())


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
