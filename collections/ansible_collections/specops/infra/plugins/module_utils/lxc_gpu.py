"""GPU passthrough lines of a Proxmox VE container config, derived from the GPU facts.

One home for "which lines give container <vmid> these GPUs" and for merging them into
``/etc/pve/lxc/<vmid>.conf`` (parsed and written through :mod:`pve_conf`):

- :func:`plan_devices` turns the host's GPU facts (``ansible_facts.specops_gpu`` of
  ``specops.infra.gpu_facts``) and a choice of cards into device nodes: ``/dev/nvidiaN``
  by the card's Device Minor (not its nvidia-smi index), ``nvidiactl`` (195:255),
  ``nvidia-uvm``/``nvidia-uvm-tools`` (uvm major from /proc/devices, minors 0/1),
  optionally ``nvidia-modeset`` (195:254) and ``nvidia-caps/nvidia-capN`` (caps major).
- :func:`select_gpus` picks "the N free cards of model X" through ``gpu_select`` (the one
  rule for model names and free cards; cards already given to this container first,
  then cards no other container has, by address).
- :func:`merge` writes them as ``devN:`` entries (PVE >= 8.1: PVE stats the node and
  allows its real major:minor at every start) or as raw ``lxc.cgroup2.devices.allow`` /
  ``lxc.cgroup.devices.allow`` plus ``lxc.mount.entry`` lines. The managed lines are
  recognised by what they are, not by a marker: ``devN`` entries and mount entries whose
  path is ``/dev/nvidia*``, and char allow lines whose major is 195, a major NVIDIA
  holds on this host, or (when the conf holds other GPU lines, i.e. it came from another
  host) a dynamic major that nothing else holds here. Every other line, the order of
  the lines kept, and every snapshot/pending section stay byte-identical.

Stdlib only: this runs on the PVE node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.errors import ValidationError
from ansible_collections.specops.infra.plugins.module_utils.gpu_select import (
    GpuSelectError,
    card_state,
    select_free,
)
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    Line,
    PveConf,
    PveConfError,
    format_property_string,
    parse_property_string,
)

__all__ = [
    "CGROUP_KEYS",
    "Device",
    "LxcGpuError",
    "MergeResult",
    "NodeStat",
    "assigned_minors",
    "choose_cgroup_key",
    "choose_method",
    "gpu_dev_indices",
    "ipc_lines",
    "ipc_wanted",
    "is_gpu_raw_line",
    "merge",
    "merge_ipc",
    "normalize_address",
    "plan_devices",
    "privilege_problems",
    "select_gpus",
]

NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
CGROUP_KEYS = {1: "lxc.cgroup.devices.allow", 2: "lxc.cgroup2.devices.allow"}
_ALLOW_KEYS = frozenset(CGROUP_KEYS.values())
_MOUNT_KEY = "lxc.mount.entry"
_GPU_PATH = re.compile(r"^/dev/nvidia")
_ALLOW_RE = re.compile(r"^([abc])\s+(\d+|\*):(\d+|\*)(?:\s+([rwm]+))?$")
_ADDR_RE = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)
_DEV_KEY = re.compile(r"^dev(\d+)$")
_MAX_DEV = 256  # dev0..dev255 (pve-container)
_DEVN_SINCE = (8, 1)  # devN arrived in pve-container 5.0.7 (PVE 8.1)
_MEMLOCK_KEY = "lxc.prlimit.memlock"
_IPC_MODES = ("auto", "always", "never")
# NCCL's floor for /dev/shm in a container: its troubleshooting guide (Runtime and MPI
# issues, "Shared memory": --shm-size=1g) and the NCCL WARN it shows when /dev/shm is
# too small ("failed to extend /dev/shm/nccl-... to 4194660 bytes").
SHM_FLOOR = 1 << 30
_SIZE_RE = re.compile(r"^(\d+)([kmg]?)$|^(\d+)%$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _dynamic_major(major: int) -> bool:
    """Majors the kernel hands out dynamically (CHRDEV_MAJOR_DYN_{,EXT_}{START,END})."""
    return 234 <= major <= 254 or 384 <= major <= 511


class LxcGpuError(ValidationError, ValueError):
    """Bad input or a host that cannot take the request; ``field: problem``."""


@dataclass(frozen=True)
class Device:
    """A character device node the container gets (``path`` as on the host)."""

    path: str
    major: int
    minor: int
    kind: str  # card | ctl | uvm | uvm-tools | modeset | cap
    address: str | None = None  # the card's PCI address for kind == card

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "major": self.major,
            "minor": self.minor,
            "kind": self.kind,
            "address": self.address,
        }


@dataclass
class MergeResult:
    before: str
    after: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after


# --------------------------------------------------------------------------- choices


def normalize_address(text: str) -> str:
    """``01:00``, ``01:00.0``, ``0000:01:00.0`` -> ``0000:01:00.0`` (lower case)."""
    m = _ADDR_RE.match(text.strip())
    if not m:
        raise LxcGpuError(
            "gpus", f"{text!r} is not a PCI address (want e.g. 0000:01:00.0 or 01:00.0)"
        )
    dom = (m.group("dom") or "0000").lower()
    return f"{dom}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"


def _gpus(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    gpus = facts.get("gpus")
    if not isinstance(gpus, list):
        raise LxcGpuError(
            "gpu_facts", "has no 'gpus' list: pass ansible_facts.specops_gpu of gpu_facts"
        )
    return gpus


def _node(facts: Mapping[str, Any]) -> str:
    return str(facts.get("node") or "this node")


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts[:2]) if len(parts) >= 2 else None


def choose_method(facts: Mapping[str, Any], method: str) -> str:
    """``dev`` on PVE >= 8.1, else ``raw``; an explicit ``dev`` on an older PVE fails."""
    release = _version_tuple(facts.get("pve_release") or facts.get("pve_version"))
    if method == "auto":
        return "dev" if release is not None and release >= _DEVN_SINCE else "raw"
    if method == "dev" and release is not None and release < _DEVN_SINCE:
        raise LxcGpuError(
            "method",
            f"devN entries need PVE >= 8.1 (pve-container 5.0.7); {_node(facts)} runs PVE "
            f"{facts.get('pve_version')}: use method raw (or auto)",
        )
    if method not in ("dev", "raw"):
        raise LxcGpuError("method", f"must be auto, dev or raw (got {method!r})")
    return method


def choose_cgroup_key(facts: Mapping[str, Any], cgroup: str) -> str:
    """The raw device key: ``lxc.cgroup2.devices.allow`` on cgroup v2, v1 key on v1."""
    if cgroup == "v1":
        return CGROUP_KEYS[1]
    if cgroup == "v2":
        return CGROUP_KEYS[2]
    if cgroup != "auto":
        raise LxcGpuError("cgroup", f"must be auto, v1 or v2 (got {cgroup!r})")
    version = (facts.get("cgroup") or {}).get("version")
    if version not in CGROUP_KEYS:
        raise LxcGpuError(
            "cgroup",
            f"the facts of {_node(facts)} do not say which cgroup version it runs: set "
            "cgroup to v2 (PVE 7+) or v1 (PVE 6)",
        )
    return CGROUP_KEYS[int(version)]


def assigned_minors(conf: PveConf) -> set[int]:
    """Minors of ``/dev/nvidiaN`` the conf's main section gives (devN or mount entries)."""
    out: set[int] = set()
    for _idx, props in _gpu_dev_entries(conf).items():
        m = re.fullmatch(r"/dev/nvidia(\d+)", props.get("path", ""))
        if m:
            out.add(int(m.group(1)))
    for key, value in conf.lxc():
        if key == _MOUNT_KEY:
            m = re.fullmatch(r"/dev/nvidia(\d+)", value.split()[0] if value.split() else "")
            if m:
                out.add(int(m.group(1)))
    return out


