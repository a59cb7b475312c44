#!/usr/bin/python
"""Ansible module lxc_gpu_config: a PVE container's GPU lines, derived from the GPU facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lxc_gpu_config
short_description: Give a Proxmox VE container NVIDIA GPUs (devN entries or raw LXC lines)
description:
  - Computes the device nodes for the chosen cards from the node's GPU facts
    (C(ansible_facts.specops_gpu) of M(specops.infra.gpu_facts)), that is C(/dev/nvidiaN) by the
    card's Device Minor, C(nvidiactl), C(nvidia-uvm), C(nvidia-uvm-tools), and on request
    C(nvidia-modeset) and C(nvidia-caps/nvidia-capN). Majors come from /proc/devices.
  - Writes them into C(/etc/pve/lxc/<vmid>.conf) as C(devN) entries (PVE >= 8.1) or as
    raw C(lxc.cgroup2.devices.allow) / C(lxc.cgroup.devices.allow) and C(lxc.mount.entry)
    lines, replacing the GPU lines already there (also stale ones from another host,
    other majors, other minors) and leaving every other line and every snapshot section
    byte-identical. The file is parsed and written through module_utils C(pve_conf),
    under PVE's per-guest config lock, atomically (temporary file + rename).
  - With 2+ cards (I(ipc_limits=auto)) also the container's C(/dev/shm) size and
    C(memlock) limit that NCCL needs between the ranks of one engine (an
    C(lxc.mount.entry) of a tmpfs on C(dev/shm) of I(shm_size) and C(lxc.prlimit.memlock);
    NCCL's troubleshooting guide asks containers for C(--shm-size=1g --ulimit memlock=-1)).
  - Does not restart the container; the role C(lxc_gpu_passthrough) does when this
    module reports a change and the container runs.
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
  gpu_facts:
    description: C(ansible_facts.specops_gpu) of this node, freshly gathered.
    type: dict
    required: true
  gpus:
    description: PCI addresses of the cards to give (C(0000:01:00.0) or C(01:00.0)).
    type: list
    elements: str
    default: []
  gpu_model:
    description:
      - Instead of I(gpus), the product name exactly as the facts' C(gpus[].name) say
        (case aside) or a vendor:device id (C(10de:2bb1)); a part of a name is refused.
        I(gpu_count) free cards of it are chosen (module_utils C(gpu_select), no running
        VM and no process holds them), cards this container already has first, then
        cards no other container of this node has, by address.
    type: str
  gpu_count:
    description: How many cards of I(gpu_model).
    type: int
    default: 1
  method:
    description: C(dev) entries, C(raw) LXC lines, or C(auto) (dev on PVE >= 8.1).
    type: str
    choices: [auto, dev, raw]
    default: auto
  cgroup:
    description: Key of raw allow lines; C(auto) follows the facts' cgroup version.
    type: str
    choices: [auto, v1, v2]
    default: auto
  modeset:
    description: Also give C(/dev/nvidia-modeset).
    type: bool
    default: false
  caps:
    description: Minors of C(/dev/nvidia-caps/nvidia-capN) to give (MIG; e.g. C([1, 2])).
    type: list
    elements: int
    default: []
  allow_stopped_vm_cards:
    description:
      - Also give cards that a stopped VM keeps assigned (C(hostpciN), C(args:)); that
        VM will not start with them. Without it such a card is refused, by address too.
    type: bool
    default: false
  dev_mode:
    description: C(mode=) of C(devN) entries (inside the container). Empty leaves PVE's default.
    type: str
    default: "0666"
  dev_gid:
    description: C(gid=) of C(devN) entries (a group id inside the container).
    type: int
  ipc_limits:
    description:
      - When to write the C(/dev/shm) tmpfs and C(lxc.prlimit.memlock) lines. C(auto) with
        2 or more cards (tensor or pipeline parallel, whose ranks talk through NCCL's shared
        memory), C(always), or C(never). When not written, lines of that kind already in
        the conf are left as they are.
    type: str
    choices: [auto, always, never]
    default: auto
  shm_size:
    description:
      - Size of the container's C(/dev/shm) tmpfs (tmpfs C(size=)); a size in bytes below
        NCCL's C(1g) is refused. C(50%) is half the node's RAM, what the host's own
        C(/dev/shm) (and so the engines' C(--ipc=host) in Docker) gives.
    type: str
    default: 50%
  memlock:
    description: C(lxc.prlimit.memlock) of the container, C(unlimited) or bytes.
    type: str
    default: unlimited
  state:
    description: C(present) gives the cards; C(absent) removes every GPU line.
    type: str
    choices: [present, absent]
    default: present
  root:
    description: The node's file system root (a lab node root in tests).
    type: path
    default: /
  lock_timeout:
    description: Seconds to wait for the container's config lock.
    type: int
    default: 10
notes:
  - Supports check mode and diff mode (the whole conf before and after).
  - A privileged container needs no id mapping. An unprivileged one (C(unprivileged)
    set, or any C(lxc.idmap) line) works with C(devN) (PVE makes the node inside with
    the given uid/gid); with raw bind mounts each host node must be world read-write
    (the driver default 0666) or its gid mapped by the container's id map (its
    C(lxc.idmap) lines, else PVE's default C(u/g 0 100000 65536)), else the module fails
    naming the node.
"""

