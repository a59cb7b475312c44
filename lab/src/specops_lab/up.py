"""Bring the whole lab up (or down) in one idempotent step.

``specops lab up`` composes the lab's parts into what ``inventory/lab`` expects:

1. a lab PVE cluster with one node per hardware description in
   ``inventory/lab/hardware/<node>.yml`` (node roots under the lab dir);
2. each node's simulated host tree (sysfs, procfs, /dev, VM confs), built once: a
   re-run keeps the tree, because roles change it (driver loaded, cards released) and a
   rebuild would undo their work. ``--reset`` rebuilds it from the description;
3. the container template (the debootstrapped rootfs that ``scripts/setup.sh image``
   caches) in each node's ``local:vztmpl`` storage;
4. an API token (random, mode 0600, never printed) and the PVE REST API stand-in on
   127.0.0.1, started detached unless one already answers with that token;
5. each node's system stand-ins (``specops_lab.node``: its update-initramfs, boot
   loaders, reboot, systemd) and one PCI stand-in process for all nodes that applies
   the bind/unbind writes to each tree as the kernel would (``specops_lab.pci_standin``,
   detached);
6. the lab's container network (``specops_lab.network``): the bridge of its one subnet
   definition, after checking that nothing on this machine uses that subnet.

Every step says what it did; a second run changes nothing and says so.
``specops lab down`` stops what runs (API, PCI stand-ins, the nodes' unit processes,
containers); ``--destroy`` also removes the containers, the network and the node trees,
so that the next ``up`` starts from the hardware descriptions again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specops.errors import SpecopsError, ValidationError
from specops_lab import network
from specops_lab.assets import link_or_copy, stage_node_assets
from specops_lab.fleet import write_fleet
from specops_lab.hosttree import build_tree, load_spec
from specops_lab.node import HARDWARE_FILE, install_tools, stop_node_processes
from specops_lab.paths import TEMPLATE_NAME, cache_root, lab_dir, template_tarball
from specops_lab.pve.layout import Cluster, Node, init_cluster
from specops_lab.pve.testing import destroy_lab_containers, stop_lab_containers

__all__ = ["LabPaths", "down", "register", "up"]

REPO_ROOT = Path(__file__).resolve().parents[3]
TOKEN_USER = "root@pam"  # noqa: S105  (a PVE user name, not a secret)
TOKEN_ID = "specops"  # noqa: S105  (the token's name, not its secret)
# Every token the stand-in knows (one secret): root's, and the example inventory's
# privilege-separated token of its dedicated user, which the lab inventory uses.
TOKENS = ((TOKEN_USER, TOKEN_ID), ("specops@pve", "automation"))


@dataclass(frozen=True)
class LabPaths:
    """Where the lab keeps its state; the lab inventory reads the same paths."""

    lab_dir: Path

    @property
    def cluster_dir(self) -> Path:
        return self.lab_dir / "cluster"

    @property
    def secrets_dir(self) -> Path:
        return self.lab_dir / "secrets"

    @property
    def tokens_file(self) -> Path:
        """``USER@REALM!TOKENID=SECRET`` lines, read by the API stand-in."""
        return self.secrets_dir / "pve-api-tokens"

    @property
    def token_secret_file(self) -> Path:
        """The secret alone, for the inventory's ``lookup('file', ...)`` (no_log)."""
        return self.secrets_dir / "pve-api-token-secret"

    @property
    def pki_dir(self) -> Path:
        return self.cluster_dir / "pki"

    @property
    def pidfile(self) -> Path:
        return self.lab_dir / "api.pid"

    @property
    def api_log(self) -> Path:
        return self.lab_dir / "api.log"

    @property
    def api_requests(self) -> Path:
        """The API stand-in's request log: one line per request (method, path, status)."""
        return self.lab_dir / "api-requests.log"

    def node_root(self, node: str) -> Path:
        return self.lab_dir / node

    def tree_stamp(self, node: str) -> Path:
        return self.node_root(node) / "etc" / "specops-lab-hardware.sha256"

    def pci_pidfile(self, node: str) -> Path:
        return self.lab_dir / f"pci-standin-{node}.pid"


