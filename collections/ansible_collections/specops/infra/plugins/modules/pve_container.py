#!/usr/bin/python
"""Ansible module: check a serving container's description against PVE, plan and apply it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pve_container
short_description: Check a serving LXC container's description against Proxmox VE, plan and apply it
description:
  - Validates the description (the C(pve_container_*) inventory variables) and checks it
    against the cluster through the PVE API before anything is written - vmid held by a
    VM or by a container on another node, unknown node, storage or template, memory or
    cores beyond the node. Each failure names the variable.
  - When the container exists, compares the description with C(GET .../lxc/{vmid}/config)
    and sorts the differences - C(online) (cores, memory, swap, tags, onboot, rootfs growth)
    are applied while it runs; C(restart) (hostname, features, mount points, network) and
    C(rebuild) (rootfs storage, privilege) only with I(allow_disruptive); C(refused)
    (rootfs shrink) always fails.
  - Creation is left to C(community.proxmox.proxmox); this module returns the arguments it
    needs (C(create)). When the container is absent and I(apply=true), check mode reports
    the creation as the planned change.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written through the API.
  diff_mode:
    support: full
options:
  api_host:
    description: PVE API host (a node of the cluster).
    type: str
    required: true
  api_port:
    description: PVE API port.
    type: int
    default: 8006
  api_user:
    description: User of the API token, e.g. C(root@pam).
    type: str
    required: true
  api_token_id:
    description: Token name (the part after C(!)).
    type: str
    required: true
  api_token_secret:
    description: Token secret. Never logged.
    type: str
    required: true
  validate_certs:
    description: Verify the API's TLS certificate.
    type: bool
    default: true
  ca_file:
    description: CA bundle to verify the API certificate with (PVE's self-signed C(pve-root-ca.pem)).
    type: path
  spec:
    description: The description, the role's C(pve_container_*) variables without the prefix.
    type: dict
    required: true
  apply:
    description: Apply the planned changes (false - only check and plan; never writes).
    type: bool
    default: false
  allow_disruptive:
    description: Also apply C(restart) changes (then reboot the running container) and C(rebuild) changes (backup, restore).
    type: bool
    default: false
  backup_storage:
    description: Storage for the backup a C(rebuild) makes.
    type: str
    default: local
  timeout:
    description: Seconds to wait for each PVE task.
    type: int
    default: 300
requirements:
  - proxmoxer >= 2.0 and requests, on the host it runs on (the controller; the collection's
    meta/ee-requirements.txt puts them in an execution environment)
notes:
  - Supports check mode and diff mode; in check mode nothing is written.
"""

EXAMPLES = r"""
- name: Ensure the serving container's live settings match the description.
  specops.infra.pve_container:
    api_host: 10.20.0.11
    api_user: root@pam
    api_token_id: specops
    api_token_secret: "{{ vault_pve_token_secret }}"
    spec:
      vmid: 129
      hostname: ct129-qwen27b
      node: gpu-node-01
      ostemplate: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst
      cores: 16
      memory: 65536
      swap: 0
      rootfs_storage: local-zfs
      rootfs_size: 64
      unprivileged: false
    apply: true
  delegate_to: localhost
  no_log: true
"""

RETURN = r"""
exists:
  description: Whether the container existed when the module ran.
  returned: always
  type: bool
status:
  description: C(running), C(stopped) or C(absent).
  returned: always
  type: str
plan:
  description: Each difference - field, API key, current, wanted, action, message.
  returned: always
  type: list
  elements: dict
applied:
  description: API keys changed by this run.
  returned: always
  type: list
  elements: str
pending:
  description: Differences left alone (disruptive without I(allow_disruptive)).
  returned: always
  type: list
  elements: dict
create:
  description: Arguments for community.proxmox.proxmox to create the container (features, netif, mount_volumes, disk_volume).
  returned: always
  type: dict
"""


import time
import traceback
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.specops.infra.plugins.module_utils.pve.container import (
    ONLINE,
    REBUILD,
    REFUSED,
    RESTART,
    Change,
    ClusterView,
    ContainerSpec,
    SpecError,
    check_cluster,
    create_params,
    live_settings,
    parse_spec,
    plan_changes,
    wanted_settings,
)

try:
    from proxmoxer import ProxmoxAPI

    HAS_PROXMOXER = True
    PROXMOXER_ERR = ""
except ImportError:  # pragma: no cover - reported by the module
    HAS_PROXMOXER = False
    PROXMOXER_ERR = traceback.format_exc()