def _card_minor(gpu: Mapping[str, Any]) -> int | None:
    nv = gpu.get("nvidia") or {}
    minor = nv.get("minor")
    return int(minor) if isinstance(minor, int) else None


def select_gpus(
    facts: Mapping[str, Any],
    model: str,
    count: int,
    *,
    mine: set[int],
    others: Mapping[int, set[int]],
    allow_stopped_vm_cards: bool = False,
) -> list[str]:
    """Addresses of ``count`` free cards of ``model`` (module_utils ``gpu_select``: the
    exact product name or the vendor:device id; free by its one rule).

    ``mine`` are minors this container has already (kept first, so re-runs pick the
    same cards); ``others`` maps other containers' vmids to their minors (avoided).
    Only cards on the nvidia driver are candidates.
    """
    cards = _gpus(facts)
    by_minor = {m: vmid for vmid, minors in others.items() for m in minors}
    prefer: list[str] = []
    taken: dict[str, str] = {}
    for g in cards:
        minor = _card_minor(g)
        if minor in mine:
            prefer.append(str(g["address"]))
        elif minor is not None and minor in by_minor:
            taken[str(g["address"])] = f"is given to container {by_minor[minor]}"

    def eligible(g: Mapping[str, Any]) -> str | None:
        if g.get("driver") != "nvidia" or _card_minor(g) is None:
            return f"{g['address']} is on {g.get('driver') or 'no driver'}"
        return None

    try:
        chosen = select_free(
            cards,
            model,
            count,
            node=_node(facts),
            allow_stopped_vm_cards=allow_stopped_vm_cards,
            taken=taken,
            prefer=prefer,
            eligible=eligible,
        )
    except GpuSelectError as exc:
        raise LxcGpuError(exc.field, exc.problem, exc.valid) from None
    if not chosen.ok:
        raise LxcGpuError(
            "gpu_count",
            f"{count} free {model} card(s) wanted on {_node(facts)}, {len(chosen.chosen)} "
            "available" + (f" ({'; '.join(chosen.refused)})" if chosen.refused else ""),
        )
    return sorted(chosen.chosen)


