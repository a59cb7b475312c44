"""The GPU doctor's evidence collectors, on this machine's real files and tools."""

from __future__ import annotations

import http.server
import json
import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specops.infra.plugins.module_utils.gpu_doctor.evidence import (
    conf_evidence,
    container_evidence,
    cuda_evidence,
    device_evidence,
    engine_python_from_units,
    loader_paths,
    parse_allow,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import parse
from ansible_collections.specops.infra.plugins.modules.gpu_doctor_container import (
    gather as container_gather,
)
from ansible_collections.specops.infra.plugins.modules.gpu_doctor_container import server_url
from ansible_collections.specops.infra.plugins.modules.gpu_doctor_node import gather
from doctor.conftest import generated

from specops_lab.pve.testing import free_port


def test_allow_rules() -> None:
    assert parse_allow("c 195:* rwm") == {"type": "c", "major": 195, "minor": None, "access": "rwm"}
    assert parse_allow("a") == {"type": "a", "major": None, "minor": None, "access": "rwm"}
    assert parse_allow("c *:* m")["access"] == "m"
    assert parse_allow("garbage 1:2") is None


def test_conf_lines_main_section_only(pve_b: dict[str, Any]) -> None:
    text = generated(pve_b, ["0000:41:00.0"]) + (
        "lxc.cgroup2.devices.deny: c 195:3 rwm\nlxc.mount.entry: /dev/net/tun dev/net/tun none "
        "bind,create=file\ndev9: /dev/dri/renderD128\n"
        "\n[snap]\nlxc.cgroup2.devices.allow: c 509:0 rwm\n"
    )
    conf = conf_evidence(parse(text))
    assert [r["text"] for r in conf["allow"]] == [
        "lxc.cgroup2.devices.allow: c 195:2 rwm",
        "lxc.cgroup2.devices.allow: c 195:255 rwm",
        "lxc.cgroup2.devices.allow: c 511:0 rwm",
        "lxc.cgroup2.devices.allow: c 511:1 rwm",
    ]
    assert conf["deny"][0]["minor"] == 3
    assert [m["target"] for m in conf["mounts"]] == [
        "/dev/nvidia2",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert conf["devs"] == []  # renderD128 is not an NVIDIA node


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("yes", True), ("on", True), ("TRUE", True), ("0", False), ("no", False)],
)
def test_unprivileged_as_pve_reads_it(value: str, expected: bool) -> None:
    assert conf_evidence(parse(f"arch: amd64\nunprivileged: {value}\n"))["unprivileged"] is expected
    assert conf_evidence(parse("arch: amd64\n"))["unprivileged"] is False


def test_node_module_on_a_lab_tree(tmp_path: Path, host_tree: Path) -> None:
    conf_dir = host_tree / "etc/pve/lxc"
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "901.conf").write_text("arch: amd64\nlxc.cgroup2.devices.allow: c 195:0 rwm\n")
    pct = tmp_path / "pct"
    pct.write_text("#!/bin/sh\necho 'status: running'\n")
    pct.chmod(0o755)
    out = gather({"vmids": [901, 902], "root": str(host_tree), "pct_command": [str(pct)]})
    assert out["901"]["running"] is True
    assert out["901"]["host"]["uvm_major"] == 511
    assert out["901"]["paths"] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]
    assert out["902"]["conf"] is None  # no such container on this node
    assert out["902"]["running"] is None