# Every PVE API call this module makes: (method, path template, parameter names). A test
# checks each against the PVE 9.1 schema and the stand-in's request log against this list.
API_CALLS: list[tuple[str, str, list[str]]] = [
    ("GET", "/nodes", []),
    ("GET", "/cluster/resources", ["type"]),
    ("GET", "/nodes/{node}/storage", []),
    ("GET", "/nodes/{node}/status", []),
    ("GET", "/nodes/{node}/storage/{storage}/content", ["content"]),
    ("GET", "/nodes/{node}/lxc/{vmid}/config", []),
    ("GET", "/nodes/{node}/lxc/{vmid}/status/current", []),
    (
        "PUT",
        "/nodes/{node}/lxc/{vmid}/config",
        [
            "digest",
            "cores",
            "memory",
            "swap",
            "onboot",
            "tags",
            "hostname",
            "features",
            "mp0",
            "net0",
        ],
    ),
    ("PUT", "/nodes/{node}/lxc/{vmid}/resize", ["disk", "size"]),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/reboot", ["timeout"]),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown", ["timeout", "forceStop"]),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/start", []),
    ("POST", "/nodes/{node}/vzdump", ["vmid", "storage", "mode", "compress"]),
    (
        "POST",
        "/nodes/{node}/lxc",
        ["vmid", "ostemplate", "restore", "force", "storage", "unprivileged"],
    ),
    ("GET", "/nodes/{node}/tasks/{upid}/status", []),
    ("GET", "/nodes/{node}/tasks/{upid}/log", ["start", "limit"]),
]