def plan_devices(  # noqa: PLR0912  (one refusal per way a card can be unusable)
    facts: Mapping[str, Any],
    addresses: Sequence[str],
    *,
    modeset: bool = False,
    caps: Sequence[int] = (),
    allow_stopped_vm_cards: bool = False,
) -> list[Device]:
    """The device nodes for these cards, every major and minor from the facts.

    Fails (naming what to fix) when a card is unknown, not on the nvidia driver, not
    free by ``gpu_select``'s rule (a running VM or a process holds it; a stopped VM's
    card only with ``allow_stopped_vm_cards``), when the uvm module is not loaded, or
    when a node is missing on the host or has another major:minor than /proc/devices
    and the Device Minor say.
    """
    if not addresses:
        raise LxcGpuError("gpus", "no card given (list PCI addresses, or a model and a count)")
    node = _node(facts)
    by_addr: dict[str, Mapping[str, Any]] = {}
    for g in _gpus(facts):
        by_addr[str(g["address"]).lower()] = g
    majors: Mapping[str, int] = facts.get("char_majors") or {}
    nvidia_major = int(majors.get("nvidia", NVIDIA_MAJOR))
    devices: list[Device] = []
    seen: set[str] = set()
    for text in addresses:
        addr = normalize_address(text)
        if addr in seen:
            raise LxcGpuError("gpus", f"{addr} is listed twice")
        seen.add(addr)
        gpu = by_addr.get(addr)
        if gpu is None:
            have = ", ".join(sorted(by_addr)) or "none"
            raise LxcGpuError("gpus", f"{addr} is not an NVIDIA card of {node} (have: {have})")
        if gpu.get("driver") != "nvidia":
            raise LxcGpuError(
                "gpus",
                f"{addr} is bound to {gpu.get('driver') or 'no driver'}, not nvidia: release "
                "it to the host first (role vfio_release), then run the nvidia_driver role",
            )
        state = card_state(gpu, _gpus(facts), allow_stopped_vm_cards=allow_stopped_vm_cards)
        if not state.usable:
            raise LxcGpuError("gpus", f"{'; '.join(state.reasons)} on {node}")
        minor = _card_minor(gpu)
        if minor is None:
            raise LxcGpuError(
                "gpus",
                f"{addr} has no Device Minor in /proc/driver/nvidia/gpus/{addr}/information "
                "(is the nvidia module loaded?)",
            )
        devices.append(Device(f"/dev/nvidia{minor}", nvidia_major, minor, "card", addr))
    devices.append(Device("/dev/nvidiactl", nvidia_major, CTL_MINOR, "ctl"))
    uvm = facts.get("uvm_major")
    if not isinstance(uvm, int):
        raise LxcGpuError(
            "gpu_facts",
            f"nvidia-uvm is not in /proc/devices of {node}: the nvidia-uvm module is not "
            "loaded; the nvidia_driver role loads it at boot and makes its device nodes",
        )
    devices.append(Device("/dev/nvidia-uvm", uvm, 0, "uvm"))
    devices.append(Device("/dev/nvidia-uvm-tools", uvm, 1, "uvm-tools"))
    if modeset:
        devices.append(Device("/dev/nvidia-modeset", nvidia_major, MODESET_MINOR, "modeset"))
    if caps:
        caps_major = facts.get("caps_major")
        if not isinstance(caps_major, int):
            raise LxcGpuError(
                "caps", f"nvidia-caps is not in /proc/devices of {node}: no MIG capability nodes"
            )
        for n in sorted(set(caps)):
            devices.append(Device(f"/dev/nvidia-caps/nvidia-cap{n}", caps_major, n, "cap"))
    _check_nodes(facts, devices)
    return devices