EXAMPLES = r"""
- name: Give container 901 two free RTX PRO 6000 cards.
  specops.infra.lxc_gpu_config:
    vmid: 901
    gpu_facts: "{{ ansible_facts.specops_gpu }}"
    gpu_model: NVIDIA RTX PRO 6000 Blackwell Workstation Edition
    gpu_count: 2

- name: Give container 902 one card by address, as raw cgroup v2 lines.
  specops.infra.lxc_gpu_config:
    vmid: 902
    gpu_facts: "{{ ansible_facts.specops_gpu }}"
    gpus: ["0000:41:00.0"]
    method: raw
"""

RETURN = r"""
conf:
  description: The conf file edited.
  returned: always
  type: str
  sample: /etc/pve/lxc/901.conf
method:
  description: dev or raw (after auto).
  returned: always
  type: str
gpus:
  description: Addresses of the cards given.
  returned: always
  type: list
  elements: str
devices:
  description: Device nodes given (path, major, minor, kind, address).
  returned: always
  type: list
  elements: dict
added:
  description: Lines added or rewritten.
  returned: always
  type: list
  elements: str
removed:
  description: Lines removed or rewritten (old text), stale lines of another host included.
  returned: always
  type: list
  elements: str
ipc:
  description: The shm mount and memlock lines the conf has from this run (empty when not written).
  returned: always
  type: list
  elements: str
unprivileged:
  description: The container is unprivileged.
  returned: always
  type: bool
warnings_kept:
  description: Allow lines kept although the conf has GPU lines (their major is another driver's here).
  returned: always
  type: list
  elements: str
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.lxc_gpu import (
    LxcGpuError,
    NodeStat,
    assigned_minors,
    choose_cgroup_key,
    choose_method,
    ipc_lines,
    ipc_wanted,
    merge,
    merge_ipc,
    plan_devices,
    privilege_problems,
    select_gpus,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    PveConf,
    PveConfError,
    config_lock,
    parse,
    write_conf_atomic,
)


def _host(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def read_proc_devices(root: str) -> dict[int, str]:
    """Character majors of /proc/devices -> name (empty when unreadable)."""
    out: dict[int, str] = {}
    try:
        with open(_host(root, "/proc/devices")) as fh:
            text = fh.read()
    except OSError:
        return out
    section = ""
    for line in text.splitlines():
        if line.endswith(":"):
            section = line
            continue
        parts = line.split()
        if section == "Character devices:" and len(parts) == 2 and parts[0].isdigit():
            out[int(parts[0])] = parts[1]
    return out


def other_containers(root: str, vmid: int) -> dict[int, set[int]]:
    """GPU minors that the node's other containers have."""
    conf_dir = _host(root, "/etc/pve/lxc")
    out: dict[int, set[int]] = {}
    for name in sorted(os.listdir(conf_dir)) if os.path.isdir(conf_dir) else []:
        stem, _sep, ext = name.partition(".")
        if ext != "conf" or not stem.isdigit() or int(stem) == vmid:
            continue
        try:
            with open(os.path.join(conf_dir, name)) as fh:
                minors = assigned_minors(parse(fh.read()))
        except (OSError, PveConfError):
            continue
        if minors:
            out[int(stem)] = minors
    return out


def _node_stats(root: str, paths: list[str]) -> list[NodeStat]:
    stats = []
    for path in paths:
        st = os.stat(_host(root, path))
        stats.append(NodeStat(path, st.st_mode & 0o7777, st.st_uid, st.st_gid))
    return stats


def _nccl_limits(params: dict[str, Any], conf: PveConf, cards: int, result: Any) -> list[str]:
    """The shm mount and memlock lines merged into ``conf`` when wanted (else none)."""
    if not ipc_wanted(params["ipc_limits"], cards):
        return []
    lines = ipc_lines(params["shm_size"], params["memlock"])
    merge_ipc(conf, lines, result)
    return [f"{k}: {v}" for k, v in lines]