class Api:
    """The few calls made, through proxmoxer's generic path access."""

    def __init__(self, prox: Any, timeout: int) -> None:
        self.prox = prox
        self.timeout = timeout

    def get(self, path: str, **params: Any) -> Any:
        return self.prox(path.lstrip("/")).get(**params)

    def put(self, path: str, **params: Any) -> Any:
        return self.prox(path.lstrip("/")).put(**params)

    def post(self, path: str, **params: Any) -> Any:
        return self.prox(path.lstrip("/")).post(**params)

    def wait(self, node: str, upid: str, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            status = self.get(f"/nodes/{node}/tasks/{upid}/status")
            if status.get("status") == "stopped":
                exit_status = str(status.get("exitstatus", ""))
                if exit_status == "OK" or exit_status.startswith("WARN"):
                    return
                log = self.get(f"/nodes/{node}/tasks/{upid}/log", start=0, limit=500)
                tail = "; ".join(str(line.get("t", "")) for line in log[-5:])
                raise RuntimeError(f"{what} failed: {exit_status} ({tail})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: task {upid} still running after {self.timeout}s")
            time.sleep(0.5)


def cluster_view(api: Api, spec: ContainerSpec) -> ClusterView:
    nodes = [str(n["node"]) for n in api.get("/nodes")]
    guests = api.get("/cluster/resources", type="vm")
    if spec.node not in nodes:
        return ClusterView(nodes, guests, [], 0, 0, [])
    storages = api.get(f"/nodes/{spec.node}/storage")
    status = api.get(f"/nodes/{spec.node}/status")
    templates: list[str] = []
    if any(s.get("storage") == spec.template_storage for s in storages):
        content = api.get(
            f"/nodes/{spec.node}/storage/{spec.template_storage}/content", content="vztmpl"
        )
        templates = [str(c["volid"]) for c in content]
    memory = int(status.get("memory", {}).get("total", 0))
    cpus = int(status.get("cpuinfo", {}).get("cpus", 0))
    return ClusterView(nodes, guests, storages, memory, cpus, templates)


def _base(spec: ContainerSpec) -> str:
    return f"/nodes/{spec.node}/lxc/{spec.vmid}"


def apply_changes(
    api: Api,
    spec: ContainerSpec,
    config: Mapping[str, Any],
    changes: list[Change],
    *,
    running: bool,
    allow_disruptive: bool,
    backup_storage: str,
) -> list[str]:
    """Write the allowed changes; returns the API keys changed."""
    applied: list[str] = []
    base = _base(spec)
    puts = {
        c.key: c.value
        for c in changes
        if c.key != "rootfs" and (c.action == ONLINE or (c.action == RESTART and allow_disruptive))
    }
    if puts:
        api.put(f"{base}/config", digest=str(config.get("digest", "")), **puts)
        applied += sorted(puts)
    for change in changes:
        if change.key == "rootfs" and change.action == ONLINE:
            upid = api.put(f"{base}/resize", disk="rootfs", size=change.value)
            if isinstance(upid, str) and upid.startswith("UPID:"):
                api.wait(spec.node, upid, f"resize of CT {spec.vmid} rootfs")
            applied.append("rootfs")
    restart = allow_disruptive and any(c.action == RESTART for c in changes)
    rebuild = allow_disruptive and any(c.action == REBUILD for c in changes)
    if rebuild:
        if running:
            upid = api.post(f"{base}/status/shutdown", timeout=60, forceStop=1)
            api.wait(spec.node, upid, f"shutdown of CT {spec.vmid}")
        upid = api.post(
            f"/nodes/{spec.node}/vzdump",
            vmid=str(spec.vmid),
            storage=backup_storage,
            mode="stop",
            compress="zstd",
        )
        api.wait(spec.node, upid, f"backup of CT {spec.vmid}")
        backups = api.get(f"/nodes/{spec.node}/storage/{backup_storage}/content", content="backup")
        mine = sorted(
            (str(b["volid"]) for b in backups if f"vzdump-lxc-{spec.vmid}-" in str(b["volid"])),
        )
        if not mine:
            raise RuntimeError(f"backup of CT {spec.vmid} not found on storage '{backup_storage}'")
        upid = api.post(
            f"/nodes/{spec.node}/lxc",
            vmid=spec.vmid,
            ostemplate=mine[-1],
            restore=1,
            force=1,
            storage=spec.rootfs_storage,
            unprivileged=int(spec.unprivileged),
        )
        api.wait(spec.node, upid, f"restore of CT {spec.vmid} (backup {mine[-1]} kept)")
        applied += [c.key for c in changes if c.action == REBUILD]
        if running:
            upid = api.post(f"{base}/status/start")
            api.wait(spec.node, upid, f"start of CT {spec.vmid}")
    elif restart and running:
        upid = api.post(f"{base}/status/reboot", timeout=60)
        api.wait(spec.node, upid, f"reboot of CT {spec.vmid}")
    return applied


def run(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    try:
        spec = parse_spec(p["spec"])
    except SpecError as exc:
        module.fail_json(msg=str(exc), field=exc.field)
    verify: bool | str = p["ca_file"] or p["validate_certs"]
    prox = ProxmoxAPI(
        p["api_host"],
        port=p["api_port"],
        user=p["api_user"],
        token_name=p["api_token_id"],
        token_value=p["api_token_secret"],
        verify_ssl=verify,
        timeout=60,
    )
    api = Api(prox, p["timeout"])
    try:
        exists = check_cluster(spec, cluster_view(api, spec))
    except SpecError as exc:
        module.fail_json(msg=str(exc), field=exc.field)
    result: dict[str, Any] = {
        "changed": False,
        "exists": exists,
        "status": "absent",
        "plan": [],
        "applied": [],
        "pending": [],
        "create": create_params(spec),
    }
    after = wanted_settings(spec)
    if not exists:
        result["diff"] = {"before": {}, "after": after}
        if p["apply"]:
            if not module.check_mode:
                module.fail_json(
                    msg=f"CT {spec.vmid} does not exist on node '{spec.node}'; create it first "
                    "(the pve_container role does, with community.proxmox.proxmox)",
                    **result,
                )
            result["changed"] = True
        return result
    config = api.get(f"{_base(spec)}/config")
    running = api.get(f"{_base(spec)}/status/current").get("status") == "running"
    result["status"] = "running" if running else "stopped"
    changes = plan_changes(spec, config)
    result["plan"] = [c.as_dict() for c in changes]
    result["diff"] = {"before": live_settings(config, spec), "after": after}
    refused = [c for c in changes if c.action == REFUSED]
    if refused:
        module.fail_json(
            msg="; ".join(c.message for c in refused), field=refused[0].field, **result
        )
    allowed = [
        c
        for c in changes
        if c.action == ONLINE or (p["allow_disruptive"] and c.action in (RESTART, REBUILD))
    ]
    result["pending"] = [c.as_dict() for c in changes if c not in allowed]
    for c in changes:
        if c not in allowed:
            module.warn(
                f"CT {spec.vmid}: {c.field} ({c.key}) differs: live {c.current!r}, described "
                f"{c.wanted!r}; needs a {c.action} - set pve_container_allow_disruptive: true to apply"
                + (f" ({c.message})" if c.message else "")
            )
    if not p["apply"] or not allowed:
        return result
    result["changed"] = True
    if module.check_mode:
        result["applied"] = sorted({c.key for c in allowed})
        return result
    result["applied"] = apply_changes(
        api,
        spec,
        config,
        changes,
        running=running,
        allow_disruptive=p["allow_disruptive"],
        backup_storage=p["backup_storage"],
    )
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "api_host": {"type": "str", "required": True},
            "api_port": {"type": "int", "default": 8006},
            "api_user": {"type": "str", "required": True},
            "api_token_id": {"type": "str", "required": True},
            "api_token_secret": {"type": "str", "required": True, "no_log": True},
            "validate_certs": {"type": "bool", "default": True},
            "ca_file": {"type": "path"},
            "spec": {"type": "dict", "required": True},
            "apply": {"type": "bool", "default": False},
            "allow_disruptive": {"type": "bool", "default": False},
            "backup_storage": {"type": "str", "default": "local"},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    if not HAS_PROXMOXER:
        module.fail_json(msg=missing_required_lib("proxmoxer"), exception=PROXMOXER_ERR)
    try:
        result = run(module)
    except Exception as exc:
        module.fail_json(msg=f"PVE API: {exc}", exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
