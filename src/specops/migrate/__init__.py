"""Migrate a serving container to another Proxmox VE node (issue 9).

Phases: :mod:`.preflight` (read-only checks, every failure names what is missing),
:mod:`.move` (``POST /nodes/{node}/lxc/{vmid}/migrate`` within a cluster, vzdump +
restore across clusters), and :mod:`.report` (what changed, timings per phase). A
state file per migration (:mod:`.state`) makes a re-run continue where the last stopped.
The target is made right by the playbook ``playbooks/migrate.yml`` (host roles, GPU
config, userspace, service), which calls this package through ``specops migrate``.
"""

from __future__ import annotations

__all__: list[str] = []
