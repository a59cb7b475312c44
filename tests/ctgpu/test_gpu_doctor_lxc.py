"""The GPU doctor (playbooks/verify.yml, specops doctor) against a real LXC container.

One lab node ``doctor-b`` (the simulated host pve-b: 4x RTX PRO 6000 at minors 0-3,
nvidia-uvm major 511, PVE 8.4, cgroup v2, mknod'd nodes) and one real container whose
GPU lines the project generated (``lxc_gpu_config``, raw lines for 0000:41:00.0, minor
2) and whose userspace came from the installer stand-in. One module-scoped fixture; the
tests run in order and each breaks one thing, as an operator's node breaks:

- healthy: no finding; ``verify.yml`` in check mode and a second run change nothing;
- a stale nvidia-uvm major in the conf (506, another host's) -> ``stale nvidia-uvm major``;
- the card's allow line removed -> ``node present but not allowed``;
- a mismatched userspace from the installer stand-in -> ``userspace ≠ module``, and the
  server port nobody listens on -> ``server not answering``.

Hardware stand-in (the lab's overlay, ``gpu_doctor_simulated_hardware``): an allowed node
opens with ENXIO here (no driver behind it) and there is no CUDA driver to initialise.
The container lives in /var/lib/lxc, where the specops.lab.container connection finds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils import gpu
from ansible_collections.specops.infra.plugins.modules.lxc_gpu_config import configure

from specops_lab.nvidia_installer_standin import make_runfile
from specops_lab.pve import pct
from specops_lab.pve.layout import DEFAULT_LXCPATH, Node, init_cluster
from specops_lab.pve.testing import TEMPLATE_NAME, destroy_lab_containers, free_port

pytestmark = [pytest.mark.lxc, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NODE = "doctor-b"
VMID = 961
CT = "doctor-ct961"
CARD = "0000:41:00.0"
MODULE = "580.126.09"  # pve-b's kernel module
OTHER = "575.64.05"  # another host's userspace
MOUNTS = (
    "mp0: /proc,mp=/srv/specops-hw/proc,ro=1\n"
    "mp1: /sys,mp=/srv/specops-hw/sys,ro=1\n"
    "mp2: /srv/nvidia,mp=/srv/nvidia,ro=1\n"
)


@dataclass
class DoctorLab:
    node: Node
    conf: Path
    generated: str
    inventory: Path


def _configure(node: Node, facts_root: Path) -> None:
    facts = gpu.gather_facts(gpu.HostRoots.under(facts_root)).to_dict()
    params: dict[str, Any] = {
        "vmid": VMID,
        "gpu_facts": facts,
        "gpus": [CARD],
        "gpu_model": None,
        "gpu_count": 1,
        "method": "raw",
        "cgroup": "auto",
        "modeset": False,
        "caps": [],
        "dev_mode": "0666",
        "dev_gid": None,
        "state": "present",
        "root": str(node.root),
        "lock_timeout": 5,
        # the role's defaults (one card: no NCCL lines)
        "ipc_limits": "auto",
        "shm_size": "50%",
        "memlock": "unlimited",
    }
    assert configure(params, check_mode=False)["changed"]


def _install_userspace(node: Node, version: str) -> None:
    run = f"/srv/nvidia/NVIDIA-Linux-x86_64-{version}.run"
    proc = pct.ct_exec(node, VMID, [run, "--silent", "--no-kernel-module"], timeout=120)
    assert proc.returncode == 0, proc.stderr.decode() + proc.stdout.decode()


def _inventory(path: Path, node: Node) -> Path:
    inventory = {
        "all": {
            "children": {
                "pve_nodes": {
                    "hosts": {
                        NODE: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "gpu_doctor_host_root": str(node.root),
                            "gpu_doctor_pct_command": [
                                str(REPO / "scripts" / "lab" / "pct"),
                                "--node-root",
                                str(node.root),
                            ],
                        }
                    }
                },
                "serving": {
                    "hosts": {
                        CT: {
                            "ansible_connection": "specops.lab.container",
                            "ansible_host": node.lxc_name(VMID),
                            "ansible_python_interpreter": "/usr/bin/python3",
                            "pve_container_node": NODE,
                            "pve_container_vmid": VMID,
                            "lxc_gpu_passthrough_gpus": [CARD],
                            "lxc_gpu_passthrough_method": "raw",
                            # The lab hardware stand-in (inventory/lab/group_vars/serving/lab.yml).
                            "gpu_doctor_simulated_hardware": True,
                            "gpu_doctor_kernel_root": "/srv/specops-hw",
                        }
                    }
                },
            }
        }
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory,
    host_builder: Callable[..., Path],
    rootfs_tarball: Path,
) -> Iterator[DoctorLab]:
    tarball = rootfs_tarball
    base = tmp_path_factory.mktemp("doctor-lab")
    node = Node(name=NODE, root=base / NODE, cgroup="v2", lxcpath=DEFAULT_LXCPATH)
    cluster = init_cluster(base / "cluster", [node], name="doctorlab")
    template = node.host_path("/var/lib/vz/template/cache") / TEMPLATE_NAME
    try:
        os.link(tarball, template)
    except OSError:
        shutil.copy(tarball, template)
    try:
        host_builder("pve-b", node.root, node=NODE)
        for version in (MODULE, OTHER):
            make_runfile(version, node.host_path("/srv/nvidia"))
        pct.ct_create(
            None,
            node,
            VMID,
            ostemplate=f"local:vztmpl/{TEMPLATE_NAME}",
            options={"hostname": CT},
        )
        conf = node.ct_conf(VMID)
        conf.write_text(conf.read_text() + MOUNTS)
        _configure(node, node.root)
        pct.ct_start(node, VMID)
        _install_userspace(node, MODULE)
        yield DoctorLab(node, conf, conf.read_text(), _inventory(base / "hosts.yml", node))
    finally:
        destroy_lab_containers(cluster)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def doctor(lab: DoctorLab, *extra: str) -> tuple[int, dict[str, Any]]:
    """``specops doctor -i INV --json``: (exit code, report)."""
    proc = subprocess.run(
        [sys.executable, "-m", "specops", "doctor", "-i", str(lab.inventory), "--json", *extra],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    print(json.dumps(report["results"], indent=1)[:3000])  # the evidence, in the test log
    return proc.returncode, report


def codes(report: dict[str, Any]) -> list[str]:
    (result,) = report["results"]
    return [f["code"] for f in result["findings"]]


def reboot_with(lab: DoctorLab, text: str) -> None:
    lab.conf.write_text(text)
    pct.ct_reboot(lab.node, VMID)


def test_healthy_and_verify_changes_nothing(lab: DoctorLab) -> None:
    pid = pct.ct_status(lab.node, VMID).pid
    rc, report = doctor(lab)
    assert rc == 0
    assert codes(report) == []
    (result,) = report["results"]
    assert result["status"] == "healthy"
    assert result["checks"]["devices"] == "4/4 open"  # ENXIO: allowed, no driver here
    assert result["checks"]["nvidia_smi"] == MODULE
    assert result["checks"]["userspace"] == MODULE
    assert report["changed"] == 0
    # Check mode: the same run, nothing changed; the container and its conf untouched.
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(lab.inventory),
            str(REPO / "playbooks" / "verify.yml"),
            "--check",
        ],
        cwd=REPO,
        env={**_env(), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    stats = json.loads(proc.stdout)["stats"]
    assert set(stats) == {"localhost", NODE, CT}  # localhost: the shared preflight
    assert all(s["changed"] == 0 and s["failures"] == 0 for s in stats.values())
    assert lab.conf.read_text() == lab.generated
    assert pct.ct_status(lab.node, VMID).pid == pid


def test_stale_uvm_major_in_conf(lab: DoctorLab) -> None:
    reboot_with(lab, lab.generated.replace("c 511:", "c 506:"))
    rc, report = doctor(lab)
    assert rc == 1
    assert codes(report) == ["stale_uvm_major"]
    finding = report["results"][0]["findings"][0]
    assert finding["title"] == "stale nvidia-uvm major"
    assert "nvidia-uvm is major 511 on doctor-b" in finding["cause"]
    assert finding["evidence"] == [
        "/dev/nvidia-uvm: host 511:0, container open() EPERM",
        "/dev/nvidia-uvm-tools: host 511:1, container open() EPERM",
    ]
    assert report["changed"] == 0
    assert "c 506:0 rwm" in lab.conf.read_text()  # the doctor fixes nothing itself


def test_removed_allow_line(lab: DoctorLab) -> None:
    line = "lxc.cgroup2.devices.allow: c 195:2 rwm\n"
    assert line in lab.generated
    reboot_with(lab, lab.generated.replace(line, ""))
    rc, report = doctor(lab)
    assert rc == 1
    assert codes(report) == ["not_allowed"]
    finding = report["results"][0]["findings"][0]
    assert finding["title"] == "node present but not allowed"
    assert finding["paths"] == ["/dev/nvidia2"]
    assert finding["evidence"] == ["/dev/nvidia2: host 195:2, container open() EPERM"]
    assert report["changed"] == 0


def test_mismatched_userspace_and_silent_server(lab: DoctorLab) -> None:
    reboot_with(lab, lab.generated)
    _install_userspace(lab.node, OTHER)
    port = free_port()  # nobody listens there
    rc, report = doctor(
        lab,
        "-e",
        "inference_service_served_model_name=tiny-qwen",
        "-e",
        f"inference_service_port={port}",
    )
    assert rc == 1
    assert codes(report) == ["userspace_mismatch", "server_down"]
    mismatch, server = report["results"][0]["findings"]
    assert mismatch["title"] == "userspace ≠ module"
    assert f"userspace is {OTHER}" in mismatch["cause"]
    assert f"kernel module on doctor-b is {MODULE}" in mismatch["cause"]
    assert "Driver/library version mismatch" in mismatch["cause"]
    assert server["title"] == "server not answering"
    assert f"http://127.0.0.1:{port}" in server["cause"]
    assert report["changed"] == 0
