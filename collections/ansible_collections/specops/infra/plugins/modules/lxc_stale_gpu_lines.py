#!/usr/bin/python
"""Ansible module lxc_stale_gpu_lines: drop a migrated container's GPU lines from its old host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_stale_gpu_lines
short_description: Remove a moved container's GPU lines that only made sense on its old host
description:
  - After a container moved to another Proxmox VE node, its config still carries the
    GPU lines written for the old host (given in I(lines), as recorded before the move
    by C(specops migrate preflight)). This module removes those of them that are stale
    on this node, so that M(specops.infra.lxc_gpu_config) writes the new ones from this
    node's facts.
  - A raw allow line is stale when its major is not an NVIDIA major of this node (195 or
    one in the facts' C(char_majors)) - for example the old host's nvidia-uvm major,
    which may be another driver's major here (vfio) and which M(specops.infra.lxc_gpu_config)
    leaves alone for that reason. A C(/dev/nvidiaN) mount or C(devN) entry is stale
    when N is not the minor of one of the cards in I(gpus). Lines valid here are kept.
  - Only the main section changes; snapshot sections stay byte-identical. The file is
    written under PVE's per-guest config lock, atomically.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written.
  diff_mode:
    support: full
options:
  vmid:
    description: The container's VMID; its conf must exist on this node.
    type: int
    required: true
  lines:
    description: "The container's GPU lines on the old host (C(key: value) text)."
    type: list
    elements: str
    required: true
  gpu_facts:
    description: C(ansible_facts.specops_gpu) of this node.
    type: dict
    required: true
  gpus:
    description: PCI addresses of the cards the container gets on this node.
    type: list
    elements: str
    default: []
  root:
    description: The node's file system root (a lab node root in tests).
    type: path
    default: /
  lock_timeout:
    description: Seconds to wait for the container's config lock.
    type: int
    default: 10
notes:
  - Supports check mode and diff mode.
"""

EXAMPLES = r"""
- name: Remove the old host's GPU lines from container 129.
  specops.infra.lxc_stale_gpu_lines:
    vmid: 129
    lines: "{{ migrate_source_gpu_lines }}"
    gpu_facts: "{{ ansible_facts.specops_gpu }}"
    gpus: ["0000:01:00.0", "0000:02:00.0"]
"""

RETURN = r"""
removed:
  description: The lines removed.
  returned: always
  type: list
  elements: str
kept:
  description: Lines of I(lines) kept because they are valid on this node (or absent).
  returned: always
  type: list
  elements: str
"""

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    PveConf,
    PveConfError,
    config_lock,
    parse,
    write_conf_atomic,
)

_ALLOW_RE = re.compile(r"^c\s+(\d+):")
_NV_RE = re.compile(r"/dev/nvidia(\d+)(?![\w-])")
NVIDIA_FIXED_MAJOR = 195


def stale_lines(
    lines: Sequence[str], facts: Mapping[str, Any], gpus: Sequence[str]
) -> list[tuple[str, str]]:
    """(key, value) of the given lines that are stale on the node these facts describe."""
    majors = {NVIDIA_FIXED_MAJOR, *(int(v) for v in (facts.get("char_majors") or {}).values())}
    wanted = {a if a.count(":") == 2 else f"0000:{a}" for a in gpus}
    minors = {
        int(g["nvidia"]["minor"])
        for g in facts.get("gpus", [])
        if g.get("address") in wanted and (g.get("nvidia") or {}).get("minor") is not None
    }
    out: list[tuple[str, str]] = []
    for line in lines:
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        allow = _ALLOW_RE.match(value) if "devices.allow" in key else None
        if allow:
            if int(allow.group(1)) not in majors:
                out.append((key, value))
            continue
        node = _NV_RE.search(value)
        if node and int(node.group(1)) not in minors:
            out.append((key, value))
    return out


def drop(conf: PveConf, stale: Sequence[tuple[str, str]]) -> list[str]:
    """Remove those lines (raw lxc keys and devN entries) from the main section."""
    removed: list[str] = []
    todo = set(stale)
    for key, value in conf.remove_lxc(lambda k, v: (k, v) in todo):
        removed.append(f"{key}: {value}")
    for key, value in stale:
        if re.fullmatch(r"dev\d+", key) and conf.get(key) == value and conf.delete(key):
            removed.append(f"{key}: {value}")
    return removed


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "vmid": {"type": "int", "required": True},
            "lines": {"type": "list", "elements": "str", "required": True},
            "gpu_facts": {"type": "dict", "required": True},
            "gpus": {"type": "list", "elements": "str", "default": []},
            "root": {"type": "path", "default": "/"},
            "lock_timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.join(p["root"], "etc/pve/lxc", f"{p['vmid']}.conf")
    if not os.path.exists(path):
        module.fail_json(msg=f"vmid: container {p['vmid']} has no config on this node ({path})")
    stale = stale_lines(p["lines"], p["gpu_facts"], p["gpus"])
    try:
        with config_lock(p["root"], p["vmid"], p["lock_timeout"]):
            with open(path, encoding="utf-8", newline="") as fh:  # CRLF kept byte for byte
                before = fh.read()
            conf = parse(before)
            removed = drop(conf, stale)
            after = conf.render()
            if removed and not module.check_mode:
                write_conf_atomic(path, after)
    except (PveConfError, OSError) as exc:
        module.fail_json(msg=str(exc))
    kept = [ln for ln in p["lines"] if ln.strip() not in removed]
    module.exit_json(
        changed=bool(removed),
        removed=removed,
        kept=kept,
        diff={"before": before, "after": after, "before_header": path, "after_header": path},
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
