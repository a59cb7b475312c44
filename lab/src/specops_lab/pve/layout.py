"""Where a lab "PVE host" keeps its files, and how lab hosts form a cluster.

A lab node is a directory that plays the node's ``/``: ``<root>/etc/pve/lxc/<vmid>.conf``,
``<root>/etc/pve/qemu-server``, ``<root>/etc/pve/mapping/pci.cfg``,
``<root>/etc/pve/storage.cfg``, ``<root>/var/lib/vz`` (the ``local`` dir storage:
``template/cache``, ``images/<vmid>/``, ``dump``), ``<root>/dev`` (mknod'd device nodes),
and (written by the GPU-facts lab helper) ``<root>/sys`` and ``<root>/proc``. Every host
path a PVE conf names (``devN: /dev/nvidia0``, a bind mount source) is read under the
node root: :meth:`Node.host_path`.

A cluster is a directory with ``cluster.json``::

    {"name": "lab", "nodes": [{"name": "pve-a", "root": "/var/lib/specops/lab/pve-a",
                               "cgroup": "v2", "lxcpath": "/var/lib/lxc"}]}

``cgroup`` is the cgroup version of the emulated PVE host (v2: PVE 7+, v1: PVE 6);
``lxcpath`` is where the generated LXC configs go (default ``/var/lib/lxc`` so that
``lxc-attach -n <node>-<vmid>`` and the specops.lab.container connection find them).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from specops.errors import ValidationError
from specops_lab.paths import lab_dir

__all__ = [
    "DEFAULT_LAB_DIR",
    "DEFAULT_LXCPATH",
    "Cluster",
    "Node",
    "Storage",
    "init_cluster",
    "init_node",
    "read_storage_cfg",
]

DEFAULT_LAB_DIR = lab_dir()  # the CLI default; read once when the CLI starts
DEFAULT_LXCPATH = Path(os.environ.get("SPECOPS_LAB_LXCPATH", "/var/lib/lxc"))
_NODE_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")

DEFAULT_STORAGE_CFG = """\
dir: local
\tpath /var/lib/vz
\tcontent iso,vztmpl,backup,rootdir,images
\tshared 0
"""


@dataclass(frozen=True)
class Storage:
    """One ``storage.cfg`` entry (only ``dir`` storages are emulated)."""

    id: str
    type: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.options.get("path", "")

    @property
    def content(self) -> list[str]:
        return [c for c in self.options.get("content", "").split(",") if c]

    @property
    def shared(self) -> bool:
        return self.options.get("shared", "0") == "1"


def read_storage_cfg(text: str) -> dict[str, Storage]:
    """Parse PVE's section-config ``storage.cfg`` (``type: id`` then indented options)."""
    out: dict[str, Storage] = {}
    current: Storage | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[0] not in " \t":
            m = re.match(r"^([a-z]+):\s*(\S+)\s*$", raw)
            if not m:
                raise ValidationError(f"storage.cfg line {number}", f"want 'type: id', got {raw!r}")
            current = Storage(m.group(2), m.group(1), {})
            out[current.id] = current
            continue
        if current is None:
            raise ValidationError(f"storage.cfg line {number}", "option before any storage")
        key, _, value = raw.strip().partition(" ")
        current.options[key] = value.strip()
    return out


@dataclass(frozen=True)
class Node:
    """One lab PVE host: a name and the directory that is its ``/``."""

    name: str
    root: Path
    cgroup: str = "v2"
    lxcpath: Path = DEFAULT_LXCPATH

    def __post_init__(self) -> None:
        if not _NODE_RE.match(self.name):
            raise ValidationError("node.name", f"must be a host name (got {self.name!r})")
        if not self.root.is_absolute() or any(ch.isspace() for ch in str(self.root)):
            raise ValidationError(
                "node.root", f"must be an absolute path without spaces (got {str(self.root)!r})"
            )
        if self.cgroup not in ("v1", "v2"):
            raise ValidationError("node.cgroup", f"must be v1 or v2 (got {self.cgroup!r})")

    def host_path(self, path: str | os.PathLike[str]) -> Path:
        """The lab file behind the node's absolute path ``path`` (``/dev/x`` -> root/dev/x)."""
        text = os.fspath(path)
        if not text.startswith("/"):
            raise ValidationError("path", f"must be absolute (got {text!r})")
        return self.root / os.path.normpath(text).lstrip("/")

    @property
    def lxc_conf_dir(self) -> Path:
        return self.host_path("/etc/pve/lxc")

    @property
    def qemu_conf_dir(self) -> Path:
        return self.host_path("/etc/pve/qemu-server")

    @property
    def pci_mapping_cfg(self) -> Path:
        return self.host_path("/etc/pve/mapping/pci.cfg")

    @property
    def storage_cfg(self) -> Path:
        return self.host_path("/etc/pve/storage.cfg")

    @property
    def task_dir(self) -> Path:
        return self.host_path("/var/log/pve/tasks")

    @property
    def lock_dir(self) -> Path:
        return self.host_path("/run/lock/lxc")

    @property
    def qemu_run_dir(self) -> Path:
        return self.host_path("/run/qemu-server")

    def ct_conf(self, vmid: int) -> Path:
        return self.lxc_conf_dir / f"{vmid}.conf"

    def vm_conf(self, vmid: int) -> Path:
        return self.qemu_conf_dir / f"{vmid}.conf"

    def lxc_name(self, vmid: int) -> str:
        """The real LXC container's name: unique per node and across the machine."""
        return f"{self.name}-{vmid}"

    def storages(self) -> dict[str, Storage]:
        if not self.storage_cfg.exists():
            return {}
        return read_storage_cfg(self.storage_cfg.read_text())

    def storage(self, storage_id: str) -> Storage:
        storages = self.storages()
        if storage_id not in storages:
            raise ValidationError(
                "storage",
                f"storage '{storage_id}' does not exist (have: "
                f"{', '.join(sorted(storages)) or 'none'})",
            )
        return storages[storage_id]

    def volume_path(self, volid: str) -> Path:
        """Resolve ``local:100/subvol-100-disk-0.subvol``, ``local:vztmpl/x.tar`` or a path."""
        if volid.startswith("/"):
            return self.host_path(volid)
        sid, sep, volname = volid.partition(":")
        if not sep or not volname:
            raise ValidationError(
                "volume", f"want STORAGE:VOLNAME or an absolute path (got {volid!r})"
            )
        st = self.storage(sid)
        if st.type != "dir":
            raise ValidationError(
                "volume",
                f"storage '{sid}' has type '{st.type}'; the lab "
                "stand-in emulates 'dir' storages only",
            )
        base = self.host_path(st.path)
        kind, _, rest = volname.partition("/")
        if kind == "vztmpl":
            return base / "template" / "cache" / rest
        if kind == "backup":
            return base / "dump" / rest
        if kind == "iso":
            return base / "template" / "iso" / rest
        if kind.isdigit():
            return base / "images" / kind / rest
        raise ValidationError("volume", f"unknown volume name {volname!r} in {volid!r}")

    @property
    def descriptor(self) -> Path:
        """``<root>/etc/specops-lab-node.json``: lets ``pct --node-root`` find the rest."""
        return self.root / "etc" / "specops-lab-node.json"

    @classmethod
    def from_root(cls, root: Path) -> Node:
        path = root / "etc" / "specops-lab-node.json"
        if not path.exists():
            raise ValidationError(
                "node_root",
                f"{root} is not a lab PVE node (no {path}; "
                "create it with 'specops lab cluster init')",
            )
        data = json.loads(path.read_text())
        return cls(
            name=str(data["name"]),
            root=root,
            cgroup=str(data.get("cgroup", "v2")),
            lxcpath=Path(data.get("lxcpath", str(DEFAULT_LXCPATH))),
        )

    def as_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "root": str(self.root),
            "cgroup": self.cgroup,
            "lxcpath": str(self.lxcpath),
        }