def _say(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def _hardware_specs(hardware_dir: Path) -> dict[str, Path]:
    specs = {p.stem: p for p in sorted(hardware_dir.glob("*.yml"))}
    if not specs:
        raise ValidationError("--hardware", f"no <node>.yml host descriptions in {hardware_dir}")
    return specs


def _ensure_cluster(paths: LabPaths, nodes: list[str], cgroup: str) -> Cluster:
    wanted = [Node(name=n, root=paths.node_root(n), cgroup=cgroup) for n in nodes]
    if (paths.cluster_dir / "cluster.json").exists():
        cluster = Cluster.load(paths.cluster_dir)
        if sorted(cluster.nodes) == sorted(nodes):
            _say(f"cluster {cluster.name}: nodes {', '.join(sorted(nodes))} present")
            return cluster
        _say(f"cluster: nodes changed to {', '.join(nodes)}, rewriting cluster.json")
    cluster = init_cluster(paths.cluster_dir, wanted, name="lab")
    _say(f"cluster lab: initialised nodes {', '.join(nodes)} under {paths.lab_dir}")
    return cluster


def _ensure_tree(paths: LabPaths, node: str, spec_file: Path, *, reset: bool) -> None:
    digest = hashlib.sha256(spec_file.read_bytes()).hexdigest()
    stamp = paths.tree_stamp(node)
    if not reset and stamp.exists() and stamp.read_text().strip() == digest:
        _say(f"{node}: host tree present (from {spec_file.name}; --reset rebuilds it)")
        return
    build_tree(load_spec(spec_file), paths.node_root(node), replace_existing=True)
    # The node keeps its description: its emulated boot rebuilds from it.
    described = paths.node_root(node) / HARDWARE_FILE
    described.parent.mkdir(parents=True, exist_ok=True)
    described.write_text(spec_file.read_text())
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest + "\n")
    _say(f"{node}: built host tree from {spec_file}")


def _ensure_template(node: Node, template: Path) -> None:
    target = node.host_path("/var/lib/vz/template/cache") / TEMPLATE_NAME
    if target.exists() and (
        os.path.samefile(target, template)
        or (target.stat().st_size, target.stat().st_mtime_ns)
        == (template.stat().st_size, template.stat().st_mtime_ns)
    ):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(template, target)
    _say(f"{node.name}: template local:vztmpl/{TEMPLATE_NAME}")


def _ensure_token(paths: LabPaths) -> str:
    """One secret (mode 0600, never printed) for the lab's tokens: root@pam!specops and
    the example inventory's privilege-separated specops@pve!automation (the stand-in has
    no users or ACLs, so both may do everything), which the lab inventory uses."""
    paths.secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if paths.token_secret_file.exists():
        secret = paths.token_secret_file.read_text().strip()
    else:
        secret = secrets.token_hex(16)
    want = "".join(f"{user}!{tid}={secret}\n" for user, tid in TOKENS)
    current = paths.tokens_file.read_text() if paths.tokens_file.exists() else ""
    if paths.token_secret_file.exists() and current == want:
        return secret
    old_umask = os.umask(0o077)
    try:
        paths.token_secret_file.write_text(secret + "\n")
        paths.tokens_file.write_text(want)
    finally:
        os.umask(old_umask)
    names = ", ".join(f"{user}!{tid}" for user, tid in TOKENS)
    _say(f"API tokens {names} (secret in {paths.token_secret_file})")
    return secret


def _api_answers(port: int, secret: str, cert: Path) -> bool:
    if not cert.exists():
        return False
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False  # the stand-in's self-signed cert names the node, not 127.0.0.1
    try:
        resp = httpx.get(
            f"https://127.0.0.1:{port}/api2/json/version",
            headers={"Authorization": f"PVEAPIToken={TOKEN_USER}!{TOKEN_ID}={secret}"},
            verify=ctx,
            timeout=3,
        )
    except (httpx.HTTPError, OSError, ssl.SSLError):
        return False
    return resp.status_code == 200


