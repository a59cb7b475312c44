#!/usr/bin/python
"""Ansible module gpu_doctor_container: a container's own evidence of its GPU path."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_doctor_container
short_description: Read what a serving container shows of its GPU path (GPU doctor)
description:
  - Runs inside the container. For each device path (those its node's conf gives, plus
    every C(/dev/nvidia*) there) records whether it is there, its major:minor and what
    C(open(O_RDWR)) answers (C(OK), or the errno name such as C(EPERM) when the device
    cgroup denies it). Runs C(nvidia-smi --query-gpu=driver_version --format=csv,noheader),
    reads the userspace driver (the file the loader resolves C(libnvidia-ml.so.1) to,
    the installed libnvidia-ml versions), initialises CUDA (driver API through
    C(libcuda.so.1) - init, a context, a 1 MiB allocation - then torch when the engine's
    Python has a CUDA build) with the engine venv's own Python, and probes the server's
    readiness (health, model list, one generated token).
  - Returns C(evidence) and C(ansible_facts.specops_gpu_doctor_container).
  - Writes nothing; check mode is the same run.
version_added: "0.1.0"
author: specops maintainers (!UNKNOWN)
extends_documentation_fragment:
  - specops.infra.attributes
attributes:
  check_mode:
    support: full
    details:
      - It changes nothing; check mode is the same run.
  diff_mode:
    support: N/A
    details:
      - It changes nothing.
options:
  paths:
    description: Device paths to look at (the node evidence's C(paths)).
    type: list
    elements: str
    default: []
  engine_python:
    description:
      - The engine venv's Python for the CUDA check. Empty takes the venv Python a system
        unit runs (C(ExecStart=<venv>/bin/python ...) in C(/etc/systemd/system)), else the
        Python this module runs with.
    type: str
    default: ""
  cuda:
    description: Initialise CUDA (off only where there is no CUDA driver, as in the lab).
    type: bool
    default: true
  kernel_root:
    description: Root under which the container reads the kernel module version it sees.
    type: path
    default: /
  server_host:
    description: Address the server listens on (a wildcard is probed on 127.0.0.1).
    type: str
    default: 127.0.0.1
  server_port:
    description: Port of the server.
    type: int
    default: 8000
  served_model_name:
    description: Model name the server serves; empty skips the readiness probe.
    type: str
    default: ""
  api_key:
    description:
      - The server's API key, sent as a bearer token by the readiness probe (a server
        started with a key answers 401 without it). Empty - none. Never logged.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read the container's evidence.
  specops.infra.gpu_doctor_container:
    paths: [/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools]
    served_model_name: qwen3-27b
    server_port: 30000
"""

RETURN = r"""
evidence:
  description: devices, nvidia_smi, userspace, cuda, server, build (the engine build its unit runs; see module_utils/gpu_doctor/evidence.py).
  returned: always
  type: dict
"""

# Imports follow the documentation blocks, as Ansible modules lay them out.
import sys
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    container_evidence,
)

_WILDCARD = ("0.0.0.0", "::", "")  # noqa: S104 - addresses a server listens on, probed on loopback


def server_url(host: str, port: int) -> str:
    """Where the server is reached from inside the container."""
    host = "127.0.0.1" if host in _WILDCARD else host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def gather(params: dict[str, Any]) -> dict[str, Any]:
    """The module's work as a plain function (pytest calls it directly)."""
    served = params["served_model_name"] or ""
    return container_evidence(
        params["paths"],
        engine_python=params["engine_python"] or None,
        fallback_python=sys.executable,
        cuda=params["cuda"],
        kernel_root=params["kernel_root"],
        server_url=server_url(params["server_host"], params["server_port"]) if served else None,
        served_model_name=served or None,
        api_key=params.get("api_key") or None,
    )


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "str", "default": []},
            "engine_python": {"type": "str", "default": ""},
            "cuda": {"type": "bool", "default": True},
            "kernel_root": {"type": "path", "default": "/"},
            "server_host": {"type": "str", "default": "127.0.0.1"},
            "server_port": {"type": "int", "default": 8000},
            "served_model_name": {"type": "str", "default": ""},
            "api_key": {"type": "str", "default": "", "no_log": True},
        },
        supports_check_mode=True,
    )
    bad = [p for p in module.params["paths"] if not p.startswith("/dev/")]
    if bad:
        module.fail_json(msg=f"paths: {bad} are not device paths under /dev")
    if not 1 <= module.params["server_port"] <= 65535:
        module.fail_json(msg=f"server_port: {module.params['server_port']} is not a TCP port")
    evidence = gather(module.params)
    module.exit_json(
        changed=False,
        evidence=evidence,
        ansible_facts={"specops_gpu_doctor_container": evidence},
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