def configure(params: dict[str, Any], *, check_mode: bool) -> dict[str, Any]:
    """The module's work as a plain function (pytest calls it directly)."""
    root: str = params["root"]
    vmid: int = params["vmid"]
    facts: dict[str, Any] = params["gpu_facts"]
    if not 100 <= vmid <= 999999999:
        raise LxcGpuError("vmid", f"must be 100..999999999 (got {vmid})")
    path = _host(root, f"/etc/pve/lxc/{vmid}.conf")
    if not os.path.isfile(path):
        raise LxcGpuError(
            "vmid",
            f"container {vmid} does not exist on {facts.get('node') or 'this node'} (no "
            f"/etc/pve/lxc/{vmid}.conf; that directory holds this node's containers only)",
        )
    dev_mode = params["dev_mode"] or ""
    if dev_mode and not re.fullmatch(r"0?[0-7]{3}", dev_mode):
        raise LxcGpuError("dev_mode", f"must be an octal mode like 0666 (got {dev_mode!r})")
    if params.get("dev_gid") is not None and params["dev_gid"] < 0:
        raise LxcGpuError("dev_gid", f"must be a group id >= 0 (got {params['dev_gid']})")
    method = choose_method(facts, params["method"])
    present = params["state"] == "present"
    cgroup_key = choose_cgroup_key(facts, params["cgroup"]) if method == "raw" else ""
    gpu_majors = {int(v) for v in (facts.get("char_majors") or {}).values()}
    foreign = {m: n for m, n in read_proc_devices(root).items() if not n.startswith("nvidia")}
    with config_lock(root, vmid, params["lock_timeout"]):
        with open(path, newline="") as fh:
            before_text = fh.read()
        try:
            conf: PveConf = parse(before_text)
        except PveConfError as exc:
            raise LxcGpuError(f"/etc/pve/lxc/{vmid}.conf", str(exc)) from exc
        if conf.get("lock"):
            raise LxcGpuError(
                "vmid", f"container {vmid} is locked (lock: {conf.get('lock')}): wait for that task"
            )
        devices = []
        addresses: list[str] = []
        if present:
            if params.get("gpu_model"):
                if params["gpus"]:
                    raise LxcGpuError("gpus", "give either gpus or gpu_model, not both")
                addresses = select_gpus(
                    facts,
                    params["gpu_model"],
                    params["gpu_count"],
                    mine=assigned_minors(conf),
                    others=other_containers(root, vmid),
                    allow_stopped_vm_cards=bool(params.get("allow_stopped_vm_cards")),
                )
            else:
                addresses = list(params["gpus"])
            devices = plan_devices(
                facts,
                addresses,
                modeset=params["modeset"],
                caps=params["caps"],
                allow_stopped_vm_cards=bool(params.get("allow_stopped_vm_cards")),
            )
            problems = privilege_problems(
                conf, method, _node_stats(root, [d.path for d in devices])
            )
            if problems:
                raise LxcGpuError(
                    "unprivileged",
                    f"container {vmid} runs in a user namespace (unprivileged, or lxc.idmap "
                    "lines) and raw bind mounts "
                    f"keep host ownership: {'; '.join(problems)}. Use method dev (PVE >= 8.1), "
                    "map the ids, or make the container privileged",
                )
        result = merge(
            conf,
            devices,
            method=method,
            cgroup_key=cgroup_key,
            gpu_majors=gpu_majors,
            foreign_majors=foreign,
            dev_mode=params["dev_mode"] or None,
            dev_gid=params.get("dev_gid"),
        )
        cards = [d.address for d in devices if d.kind == "card"]
        ipc = _nccl_limits(params, conf, len(cards), result) if present else []
        if result.changed and not check_mode:
            write_conf_atomic(path, result.after)
    return {
        "changed": result.changed,
        "conf": path,
        "method": method,
        "gpus": cards,
        "ipc": ipc,
        "devices": [d.as_dict() for d in devices],
        "added": result.added,
        "removed": result.removed,
        "unprivileged": conf.get_bool("unprivileged"),
        "warnings_kept": result.warnings,
        "diff": {
            "before": result.before,
            "after": result.after,
            "before_header": path,
            "after_header": path,
        },
    }


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "vmid": {"type": "int", "required": True},
            "gpu_facts": {"type": "dict", "required": True},
            "gpus": {"type": "list", "elements": "str", "default": []},
            "gpu_model": {"type": "str"},
            "gpu_count": {"type": "int", "default": 1},
            "method": {"type": "str", "choices": ["auto", "dev", "raw"], "default": "auto"},
            "cgroup": {"type": "str", "choices": ["auto", "v1", "v2"], "default": "auto"},
            "modeset": {"type": "bool", "default": False},
            "caps": {"type": "list", "elements": "int", "default": []},
            "allow_stopped_vm_cards": {"type": "bool", "default": False},
            "dev_mode": {"type": "str", "default": "0666"},
            "dev_gid": {"type": "int"},
            "ipc_limits": {
                "type": "str",
                "choices": ["auto", "always", "never"],
                "default": "auto",
            },
            "shm_size": {"type": "str", "default": "50%"},
            "memlock": {"type": "str", "default": "unlimited"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "root": {"type": "path", "default": "/"},
            "lock_timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    try:
        result = configure(module.params, check_mode=module.check_mode)
    except (LxcGpuError, PveConfError, OSError) as exc:
        module.fail_json(msg=str(exc))
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    for warning in result["warnings_kept"]:
        module.warn(warning)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