def _ensure_api(paths: LabPaths, port: int, secret: str) -> None:
    cert = paths.pki_dir / "pve-ssl.pem"
    if _api_answers(port, secret, cert):
        _say(f"API stand-in answers on https://127.0.0.1:{port}")
        return
    _stop_api(paths)
    cmd = [
        sys.executable,
        "-m",
        "specops.cli",
        "lab",
        "api",
        "serve",
        "--cluster",
        str(paths.cluster_dir),
        "--port",
        str(port),
        "--tokens-file",
        str(paths.tokens_file),
        "--cert-dir",
        str(paths.pki_dir),
        "--quiet",
        "--request-log",
        str(paths.api_requests),
    ]
    pid = _spawn(cmd, paths.api_log)
    paths.pidfile.write_text(f"{pid}\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            break  # it exited: the log says why
        if _api_answers(port, secret, cert):
            _say(f"API stand-in started on https://127.0.0.1:{port} (pid {pid})")
            return
        time.sleep(0.3)
    tail = paths.api_log.read_text(errors="replace").splitlines()[-20:]
    raise SpecopsError(
        f"the API stand-in did not answer on 127.0.0.1:{port} within 30 s; "
        f"log {paths.api_log}:\n" + "\n".join(tail)
    )


def _open_fds() -> list[int]:
    """This process's open descriptors above stderr."""
    listed = [int(fd) for fd in os.listdir("/proc/self/fd")]
    open_now = []
    for fd in listed:  # the listing's own descriptor is closed by now
        try:
            os.fstat(fd)
        except OSError:
            continue
        if fd > 2:
            open_now.append(fd)
    return open_now


def _spawn(cmd: list[str], log: Path) -> int:
    """A daemon that outlives this command, by design: spawned in its own session with
    no Popen object to reap it, its output appended to ``log``. It keeps no descriptor of
    its caller's but the log: a lock the caller holds (``flock /tmp/specops-lab.lock
    specops lab up``) is not held on by the lab's daemons after the caller ends."""
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return os.posix_spawn(
            cmd[0],
            cmd,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
                *((os.POSIX_SPAWN_CLOSE, fd) for fd in _open_fds()),
            ],
            setsid=True,
        )
    finally:
        os.close(log_fd)


def _running(pidfile: Path, *marks: bytes) -> int | None:
    """The pid in ``pidfile`` when that process is still the one started (its command
    line has ``marks``); a recycled pid is not."""
    if not pidfile.exists():
        return None
    text = pidfile.read_text().strip()
    pid = int(text) if text.isdigit() else 0
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return pid if pid > 0 and all(m in cmdline for m in marks) else None


def _ensure_pci_standin(paths: LabPaths, nodes: list[str]) -> None:
    """One PCI stand-in process for every node (a fleet of 32 has one poller, not 32);
    each node's pidfile names it. Restarted when the nodes changed."""
    roots = [str(paths.node_root(n)) for n in nodes]
    pids = {_running(paths.pci_pidfile(n), b"specops_lab.pci_standin", r.encode())
            for n, r in zip(nodes, roots, strict=True)}  # fmt: skip
    others = [p for p in paths.lab_dir.glob("pci-standin-*.pid")
              if p.stem.removeprefix("pci-standin-") not in nodes]  # fmt: skip
    if len(pids) == 1 and None not in pids and not others:
        return
    for pidfile in sorted(paths.lab_dir.glob("pci-standin-*.pid")):
        _stop_pid(pidfile, b"specops_lab.pci_standin")
    cmd = [sys.executable, "-m", "specops_lab.pci_standin", "--interval", "0.05"]
    for node, root in zip(nodes, roots, strict=True):
        cmd += ["--root", root, "--log", str(paths.lab_dir / f"pci-standin-{node}.log")]
    pid = _spawn(cmd, paths.lab_dir / "pci-standin.log")
    for node in nodes:
        paths.pci_pidfile(node).write_text(f"{pid}\n")
    _say(
        f"{', '.join(nodes)}: PCI stand-in started (pid {pid}): bind/unbind/drivers_probe "
        "apply to each node's tree"
    )


