"""Helpers for the container lifecycle tests: a lab cluster whose LXC containers live in
/var/lib/lxc (the specops.lab.container connection's default lxcpath), an inventory
for playbooks/container.yml, and a playbook runner that reads the recap."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specops_lab.pve.layout import DEFAULT_LXCPATH, Cluster, Node, init_cluster
from specops_lab.pve.testing import TEMPLATE_NAME, ApiHandle

REPO = Path(__file__).resolve().parents[2]
NODE = "lifecycle-a"
TEMPLATE = f"local:vztmpl/{TEMPLATE_NAME}"
FAST = "lifecycle-fast"
FAST_PATH = "/var/lib/vz-fast"


def make_cluster(base: Path, template: Path) -> Cluster:
    node = Node(name=NODE, root=base / NODE, cgroup="v2", lxcpath=DEFAULT_LXCPATH)
    cluster = init_cluster(base / "cluster", [node], name="lifecycle")
    # A second dir storage, for the rootfs storage move (backup and restore onto it).
    node.host_path(FAST_PATH).mkdir(parents=True, exist_ok=True)
    with node.storage_cfg.open("a") as fh:
        fh.write(f"\ndir: {FAST}\n\tpath {FAST_PATH}\n\tcontent rootdir,images\n\tshared 0\n")
    target = node.host_path("/var/lib/vz/template/cache") / TEMPLATE_NAME
    try:
        os.link(template, target)
    except OSError:
        shutil.copy(template, target)
    return cluster


def container_vars(vmid: int, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ansible_connection": "specops.lab.container",
        "ansible_host": f"{NODE}-{vmid}",
        "ansible_python_interpreter": "/usr/bin/python3",
        "pve_container_vmid": vmid,
        "pve_container_hostname": f"lifecycle-ct{vmid}",
        "pve_container_node": NODE,
        "pve_container_ostemplate": TEMPLATE,
        "pve_container_cores": 1,
        "pve_container_memory": 512,
        "pve_container_swap": 0,
        "pve_container_rootfs_storage": "local",
        "pve_container_rootfs_size": 4,
        "pve_container_unprivileged": False,
        "pve_container_features": {"nesting": True},
        "pve_container_mounts": [
            {
                "host_path": "/var/cache/specops-models",
                "mountpoint": "/var/cache/specops",
                "shared": True,
            }
        ],
        "pve_container_onboot": True,
        "pve_container_tags": ["specops", "lifecycle"],
    }
    out.update(over)
    return out


def write_inventory(
    path: Path, cluster: Cluster, api: ApiHandle, containers: dict[str, dict[str, Any]]
) -> Path:
    node = cluster.node(NODE)
    inventory = {
        "all": {
            "vars": {
                "pve_container_api_host": api.host,
                "pve_container_api_port": api.port,
                "pve_container_api_user": api.user,
                "pve_container_api_token_id": api.token_name,
                "pve_container_api_ca_file": str(api.cert),
                "pve_container_task_timeout": 300,
                "pve_container_connect_timeout": 60,
            },
            "children": {
                "pve_nodes": {
                    "hosts": {
                        NODE: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "specops_host_root": str(node.root),
                        }
                    }
                },
                "serving": {"hosts": containers},
            },
        }
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@dataclass
class PlayResult:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]

    def count(self, host: str, key: str) -> int:
        return self.recap.get(host, {}).get(key, 0)


_RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")


def run_playbook(inventory: Path, api: ApiHandle, *args: str, timeout: float = 600) -> PlayResult:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "PROXMOX_TOKEN_SECRET": api.token_value,
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_FACT_CACHING": "memory",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            str(REPO / "playbooks" / "container.yml"),
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    recap: dict[str, dict[str, int]] = {}
    for line in output.splitlines():
        m = _RECAP.match(line.strip())
        if m:
            recap[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return PlayResult(proc.returncode, output, recap)


# What community.proxmox.proxmox 1.4.0 sends for create (state=present, update=false) and
# start (state=started), read from its source (plugins/modules/proxmox.py and
# module_utils/proxmox.py): version checks, the VM list, the template check, the probe of
# an existing rootfs, the create with the arguments the role passes, status and tasks.
COMMUNITY_PROXMOX_CALLS: list[tuple[str, str, list[str]]] = [
    ("GET", "/version", []),
    ("GET", "/cluster/resources", ["type"]),
    ("GET", "/nodes/{node}/storage/{storage}/content", []),
    ("GET", "/nodes/{node}/lxc/{vmid}/config", []),
    (
        "POST",
        "/nodes/{node}/lxc",
        [
            "vmid",
            "ostemplate",
            "hostname",
            "cores",
            "memory",
            "swap",
            "unprivileged",
            "onboot",
            "features",
            "rootfs",
            "mp0",
            "net0",
            "storage",
            "force",
            "ssh-public-keys",
        ],
    ),
    ("GET", "/nodes/{node}/lxc/{vmid}/status/current", []),
    ("POST", "/nodes/{node}/lxc/{vmid}/status/start", []),
    ("GET", "/nodes/{node}/tasks/{upid}/status", []),
    ("GET", "/nodes/{node}/tasks/{upid}/log", []),
]