def _check_nodes(facts: Mapping[str, Any], devices: Iterable[Device]) -> None:
    nodes = {
        str(n["path"]): (int(n["major"]), int(n["minor"])) for n in facts.get("device_nodes") or []
    }
    missing = [d.path for d in devices if d.path not in nodes]
    if missing:
        raise LxcGpuError(
            "device nodes",
            f"{', '.join(missing)} missing on {_node(facts)}: make them on the host first (the "
            "nvidia_driver role's uvm/device-node step: nvidia-modprobe -u -c0 at boot, or "
            "nvidia-smi once), then gather the GPU facts again",
        )
    wrong = [
        f"{d.path} is {nodes[d.path][0]}:{nodes[d.path][1]}, expected {d.major}:{d.minor}"
        for d in devices
        if nodes[d.path] != (d.major, d.minor)
    ]
    if wrong:
        raise LxcGpuError(
            "device nodes",
            f"{'; '.join(wrong)} on {_node(facts)} (stale nodes from an earlier driver: "
            "remake them with the nvidia_driver role)",
        )


# --------------------------------------------------------------------------- privilege


@dataclass(frozen=True)
class NodeStat:
    path: str
    mode: int  # permission bits
    uid: int
    gid: int


def _idmap_covers(id_map: Iterable[tuple[str, int, int, int]], kind: str, host_id: int) -> bool:
    return any(k == kind and host <= host_id < host + count for k, _ct, host, count in id_map)


def privilege_problems(conf: PveConf, method: str, stats: Iterable[NodeStat]) -> list[str]:
    """Why a container in a user namespace could not open these nodes (empty: it can).

    Privileged containers (no ``unprivileged: 1`` and no ``lxc.idmap`` line) use host
    ids: nothing to map. With ``devN`` PVE makes the node inside the container owned by
    the ``uid``/``gid`` given there (container ids), so no host id has to be mapped. Raw
    bind mounts keep the host node's owner: the container's users can open it when the
    node is world read-write (the driver's default 0666) or when the container's id map
    (``PveConf.id_map``: its ``lxc.idmap`` lines, else PVE's default ``u/g 0 100000
    65536``) maps the node's host uid/gid.
    """
    if not conf.user_namespace or method == "dev":
        return []
    try:
        id_map = conf.id_map()
    except PveConfError as exc:
        return [str(exc)]
    problems = []
    for st in stats:
        if st.mode & 0o006 == 0o006:
            continue
        if st.mode & 0o060 == 0o060 and _idmap_covers(id_map, "g", st.gid):
            continue
        if st.mode & 0o600 == 0o600 and _idmap_covers(id_map, "u", st.uid):
            continue
        problems.append(
            f"{st.path} is mode {st.mode:04o} uid {st.uid} gid {st.gid} on the host and not "
            f"mapped into the container (needs host gid {st.gid} in an 'lxc.idmap: g ...' "
            "line, or mode 0666)"
        )
    return problems


