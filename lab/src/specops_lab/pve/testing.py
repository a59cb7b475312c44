"""Helpers for tests that need a lab PVE cluster or the API stand-in.

``running_api(cluster_dir)`` starts ``specops lab api serve`` as a child process on a
free 127.0.0.1 port with a fresh random token and stops it on exit; use it from any
test area (a pytest fixture in ``tests/lab/conftest.py`` wraps it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specops_lab.paths import TEMPLATE_NAME
from specops_lab.pve.layout import Cluster, Node, init_cluster
from specops_lab.pve.pct import ct_exec

__all__ = [
    "TEMPLATE_NAME",
    "ApiHandle",
    "free_port",
    "make_test_cluster",
    "open_devices_in_ct",
    "running_api",
    "stop_lab_containers",
]

_REPO = Path(__file__).resolve().parents[4]


def make_test_cluster(
    base: Path,
    template: Path | None,
    *,
    names: tuple[str, ...] = ("pvetest-a", "pvetest-b"),
    cgroup: str = "v2",
) -> Cluster:
    """A lab cluster under ``base`` (own lxcpath), the template in each node's storage."""
    nodes = [Node(name=n, root=base / n, cgroup=cgroup, lxcpath=base / "lxc") for n in names]
    cluster = init_cluster(base / "cluster", nodes, name="pvetest")
    if template is not None:
        for node in nodes:
            target = node.host_path("/var/lib/vz/template/cache") / TEMPLATE_NAME
            try:
                os.link(template, target)
            except OSError:
                shutil.copy(template, target)
    return cluster


@dataclass(frozen=True)
class ApiHandle:
    host: str
    port: int
    cert: Path  # pass as verify_ssl= (proxmoxer) / verify= (requests, httpx)
    user: str  # root@pam
    token_name: str
    token_value: str

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}/api2/json"

    @property
    def auth_header(self) -> str:
        return f"PVEAPIToken={self.user}!{self.token_name}={self.token_value}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_api(cluster_dir: Path, *, timeout: float = 30) -> Iterator[ApiHandle]:
    """Run the API stand-in for ``cluster_dir`` while the block runs."""
    token = secrets.token_hex(16)
    tokens_file = cluster_dir / "tokens"
    tokens_file.write_text(f"root@pam!specops={token}\n")
    tokens_file.chmod(0o600)
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [
            str(_REPO / "src"),
            str(_REPO / "lab" / "src"),
            str(_REPO / "collections"),
            env.get("PYTHONPATH", ""),
        ]
    )
    log = (cluster_dir / "api.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specops_lab.pve.cli",
            "api",
            "serve",
            "--cluster",
            str(cluster_dir),
            "--port",
            str(port),
            "--tokens-file",
            str(tokens_file),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"API stand-in exited: {(cluster_dir / 'api.log').read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("API stand-in did not listen in time")
            time.sleep(0.1)
        yield ApiHandle(
            "127.0.0.1", port, cluster_dir / "pki" / "pve-ssl.pem", "root@pam", "specops", token
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _of_node(node: Node, lxc_dir: Path) -> bool:
    """Whether the LXC container in ``lxc_dir`` is this node's: its rootfs lies under the
    node's root. LXC names are ``<node>-<vmid>`` in a shared lxcpath, so two labs whose
    nodes share a name (a test's lab in a temp dir, the lab in /var/lib/specops/lab)
    must not stop or remove each other's containers."""
    try:
        text = (lxc_dir / "config").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "lxc.rootfs.path":
            path = value.strip().removeprefix("dir:")
            return path.startswith(f"{node.root}/")
    return False


def stop_lab_containers(cluster: Cluster, *, remove_rootfs: bool = True) -> None:
    """Hard-stop every LXC container of the cluster's nodes (test teardown); by default
    also delete the container rootfs dirs (hundreds of MB each). Only containers whose
    rootfs is under one of the cluster's node roots are touched."""
    for node in cluster.nodes.values():
        for conf in sorted(node.lxc_conf_dir.glob("*.conf")):
            name = node.lxc_name(int(conf.stem))
            if not _of_node(node, node.lxcpath / name):
                continue
            subprocess.run(
                ["lxc-stop", "-n", name, "-P", str(node.lxcpath), "-k"],
                capture_output=True,
                check=False,
                timeout=60,
            )
        if node.lxcpath.is_dir():
            for d in node.lxcpath.glob(f"{node.name}-*"):
                if not _of_node(node, d):
                    continue
                subprocess.run(
                    ["lxc-stop", "-n", d.name, "-P", str(node.lxcpath), "-k"],
                    capture_output=True,
                    check=False,
                    timeout=60,
                )
        if remove_rootfs:
            shutil.rmtree(node.host_path("/var/lib/vz/images"), ignore_errors=True)


def destroy_lab_containers(cluster: Cluster) -> list[str]:
    """Stop every lab container and remove it (conf, rootfs, generated LXC config): a
    clean cluster, as after ``pct destroy`` of each. Returns the names removed."""
    stop_lab_containers(cluster, remove_rootfs=True)
    removed: list[str] = []
    for node in cluster.nodes.values():
        for conf in sorted(node.lxc_conf_dir.glob("*.conf")):
            removed.append(node.lxc_name(int(conf.stem)))
            conf.unlink()
        if node.lxcpath.is_dir():
            for d in sorted(node.lxcpath.glob(f"{node.name}-*")):
                if _of_node(node, d):
                    shutil.rmtree(d, ignore_errors=True)
    return removed


_OPEN_DEVICES = """
import errno, os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "OK")
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
"""


def open_devices_in_ct(node: Node, vmid: int, *paths: str) -> dict[str, str]:
    """Open each device read-write inside the running container; path -> ``OK`` or the
    errno name. On this machine a passed-through NVIDIA node gives ``ENXIO`` (no driver
    behind it) when the device cgroup allows it and ``EPERM`` when it does not."""
    proc = ct_exec(node, vmid, ["python3", "-c", _OPEN_DEVICES, *paths], timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"device probe in CT {vmid} failed: {proc.stderr.decode()}")
    return dict(line.split() for line in proc.stdout.decode().splitlines())