def _stop_pid(pidfile: Path, *marks: bytes) -> bool:
    pid = _running(pidfile, *marks)
    pidfile.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        with contextlib.suppress(ChildProcessError):  # reap it if this process started it
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    return True


def _stop_api(paths: LabPaths) -> bool:
    if not paths.pidfile.exists():
        return False
    pid = int(paths.pidfile.read_text().strip() or 0)
    paths.pidfile.unlink()
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    # Only the process this module started: a recycled pid is left alone.
    if b"serve" not in cmdline or str(paths.cluster_dir).encode() not in cmdline:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        with contextlib.suppress(ChildProcessError):  # reap it if this process started it
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    return True


def up(
    paths: LabPaths,
    *,
    hardware_dir: Path,
    template: Path,
    cache: Path | None = None,
    port: int = 8006,
    cgroup: str = "v2",
    reset: bool = False,
    with_network: bool = True,
) -> dict[str, Any]:
    """Bring the lab to its described state; returns what the inventory needs.
    ``with_network=False`` leaves this machine's network alone (tests of the rest)."""
    if os.geteuid() != 0:
        raise SpecopsError("specops lab up needs root (mknod, LXC)")
    if not template.is_file():
        raise ValidationError(
            "--template", f"{template} does not exist (run scripts/setup.sh image first)"
        )
    cache = cache if cache is not None else cache_root()
    specs = _hardware_specs(hardware_dir)
    lab_net = network.load()
    if with_network:
        network.ensure_up(lab_net, _say)
    cluster = _ensure_cluster(paths, list(specs), cgroup)
    _remove_trees(paths, keep=set(specs))
    for name, spec_file in specs.items():
        _ensure_tree(paths, name, spec_file, reset=reset)
        _ensure_template(cluster.node(name), template)
        # The installer stand-in of the node's described driver: the host role installs
        # it on the node, the node's containers install its userspace from it.
        nvidia = load_spec(spec_file).nvidia
        version = nvidia.version if nvidia is not None else None
        for part in stage_node_assets(paths.node_root(name), cache, version):
            _say(f"{name}: /srv/specops-lab/{part} staged for its containers")
        for tool in install_tools(paths.node_root(name)):
            _say(f"{name}: /{tool} (the node's stand-in)")
    _ensure_pci_standin(paths, list(specs))
    secret = _ensure_token(paths)
    _ensure_api(paths, port, secret)
    return {
        "api": f"https://127.0.0.1:{port}/api2/json",
        "cert": str(paths.pki_dir / "pve-ssl.pem"),
        "token": f"{TOKEN_USER}!{TOKEN_ID}",
        "token_secret_file": str(paths.token_secret_file),
        "nodes": {n: str(paths.node_root(n)) for n in specs},
        "network": {
            "bridge": lab_net.bridge,
            "subnet": str(lab_net.subnet),
            "gateway": str(lab_net.gateway),
        },
    }


def down(paths: LabPaths, *, destroy: bool = False) -> None:  # noqa: PLR0912  (stop in order)
    """Stop the API stand-in, the PCI stand-ins, the nodes' unit processes and every lab
    container (their files stay unless ``destroy``: then the containers, the lab network
    and the node trees are removed, for a deploy from the hardware descriptions)."""
    if _stop_api(paths):
        _say("API stand-in stopped")
    for pidfile in sorted(paths.lab_dir.glob("pci-standin-*.pid")):
        if _stop_pid(pidfile, b"specops_lab.pci_standin"):
            _say(f"{pidfile.stem.removeprefix('pci-standin-')}: PCI stand-in stopped")
    cluster = (
        Cluster.load(paths.cluster_dir) if (paths.cluster_dir / "cluster.json").exists() else None
    )
    if cluster is not None:
        for node in cluster.nodes.values():
            if stop_node_processes(node.root):
                _say(f"{node.name}: its units' processes stopped")
        if destroy:
            for name in destroy_lab_containers(cluster):
                _say(f"container {name} destroyed")
        else:
            stop_lab_containers(cluster, remove_rootfs=False)
            _say("lab containers stopped")
    if not destroy:
        return
    network.ensure_down(network.load(), _say)
    if cluster is not None:
        for node in cluster.nodes.values():
            if node.root.is_dir() and node.root.parent == paths.lab_dir:
                shutil.rmtree(node.root)
                _say(f"{node.name}: node tree removed (the next up builds it from its description)")
        shutil.rmtree(paths.cluster_dir, ignore_errors=True)
    _remove_trees(paths, keep=set())
    shutil.rmtree(paths.lab_dir / "fleet", ignore_errors=True)