# --------------------------------------------------------------------------- recognising


def _gpu_dev_entries(conf: PveConf) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for idx, value in conf.indexed("dev").items():
        try:
            props = parse_property_string(value, "path")
        except PveConfError:
            continue
        if _GPU_PATH.match(props.get("path", "")):
            out[idx] = props
    return out


def gpu_dev_indices(conf: PveConf) -> list[int]:
    return sorted(_gpu_dev_entries(conf))


def _has_gpu_evidence(conf: PveConf) -> bool:
    if _gpu_dev_entries(conf):
        return True
    for key, value in conf.lxc():
        if key == _MOUNT_KEY and _GPU_PATH.match(value):
            return True
        if key in _ALLOW_KEYS:
            m = _ALLOW_RE.match(value)
            if m and m.group(2) == str(NVIDIA_MAJOR):
                return True
    return False


def is_gpu_raw_line(
    key: str,
    value: str,
    *,
    gpu_majors: set[int],
    foreign_majors: Mapping[int, str],
    evidence: bool,
) -> bool:
    """Whether a raw LXC line is a GPU line this role manages (or a stale one to replace).

    - ``lxc.mount.entry`` whose source is ``/dev/nvidia*``;
    - a char allow line (v1 or v2 key) for major 195, or a major NVIDIA holds on this
      host (``gpu_majors``), or, when the conf has other GPU lines (``evidence``: it was
      configured for a GPU, maybe on another host), a dynamic major that no other driver
      holds here (``foreign_majors``: non-NVIDIA majors of this host's /proc/devices).
    """
    if key == _MOUNT_KEY:
        return bool(_GPU_PATH.match(value))
    if key not in _ALLOW_KEYS:
        return False
    m = _ALLOW_RE.match(value)
    if not m or m.group(1) != "c" or m.group(2) == "*":
        return False
    major = int(m.group(2))
    if major == NVIDIA_MAJOR or major in gpu_majors:
        return True
    return evidence and _dynamic_major(major) and major not in foreign_majors


# --------------------------------------------------------------------------- merging


def _raw_lines(devices: Sequence[Device], cgroup_key: str) -> list[tuple[str, str]]:
    allow = [(cgroup_key, f"c {d.major}:{d.minor} rwm") for d in devices]
    mounts = [
        (_MOUNT_KEY, f"{d.path} {d.path.lstrip('/')} none bind,optional,create=file")
        for d in devices
    ]
    return allow + mounts


def _dev_props(device: Device, mode: str | None, gid: int | None) -> dict[str, str]:
    props = {"path": device.path}
    if gid is not None:
        props["gid"] = str(gid)
    if mode:
        props["mode"] = mode
    return props