def init_node(node: Node) -> Node:
    """Create the node's PVE file layout (idempotent; existing files are kept)."""
    for d in (
        node.lxc_conf_dir,
        node.qemu_conf_dir,
        node.pci_mapping_cfg.parent,
        node.host_path("/var/lib/vz/template/cache"),
        node.host_path("/var/lib/vz/images"),
        node.host_path("/var/lib/vz/dump"),
        node.host_path("/dev"),
        node.task_dir,
        node.lock_dir,
        node.qemu_run_dir,
    ):
        d.mkdir(parents=True, exist_ok=True)
    if not node.storage_cfg.exists():
        node.storage_cfg.write_text(DEFAULT_STORAGE_CFG)
    if not node.pci_mapping_cfg.exists():
        node.pci_mapping_cfg.write_text("")
    node.descriptor.write_text(json.dumps(node.as_json(), indent=2) + "\n")
    return node


@dataclass
class Cluster:
    """Lab nodes that form one PVE cluster (migration works between them)."""

    name: str
    dir: Path
    nodes: dict[str, Node]

    @property
    def file(self) -> Path:
        return self.dir / "cluster.json"

    @classmethod
    def load(cls, cluster_dir: Path) -> Cluster:
        path = cluster_dir / "cluster.json"
        if not path.exists():
            raise ValidationError(
                "cluster", f"{path} does not exist (create it with 'specops lab cluster init')"
            )
        data = json.loads(path.read_text())
        nodes: dict[str, Node] = {}
        for i, item in enumerate(data.get("nodes", [])):
            try:
                node = Node(
                    name=str(item["name"]),
                    root=Path(item["root"]),
                    cgroup=str(item.get("cgroup", "v2")),
                    lxcpath=Path(item.get("lxcpath", str(DEFAULT_LXCPATH))),
                )
            except KeyError as exc:
                raise ValidationError(f"cluster.nodes[{i}]", f"missing {exc.args[0]!r}") from exc
            if node.name in nodes:
                raise ValidationError(f"cluster.nodes[{i}].name", f"duplicate {node.name!r}")
            nodes[node.name] = node
        return cls(str(data.get("name", "lab")), cluster_dir, nodes)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = {"name": self.name, "nodes": [n.as_json() for n in self.nodes.values()]}
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.file)

    def node(self, name: str) -> Node:
        if name not in self.nodes:
            raise ValidationError(
                "node", f"no such cluster node '{name}' (have: {', '.join(self.nodes) or 'none'})"
            )
        return self.nodes[name]

    def find_guest(self, vmid: int) -> tuple[Node, str] | None:
        """The node holding guest ``vmid`` and its type (``lxc`` or ``qemu``)."""
        for node in self.nodes.values():
            if node.ct_conf(vmid).exists():
                return node, "lxc"
            if node.vm_conf(vmid).exists():
                return node, "qemu"
        return None


def init_cluster(
    cluster_dir: Path,
    nodes: list[Node],
    name: str = "lab",
) -> Cluster:
    """Write ``cluster.json`` and each node's layout."""
    seen: dict[str, Node] = {}
    for node in nodes:
        if node.name in seen:
            raise ValidationError("nodes", f"duplicate node name {node.name!r}")
        seen[node.name] = init_node(node)
    cluster = Cluster(name, cluster_dir, seen)
    cluster.save()
    return cluster