def test_device_nodes_opened_for_real(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))  # no driver here
    os.mknod(dev / "nvidia-null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    seen = {d["path"]: d for d in device_evidence(["/dev/nvidia-uvm"], str(tmp_path))}
    assert seen["/dev/nvidia0"]["open"] == "ENXIO"
    assert (seen["/dev/nvidia0"]["major"], seen["/dev/nvidia0"]["minor"]) == (195, 0)
    assert seen["/dev/nvidia-null"]["open"] == "OK"
    assert seen["/dev/nvidia-uvm"] == {
        "path": "/dev/nvidia-uvm",
        "present": False,
        "open": "ENOENT",
    }


def test_loader_cuda_and_engine_python(tmp_path: Path) -> None:
    found = loader_paths(["libc.so.6", "libcuda.so.1"])
    assert found["libc.so.6"] is not None
    assert found["libc.so.6"].startswith("/")
    assert found["libcuda.so.1"] is None  # no NVIDIA driver on this machine
    cuda = cuda_evidence(sys.executable)
    assert cuda["driver_api"]["ok"] is False
    assert cuda["driver_api"]["step"] == "load libcuda.so.1"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    units = tmp_path / "units"
    units.mkdir()
    (units / "a.service").write_text("[Service]\nExecStart=/usr/bin/env true\n")
    (units / "b.service").write_text(
        f"[Service]\nExecStart={venv}/bin/python3 -m vllm.entrypoints.openai.api_server\n"
    )
    assert engine_python_from_units(str(units)) == f"{venv}/bin/python3"
    assert engine_python_from_units(str(tmp_path / "none")) is None


def test_container_evidence_here_server_down() -> None:
    port = free_port()
    ev = container_evidence(
        ["/dev/nvidia0"],
        cuda=False,
        server_url=server_url("0.0.0.0", port),
        served_model_name="tiny",
    )
    assert ev["devices"][0]["open"] == "ENOENT"
    assert ev["nvidia_smi"]["present"] is False
    assert ev["userspace"]["version"] is None
    assert ev["cuda"] is None
    assert ev["server"]["ok"] is False
    assert ev["server"]["url"] == f"http://127.0.0.1:{port}"
    assert ev["server"]["stage"] == "health"
    assert server_url("::1", 8000) == "http://[::1]:8000"


class _KeyedServer(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible stand-in keyed as vLLM is with VLLM_API_KEY: /health open,
    every /v1 route 401 without ``Authorization: Bearer <key>``."""

    KEY = "k-0123456789"

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _keyed(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.KEY}":
            return True
        self._answer(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, {})
        elif self._keyed():
            self._answer(200, {"data": [{"id": "tiny"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self._keyed():
            self._answer(200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def keyed_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyedServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_readiness_probe_sends_the_servers_api_key(keyed_server: int) -> None:
    """A server started with a key (inference_service_api_key_file) answers 401 to a
    probe without it: the doctor's probe sends the key it is given (verify.yml passes
    inference_service_api_key_file as gpu_doctor_server_api_key_file)."""
    params = {"paths": [], "engine_python": "", "cuda": False, "kernel_root": "/",
              "server_host": "0.0.0.0", "server_port": keyed_server,
              "served_model_name": "tiny"}  # fmt: skip
    without = container_gather({**params, "api_key": ""})["server"]
    assert (without["ok"], without["stage"]) == (False, "models")
    assert "401" in without["detail"]
    keyed = container_gather({**params, "api_key": _KeyedServer.KEY})["server"]
    assert (keyed["ok"], keyed["stage"]) == (True, "ready"), keyed
    assert _KeyedServer.KEY not in json.dumps(keyed)


def test_verify_passes_the_servers_key_file_to_the_doctor() -> None:
    repo = Path(__file__).resolve().parents[2]
    plays = yaml.safe_load((repo / "playbooks/verify.yml").read_text())
    include = next(t for p in plays for t in p.get("tasks", [])
                   if t.get("vars", {}).get("gpu_doctor_phase") == "container")  # fmt: skip
    assert include["vars"]["gpu_doctor_server_api_key_file"] == (
        "{{ inference_service_api_key_file | default('') }}"
    )
    task = yaml.safe_load((repo / "roles/gpu_doctor/tasks/container.yml").read_text())[0]
    assert "gpu_doctor_server_api_key_file" in task["specops.infra.gpu_doctor_container"]["api_key"]