def merge(
    conf: PveConf,
    devices: Sequence[Device],
    *,
    method: str,
    cgroup_key: str,
    gpu_majors: set[int],
    foreign_majors: Mapping[int, str],
    dev_mode: str | None = None,
    dev_gid: int | None = None,
) -> MergeResult:
    """Make the main section give exactly ``devices`` (none: remove every GPU line).

    ``method`` ``dev``: ``devN`` entries (an entry for a path that stays keeps its index;
    new ones take the lowest free index), every raw GPU line removed. ``raw``: the allow
    and mount lines, in one block where the first old GPU line was (else at the end of
    the main section), every GPU ``devN`` removed. Lines that already say the same thing
    are left as they are (in whatever order PVE wrote them), so a re-run changes nothing.
    Edits ``conf`` in place.
    """
    before = conf.render()
    result = MergeResult(before=before, after=before)
    # A dynamic major that nothing holds here is taken for a stale GPU line when the
    # conf is (or is about to be) a GPU conf; deciding on the input and the wish alone
    # (never on lines this merge writes) keeps the merge idempotent.
    evidence = bool(devices) or _has_gpu_evidence(conf)

    def managed(key: str, value: str) -> bool:
        return is_gpu_raw_line(
            key, value, gpu_majors=gpu_majors, foreign_majors=foreign_majors, evidence=evidence
        )

    for key, value in conf.lxc():
        if key in _ALLOW_KEYS and not managed(key, value) and evidence:
            m = _ALLOW_RE.match(value)
            if (
                m
                and m.group(1) == "c"
                and m.group(2).isdigit()
                and int(m.group(2)) in foreign_majors
            ):
                result.warnings.append(
                    f"kept '{key}: {value}': major {m.group(2)} is "
                    f"{foreign_majors[int(m.group(2))]!r} on this host, not an NVIDIA device; "
                    "remove it by hand if it was for a GPU of an earlier host"
                )

    if method == "dev" and devices:
        _merge_dev(conf, devices, dev_mode, dev_gid, result)
        _replace_raw(conf, managed, [], result)
    elif method == "raw" and devices:
        for idx in gpu_dev_indices(conf):
            value = conf.get(f"dev{idx}") or ""
            conf.delete(f"dev{idx}")
            result.removed.append(f"dev{idx}: {value}")
        _replace_raw(conf, managed, _raw_lines(devices, cgroup_key), result)
    elif not devices:
        for idx in gpu_dev_indices(conf):
            value = conf.get(f"dev{idx}") or ""
            conf.delete(f"dev{idx}")
            result.removed.append(f"dev{idx}: {value}")
        _replace_raw(conf, managed, [], result)
    else:
        raise LxcGpuError("method", f"must be dev or raw here (got {method!r})")
    result.after = conf.render()
    if not result.changed:
        result.added.clear()
        result.removed.clear()
    return result


def _merge_dev(
    conf: PveConf,
    devices: Sequence[Device],
    mode: str | None,
    gid: int | None,
    result: MergeResult,
) -> None:
    existing = _gpu_dev_entries(conf)
    by_path: dict[str, int] = {}
    for idx, props in existing.items():
        path = props.get("path", "")
        if path in by_path:  # a second entry for the same node: drop it
            conf.delete(f"dev{idx}")
            result.removed.append(f"dev{idx}: {format_property_string(props, 'path')}")
            continue
        by_path[path] = idx
    wanted = {d.path for d in devices}
    for path, idx in sorted(by_path.items(), key=lambda kv: kv[1]):
        if path not in wanted:
            old = conf.get(f"dev{idx}") or ""
            conf.delete(f"dev{idx}")
            result.removed.append(f"dev{idx}: {old}")
    used = set(conf.indexed("dev"))
    for device in devices:
        props = _dev_props(device, mode, gid)
        idx_or_none = by_path.get(device.path)
        if idx_or_none is not None:
            if existing[idx_or_none] != props:
                old = conf.get(f"dev{idx_or_none}") or ""
                value = format_property_string(props, "path")
                conf.set(f"dev{idx_or_none}", value)
                result.removed.append(f"dev{idx_or_none}: {old}")
                result.added.append(f"dev{idx_or_none}: {value}")
            continue
        free = next((i for i in range(_MAX_DEV) if i not in used), None)
        if free is None:
            raise LxcGpuError("devices", "no free devN index left (dev0..dev255 all used)")
        used.add(free)
        value = format_property_string(props, "path")
        conf.set(f"dev{free}", value)
        result.added.append(f"dev{free}: {value}")


def _replace_raw(
    conf: PveConf,
    managed: Callable[[str, str], bool],
    desired: list[tuple[str, str]],
    result: MergeResult,
) -> None:
    lines = conf.main.lines
    current = [(ln.key, ln.value) for ln in lines if ln.kind == "lxc" and managed(ln.key, ln.value)]
    if current == desired:
        return
    first = next(
        (i for i, ln in enumerate(lines) if ln.kind == "lxc" and managed(ln.key, ln.value)),
        None,
    )
    removed = conf.remove_lxc(managed)
    result.removed.extend(f"{k}: {v}" for k, v in removed)
    if not desired:
        return
    # add_lxc appends after the last non-blank line (a file without a final newline
    # keeps that: PveConf.render); the new lines then move to where the first old GPU
    # line was.
    count_before = len(conf.main.lines)
    for key, value in desired:
        conf.add_lxc(key, value)
        result.added.append(f"{key}: {value}")
    if first is None:
        return
    lines = conf.main.lines
    new_idx = [
        i for i, ln in enumerate(lines) if ln.kind == "lxc" and (ln.key, ln.value) in desired
    ]
    new_idx = new_idx[-len(desired) :]
    block: list[Line] = [lines[i] for i in new_idx]
    if len(lines) - count_before != len(desired):
        return  # unexpected: keep them at the end rather than guess
    rest = [ln for i, ln in enumerate(lines) if i not in set(new_idx)]
    conf.main.lines = rest[:first] + block + rest[first:]


