#!/usr/bin/python
"""Ansible module: record a refresh (update-initramfs, update-grub) a host owes for changed files."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pending_refresh
short_description: Record on the host a refresh owed for files a run changes, until it ran
description:
  - Handlers live in the controller. A run lost between the task that changed a file and
    the handler that applies it (C(update-initramfs) after C(/etc/modprobe.d), C(update-grub)
    after C(/etc/default/grub)) leaves the change unapplied, and the re-run finds the files
    as wanted and notifies nothing.
  - With I(state=owed) the module writes a marker file before the files change (a role
    that knows whether they will says so in I(state); one that does not names them in
    I(files) with their wanted text); the handler removes it with I(state=settled) after
    the refresh. With I(state=query) it only reads the marker. The return value I(owed) says
    whether the refresh is owed after the step, so a task notifies its handler with
    C(changed_when) on it, and a run that finds a marker an earlier run left does the refresh.
version_added: "0.2.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode it reports what it would write or remove.
  diff_mode:
    support: none
options:
  path:
    description: The marker file (its folder is made when missing).
    type: path
    required: true
  state:
    description:
      - V(owed) writes the marker (one already there is kept), V(settled) removes it,
        V(query) reads it.
    type: str
    choices: [owed, query, settled]
    default: query
  reason:
    description: The marker's text, required with I(state=owed) (which files change, which command is owed).
    type: str
    default: ""
  files:
    description:
      - The files the refresh reads, as absolute path to the text each is about to be
        written with. With I(state=owed) the refresh is owed only when one of them does
        not hold its text yet (missing, or other text). They are only read.
    type: dict
notes:
  - Supports check mode (reports what it would write or remove).
"""

EXAMPLES = r"""
- name: Record an initramfs rebuild as owed before the modprobe files change.
  specops.infra.pending_refresh:
    path: /var/lib/specops/pending/vfio_release-update-initramfs
    state: "{{ 'owed' if files_change else 'query' }}"
    reason: /etc/modprobe.d changed for vfio-pci; update-initramfs -u -k all is owed.
  register: owed
  changed_when: owed.owed
  notify: Update initramfs

- name: Record the rebuild as owed when the blacklist is about to change.
  specops.infra.pending_refresh:
    path: /var/lib/specops/pending/nvidia_driver-update-initramfs
    state: owed
    files: "{{ {'/etc/modprobe.d/blacklist-nouveau.conf': blacklist_text} }}"
    reason: the nouveau blacklist changes; update-initramfs -u is owed.
  register: owed
  changed_when: owed.owed
  notify: Update initramfs
"""

RETURN = r"""
owed:
  description: Whether the refresh is owed after this step.
  returned: always
  type: bool
was_owed:
  description: Whether the marker was there before this step (a run stopped before its refresh).
  returned: always
  type: bool
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.pending_refresh import STATES, apply


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": list(STATES), "default": "query"},
            "reason": {"type": "str", "default": ""},
            "files": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    try:
        out = apply(
            p["path"], p["state"], p["reason"], files=p["files"], check_mode=module.check_mode
        )
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"pending_refresh {p['path']}: {exc}")
    module.exit_json(changed=out.changed, owed=out.owed, was_owed=out.was_owed)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