def _remove_trees(paths: LabPaths, *, keep: set[str]) -> None:
    """Remove the node trees of the lab directory that are not ``keep``'s: the nodes a
    lab of another shape left (a fleet of N after the two-node lab, or the reverse).
    Kept, such a tree would be taken as built the next time its node is in the lab, in
    whatever state its last run left it, not from its description."""
    for root in sorted(
        p.parent.parent for p in paths.lab_dir.glob("*/etc/specops-lab-hardware.sha256")
    ):
        if root.name in keep or root.parent != paths.lab_dir:
            continue
        stop_node_processes(root)
        shutil.rmtree(root)
        _say(f"{root.name}: node tree removed (not a node of this lab; the next up builds it)")


def _cmd_up(args: argparse.Namespace) -> int:
    # --json: stdout carries the JSON alone, the progress goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        info = _up_from_args(args)
    if args.json:
        print(json.dumps(info, indent=2))
    return 0


def _up_from_args(args: argparse.Namespace) -> dict[str, Any]:
    hardware = Path(args.hardware or REPO_ROOT / "inventory" / "lab" / "hardware")
    inventory: Path | None = None
    if args.nodes is not None:
        if args.hardware is not None:
            raise ValidationError("--nodes", "give --nodes or --hardware, not both")
        files = write_fleet(Path(args.lab_dir), args.nodes)
        hardware, inventory = files.hardware_dir, files.inventory_dir
        shapes = ", ".join(f"{n} ({s})" for n, s in files.nodes.items())
        _say(f"fleet of {len(files.nodes)}: {shapes}; inventory {inventory}")
    info = up(
        LabPaths(Path(args.lab_dir)),
        hardware_dir=hardware,
        template=Path(args.template),
        port=args.port,
        reset=args.reset,
    )
    if inventory is not None:
        info["inventory"] = str(inventory)
    return info


def _cmd_down(args: argparse.Namespace) -> int:
    down(LabPaths(Path(args.lab_dir)), destroy=args.destroy)
    return 0


def register(lab_subparsers: Any) -> None:
    """``specops lab up`` / ``specops lab down``."""
    p_up = lab_subparsers.add_parser("up", help="bring the whole lab up (idempotent)")
    p_up.add_argument("--lab-dir", default=str(lab_dir()), help="lab state directory")
    p_up.add_argument(
        "--hardware",
        default=None,
        help="directory of <node>.yml host descriptions (default: inventory/lab/hardware)",
    )
    p_up.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="a fleet of N nodes of the lab's shapes (specops_lab.fleet), with its own "
        "inventory under <lab dir>/fleet/inventory",
    )
    p_up.add_argument(
        "--template",
        default=str(template_tarball()),
        help="container template tarball (scripts/setup.sh image makes it)",
    )
    p_up.add_argument("--port", type=int, default=8006, help="API stand-in port on 127.0.0.1")
    p_up.add_argument("--reset", action="store_true", help="rebuild the simulated host trees")
    p_up.add_argument("--json", action="store_true", help="print what the inventory needs")
    p_up.set_defaults(func=_cmd_up)
    p_down = lab_subparsers.add_parser("down", help="stop the API stand-in and lab containers")
    p_down.add_argument("--lab-dir", default=str(lab_dir()), help="lab state directory")
    p_down.add_argument(
        "--destroy", action="store_true", help="also remove every lab container (clean state)"
    )
    p_down.set_defaults(func=_cmd_down)