# --------------------------------------------------------------------------- NCCL's IPC


def ipc_wanted(mode: str, cards: int) -> bool:
    """Whether the container gets the shm and memlock lines: ``auto`` with 2+ cards
    (ranks of one engine talk through NCCL), ``always``, ``never``."""
    if mode not in _IPC_MODES:
        raise LxcGpuError("ipc_limits", f"{mode!r} is not a mode", valid=_IPC_MODES)
    return mode == "always" or (mode == "auto" and cards >= 2)


def ipc_lines(shm_size: str, memlock: str) -> list[tuple[str, str]]:
    """The raw lines for a ``/dev/shm`` tmpfs of ``shm_size`` and the memlock limit.

    ``shm_size``: tmpfs' ``size=`` (``1g``, ``16384m``, or ``50%`` of the node's RAM);
    a size in bytes below NCCL's 1 GiB floor is refused. ``memlock``: ``unlimited`` or a
    limit in bytes, as ``lxc.prlimit.memlock`` takes it (soft and hard the same).
    """
    text = str(shm_size).strip().lower()
    m = _SIZE_RE.match(text)
    if not m:
        raise LxcGpuError(
            "shm_size",
            f"{shm_size!r} is not a tmpfs size: valid: a number with k, m or g (such as 1g"
            " or 16g), or a percentage of the node's RAM (such as 50%)",
        )
    if m.group(3) is not None:
        if not 1 <= int(m.group(3)) <= 100:
            raise LxcGpuError("shm_size", f"{shm_size!r}: valid: a percentage 1-100%")
    elif int(m.group(1)) * _UNITS[m.group(2)] < SHM_FLOOR:
        raise LxcGpuError(
            "shm_size",
            f"{shm_size!r} is below the 1g NCCL asks for in a container (its troubleshooting"
            " guide: --shm-size=1g); valid: 1g or more, or a percentage such as 50%",
        )
    limit = str(memlock).strip().lower()
    if limit != "unlimited" and not limit.isdigit():
        raise LxcGpuError(
            "memlock",
            f"{memlock!r}: valid: unlimited (NCCL's --ulimit memlock=-1) or a limit in bytes",
        )
    return [
        (_MOUNT_KEY, f"tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir,mode=1777,size={text} 0 0"),
        (_MEMLOCK_KEY, limit),
    ]


def _is_ipc_line(key: str, value: str) -> bool:
    if key == _MEMLOCK_KEY:
        return True
    parts = value.split()
    return key == _MOUNT_KEY and len(parts) >= 3 and parts[1].strip("/") == "dev/shm"


def merge_ipc(conf: PveConf, lines: Sequence[tuple[str, str]], result: MergeResult) -> None:
    """Make the main section's shm mount and memlock lines exactly ``lines`` (added after
    the other lines; an earlier ``/dev/shm`` mount entry or memlock line is replaced).

    Called only when the lines are wanted: with one card (``auto``) or ``never`` a
    container keeps whatever shm and memlock lines it has (an operator's own, or ours
    from when it had more cards). Edits ``conf`` and ``result`` in place.
    """
    current = [(k, v) for k, v in conf.lxc() if _is_ipc_line(k, v)]
    if current == list(lines):
        return
    removed = conf.remove_lxc(_is_ipc_line)
    result.removed.extend(f"{k}: {v}" for k, v in removed)
    for key, value in lines:
        conf.add_lxc(key, value)
        result.added.append(f"{key}: {value}")
    result.after = conf.render()
