"""Connection ``specops.lab.node``: a lab PVE node's commands, run on the controller with
the node's own tools first (TEST STAND-IN; see the collection README)."""

from __future__ import annotations

import os
import shlex
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection.local import Connection as LocalConnection

from specops_lab.paths import UNREACHABLE_FAULT, lab_dir

DOCUMENTATION = r"""
name: node
short_description: Run a lab PVE node's commands on the controller, the node's tools first
description:
  - TEST STAND-IN of the specops lab. A lab PVE node is a directory on the controller that
    plays the node's C(/), C(<lab dir>/<node>) (C($SPECOPS_LAB_DIR), default
    C(/var/lib/specops/lab); the node is the host's address, its inventory name unless
    C(ansible_host) says otherwise, also when a task is delegated to it; the inventory's
    C(specops_host_root) names the same directory for the roles); this connection runs
    commands locally, as
    C(local) does, with the node's C(usr/local/sbin), C(usr/local/bin), C(usr/sbin),
    C(usr/bin), C(sbin) and C(bin) first on C(PATH) and C(SPECOPS_LAB_NODE_ROOT) set to its
    root, so the node's stand-in tools (lab/src/specops_lab/node.py) answer for it.
  - Its transport is not C(local), so C(ansible.builtin.reboot) runs; with search paths and
    boot-time command under the node's root it finds the node's own C(shutdown), which
    emulates the node's boot.
  - Refuses a root that is not a lab node (no C(etc/specops-lab-node.json) under it).
  - A lab fault, C(etc/specops-lab/fault-unreachable) under the node's root, makes the node
    unreachable (each command fails as a lost connection does) until the file is removed.
author: specops maintainers
version_added: 0.1.0
options:
  pipelining:
    description: Pipe modules to the interpreter instead of copying them (on by default here).
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
"""

_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")


class Connection(LocalConnection):  # type: ignore[misc]
    """A lab node on the controller (see DOCUMENTATION; ansible is untyped here)."""

    transport = "specops.lab.node"

    def _node_root(self) -> str:
        node = str(self._play_context.remote_addr or "")
        if not node or "/" in node or node in (".", ".."):
            raise AnsibleConnectionFailure(f"specops.lab.node: {node!r} is not a lab node name")
        root = str(lab_dir() / node)
        if not os.path.isfile(os.path.join(root, "etc", "specops-lab-node.json")):
            raise AnsibleConnectionFailure(
                f"specops.lab.node: {root} is not a lab node (run `specops lab up` first)"
            )
        if os.path.isfile(os.path.join(root, UNREACHABLE_FAULT)):
            raise AnsibleConnectionFailure(
                f"specops.lab.node: {node} is unreachable (lab fault: {root}/{UNREACHABLE_FAULT})"
            )
        return os.path.normpath(root)

    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = True
    ) -> tuple[int, bytes, bytes]:
        root = self._node_root()
        path = ":".join(
            [*(os.path.join(root, d) for d in _DIRS), os.environ.get("PATH", os.defpath)]
        )
        prefix = f"PATH={shlex.quote(path)} SPECOPS_LAB_NODE_ROOT={shlex.quote(root)} "
        result: tuple[int, bytes, bytes] = super().exec_command(
            prefix + cmd, in_data=in_data, sudoable=sudoable
        )
        return result

    def reset(self) -> Any:
        # Nothing to reconnect: the node is a directory on the controller.
        return None
