"""The GPU doctor's checks: one function per part of a container's GPU path.

Each check reads the evidence through a :class:`Ctx` and adds :class:`Finding` objects
(the cause in one line, the fix) with the symptoms they explain; :mod:`gpu_doctor`
runs them in order (:func:`gpu_doctor.diagnose`). Pure and stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Ctx",
    "Expectation",
    "Finding",
    "card_checks",
    "card_rows",
    "checks_summary",
    "device_checks",
    "given_paths",
    "host_checks",
    "minor_checks",
    "nvml_cuda_checks",
    "server_checks",
    "userspace_checks",
]

UVM_PATHS = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_DENIED = "EPERM"
_OPENED = "OK"
_NO_DRIVER = ("ENXIO", "ENODEV")
_KEYS = {1: "lxc.cgroup.devices.allow", 2: "lxc.cgroup2.devices.allow"}


@dataclass(frozen=True)
class Finding:
    """One thing wrong: ``cause`` in one line, ``fix`` the variable or playbook."""

    code: str
    title: str
    cause: str
    fix: str
    severity: str = "error"  # error | warning
    paths: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expectation:
    """What the inventory wants for the container (any part may be empty).

    ``gpu`` False: a CPU-only container (no cards described), whose GPU path is not
    checked (only that it runs and its server answers).
    """

    gpu: bool = True
    gpus: tuple[str, ...] = ()
    gpu_model: str = ""
    gpu_count: int = 0
    userspace_version: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Expectation:
        data = data or {}
        return cls(
            gpu=bool(data.get("gpu", True)),
            gpus=tuple(str(a).lower() for a in data.get("gpus") or ()),
            gpu_model=str(data.get("gpu_model") or ""),
            gpu_count=int(data.get("gpu_count") or 0),
            userspace_version=str(data.get("userspace_version") or ""),
        )


# --------------------------------------------------------------------------- helpers


def _normal_address(text: str) -> str:
    text = text.strip().lower()
    if text.count(":") == 1:
        text = "0000:" + text
    if "." not in text:
        text += ".0"
    return text


def _rule_covers(rule: Mapping[str, Any], major: int, minor: int) -> bool:
    if rule["type"] == "a":
        return "r" in rule["access"] and "w" in rule["access"]
    if rule["type"] != "c":
        return False
    if rule["major"] is not None and rule["major"] != major:
        return False
    if rule["minor"] is not None and rule["minor"] != minor:
        return False
    return "r" in rule["access"] and "w" in rule["access"]


def _dynamic(major: int) -> bool:
    return 234 <= major <= 254 or 384 <= major <= 511


def _join(items: Iterable[str]) -> str:
    return ", ".join(items)


@dataclass
class Ctx:
    """One container's diagnosis under way: its evidence and the findings so far."""

    name: str
    node: str
    vmid: int | None
    host: Mapping[str, Any]
    conf: Mapping[str, Any]
    ct: Mapping[str, Any] | None
    simulated: bool
    findings: list[Finding] = field(default_factory=list)
    explained: set[str] = field(default_factory=set)  # symptoms a finding explains
    expect: Expectation | None = None  # set once the GPU path is checked (card rows)

    @property
    def limit(self) -> str:
        return f"--limit {self.node},{self.name}"

    def add(self, finding: Finding, explains: Iterable[str] = ()) -> None:
        self.findings.append(finding)
        self.explained.update(explains)

    def label(self, path: str) -> str:
        """``/dev/nvidia3 (card 0000:61:00.0)`` for a card's node (the card whose Device
        Minor it is on the node), the path alone for any other node."""
        address = self.card_address(path)
        return f"{path} (card {address})" if address else path

    def labels(self, paths: Iterable[str]) -> str:
        return _join(self.label(p) for p in paths)

    def card_address(self, path: str) -> str | None:
        minor = path[len("/dev/nvidia") :] if path.startswith("/dev/nvidia") else ""
        if not minor.isdigit():
            return None
        return next(
            (
                str(card["address"])
                for card in self.host.get("cards", [])
                if card.get("minor") == int(minor)
            ),
            None,
        )

    def ct_device(self, path: str) -> Mapping[str, Any] | None:
        if self.ct is None:
            return None
        return next((d for d in self.ct.get("devices", []) if d["path"] == path), None)

    @property
    def until_ready(self) -> str:
        """What ends a fix that restarts the container: the server answering again (the
        readiness gate serve.yml's service step waits on), not the restart's return."""
        return (
            f", then ansible-playbook playbooks/serve.yml --limit {self.name} (returns once"
            " the server answers again: its readiness gate)"
        )

    @property
    def fix_lines(self) -> str:
        return (
            f"ansible-playbook playbooks/container.yml {self.limit} (role lxc_gpu_passthrough "
            f"writes the GPU lines from {self.node}'s facts and restarts the container)"
            + self.until_ready
        )


# --------------------------------------------------------------------------- checks


def host_checks(c: Ctx) -> bool:
    """The node's driver; False when nothing below can be judged."""
    if not c.host.get("module_loaded"):
        c.add(
            Finding(
                "host_driver",
                "no NVIDIA driver on the node",
                f"the nvidia kernel module is not loaded on {c.node} (no /proc/driver/nvidia)",
                f"ansible-playbook playbooks/host.yml --limit {c.node} (role nvidia_driver, "
                "nvidia_driver_version)",
            ),
            explains=("devices", "nvml", "cuda"),
        )
        return False
    if c.host.get("uvm_major") is None:
        c.add(
            Finding(
                "uvm_not_loaded",
                "nvidia-uvm not loaded",
                f"nvidia-uvm is not in /proc/devices of {c.node}: CUDA cannot start without it",
                f"ansible-playbook playbooks/host.yml --limit {c.node} (role nvidia_driver "
                "loads nvidia-uvm at boot and makes its device nodes)",
            ),
            explains=("cuda",),
        )
    return True


def card_checks(c: Ctx, expect: Expectation) -> None:
    cards = {str(card["address"]).lower(): card for card in c.host.get("cards", [])}
    wanted: list[Mapping[str, Any]] = []
    for address in expect.gpus:
        card = cards.get(_normal_address(address))
        if card is None:
            c.add(
                Finding(
                    "card_missing",
                    "card not on the node",
                    f"{address} (lxc_gpu_passthrough_gpus) is not an NVIDIA card of {c.node} "
                    f"(cards: {_join(sorted(cards)) or 'none'})",
                    f"lxc_gpu_passthrough_gpus of {c.name} (addresses of {c.node}'s cards), "
                    f"then playbooks/container.yml {c.limit}{c.until_ready}",
                )
            )
        else:
            wanted.append(card)
    if expect.gpu_model and not expect.gpus:
        model = expect.gpu_model.lower()
        same = [
            card
            for card in cards.values()
            if model in (str(card.get("name", "")).lower(), str(card.get("pci_id", "")).lower())
        ]
        usable = [
            card
            for card in same
            if card.get("driver") == "nvidia" and not card.get("held_by_running_vm")
        ]
        if len(usable) < max(expect.gpu_count, 1):
            wanted.extend(card for card in same if card not in usable)
            if not same:
                c.add(
                    Finding(
                        "card_missing",
                        "card not on the node",
                        f"no {expect.gpu_model} (lxc_gpu_passthrough_gpu_model) on {c.node}",
                        f"lxc_gpu_passthrough_gpu_model / pve_container_node of {c.name}",
                    )
                )
    for card in wanted:
        address = card["address"]
        if card.get("held_by_running_vm"):
            vm = card["held_by_running_vm"]
            c.add(
                Finding(
                    "card_held_by_vm",
                    "card held by a running VM",
                    f"{address} ({card.get('name')}) is passed through to running VM {vm} on "
                    f"{c.node}",
                    f"stop VM {vm} (qm shutdown {vm}) or give {c.name} other cards "
                    "(lxc_gpu_passthrough_gpus / lxc_gpu_passthrough_gpu_model)",
                ),
                explains=("minor",),
            )
        elif card.get("driver") != "nvidia":
            driver = card.get("driver") or "no driver"
            c.add(
                Finding(
                    "card_on_vfio",
                    f"card on {driver}",
                    f"{address} ({card.get('name')}) is bound to {driver}, not nvidia, on {c.node}",
                    f"ansible-playbook playbooks/host.yml --limit {c.node} (role vfio_release: "
                    "vfio_release_addresses, or vfio_release_model + vfio_release_count)",
                ),
                explains=("minor",),
            )


def given_paths(conf: Mapping[str, Any]) -> dict[str, str]:
    """Container path -> how the conf gives it (``devN`` key or the mount line)."""
    out: dict[str, str] = {}
    for mount in conf.get("mounts", []):
        out[mount["target"]] = mount["text"]
    for dev in conf.get("devs", []):
        out[dev["path"]] = dev["text"]
    return out


def minor_checks(c: Ctx, expect: Expectation, given: Mapping[str, str]) -> None:
    card_minors = {
        int(card["minor"]): str(card["address"])
        for card in c.host.get("cards", [])
        if card.get("driver") == "nvidia" and isinstance(card.get("minor"), int)
    }
    have = ", ".join(f"{a} minor {m}" for m, a in sorted(card_minors.items())) or "none"
    given_minors = {
        int(path[len("/dev/nvidia") :]): path
        for path in given
        if path[len("/dev/nvidia") :].isdigit()
    }
    for minor, path in sorted(given_minors.items()):
        if minor not in card_minors:
            c.add(
                Finding(
                    "minor_mismatch",
                    "minor in conf is no card's Device Minor",
                    f"the conf gives {path} but no card on {c.node} has Device Minor {minor} "
                    f"(cards: {have})",
                    f"lxc_gpu_passthrough_gpus / lxc_gpu_passthrough_gpu_model of {c.name}, then "
                    f"playbooks/container.yml {c.limit}{c.until_ready}",
                    paths=(path,),
                )
            )
    if "minor" in c.explained:
        return
    wanted = len(expect.gpus) or expect.gpu_count
    cards_given = [p for m, p in sorted(given_minors.items()) if m in card_minors]
    if not expect.gpus and wanted > len(cards_given):
        mine = {card_minors[m] for m in given_minors if m in card_minors}
        model = expect.gpu_model.lower()
        free = [
            f"{card['address']} (/dev/nvidia{card['minor']})"
            for card in c.host.get("cards", [])
            if card.get("driver") == "nvidia"
            and isinstance(card.get("minor"), int)
            and card["address"] not in mine
            and model in (str(card.get("name", "")).lower(), str(card.get("pci_id", "")).lower())
        ]
        c.add(
            Finding(
                "card_not_given",
                "fewer cards than wanted",
                f"the conf gives {len(cards_given)} of the {wanted} cards"
                f" lxc_gpu_passthrough_gpu_count wants ({c.labels(cards_given) or 'none'});"
                f" missing: {wanted - len(cards_given)} card(s) of"
                f" {expect.gpu_model or 'the model'}"
                f" (on {c.node} without a node in this conf: {_join(free) or 'none'})",
                c.fix_lines,
            )
        )
    for address in expect.gpus:
        card = next(
            (x for x in c.host.get("cards", []) if x["address"] == _normal_address(address)), None
        )
        if card is None or not isinstance(card.get("minor"), int):
            continue
        if card["minor"] not in given_minors:
            c.add(
                Finding(
                    "minor_mismatch",
                    "wanted card not given",
                    f"card {card['address']} (Device Minor {card['minor']}) is missing: the "
                    f"conf gives {c.labels(sorted(given_minors.values())) or 'no card node'}",
                    c.fix_lines,
                    paths=(f"/dev/nvidia{card['minor']}",),
                )
            )


def _allowed(c: Ctx, path: str, major: int, minor: int) -> str:
    """``yes``, ``other-key`` (only the other cgroup version's key), or ``no``.

    A ``devN`` entry is allowed (PVE stats the node at every start and allows its
    numbers). Raw lines: an allow line of the node's cgroup key covers it and no deny
    line of that key names it (a bare ``deny a`` resets, as LXC's own default does).
    """
    if any(d["path"] == path for d in c.conf.get("devs", [])):
        return "yes"
    version = c.host.get("cgroup_version")

    def ours(rule: Mapping[str, Any]) -> bool:
        return version in (None, rule["cgroup"])

    denied = any(
        ours(r) and r["type"] != "a" and _rule_covers(dict(r, access="rw"), major, minor)
        for r in c.conf.get("deny", [])
    )
    rules = c.conf.get("allow", [])
    if not denied and any(_rule_covers(r, major, minor) for r in rules if ours(r)):
        return "yes"
    if any(_rule_covers(r, major, minor) for r in rules if not ours(r)):
        return "other-key"
    return "no"


def _stale_majors(c: Ctx, minor: int) -> list[Mapping[str, Any]]:
    """Allow lines (right key) for ``c M:minor`` whose M is a dynamic major that is not
    this node's nvidia-uvm (nor nvidia-caps) and that no other driver holds here:
    another host's nvidia-uvm major. (A major another NVIDIA device holds here, such as
    nvidia-nvswitch, counts: specops never writes lines for those.)"""
    version = c.host.get("cgroup_version")
    ours = {c.host.get("uvm_major"), c.host.get("caps_major")}
    foreign = {int(m) for m in (c.host.get("other_majors") or {})}
    out = []
    for rule in c.conf.get("allow", []):
        if version not in (None, rule["cgroup"]) or rule["type"] != "c":
            continue
        major = rule["major"]
        if major is None or major in ours or major in foreign or not _dynamic(major):
            continue
        if rule["minor"] in (None, minor):
            out.append(rule)
    return out


def device_checks(c: Ctx, given: Mapping[str, str], required: Sequence[str]) -> None:  # noqa: PLR0912, PLR0915
    nodes = {n["path"]: (int(n["major"]), int(n["minor"])) for n in c.host.get("device_nodes", [])}
    key = _KEYS.get(int(c.host.get("cgroup_version") or 2), _KEYS[2])
    denied: list[str] = []
    denied_rules: list[str] = []
    other_key: list[str] = []
    missing: list[str] = []
    host_missing: list[str] = []
    pending: list[str] = []
    stale_nodes: list[str] = []
    no_driver: list[str] = []
    stale: dict[str, list[Mapping[str, Any]]] = {}
    evidence: dict[str, list[str]] = {}

    for path in required:
        if path not in nodes:
            if path in given:
                host_missing.append(path)
            continue
        major, minor = nodes[path]
        allowed = _allowed(c, path, major, minor)
        dev = c.ct_device(path)
        seen = None
        if dev is not None:
            seen = dev.get("open") if dev.get("present") else "ENOENT"
        note = f"{path}: host {major}:{minor}" + (f", container open() {seen}" if seen else "")
        if dev is not None and dev.get("present") and dev.get("char"):
            ct_numbers = (dev.get("major"), dev.get("minor"))
            if ct_numbers != (major, minor):
                stale_nodes.append(
                    f"{path} is {ct_numbers[0]}:{ct_numbers[1]} in the container, "
                    f"{major}:{minor} on {c.node}"
                )
                continue
        if allowed != "yes":
            rules = (
                _stale_majors(c, minor)
                if path in UVM_PATHS and major == c.host.get("uvm_major")
                else []
            )
            if rules:
                stale[path] = rules
                evidence.setdefault("stale", []).append(note)
            elif allowed == "other-key":
                other_key.append(path)
                evidence.setdefault("other_key", []).append(note)
            else:
                denied.append(path)
                denied_rules.append(f"c {major}:{minor}")
                evidence.setdefault("denied", []).append(note)
            continue
        if path not in given and not (dev is not None and dev.get("present")):
            missing.append(path)
            evidence.setdefault("missing", []).append(f"{path}: allowed, no mount or devN entry")
            continue
        if seen is None:
            continue
        if seen == "ENOENT":
            missing.append(path)
            how = given.get(path, "no entry")
            evidence.setdefault("missing", []).append(f"{path}: given ({how}), absent")
        elif seen == _DENIED:
            pending.append(path)
            evidence.setdefault("pending", []).append(note)
        elif seen in _NO_DRIVER and not c.simulated:
            no_driver.append(path)
            evidence.setdefault("no_driver", []).append(note)

    if stale:
        uvm = c.host.get("uvm_major")
        lines = sorted({r["text"] for rules in stale.values() for r in rules})
        majors = sorted({int(r["major"]) for rules in stale.values() for r in rules})
        c.add(
            Finding(
                "stale_uvm_major",
                "stale nvidia-uvm major",
                f"the conf allows nvidia-uvm as major {_join(str(m) for m in majors)} "
                f"({'; '.join(lines)}) but nvidia-uvm is major {uvm} on {c.node} "
                "(/proc/devices): CUDA cannot open /dev/nvidia-uvm, nvidia-smi still works",
                c.fix_lines,
                paths=tuple(sorted(stale)),
                evidence=tuple(evidence.get("stale", [])),
            ),
            explains=("cuda", *stale),
        )
    if denied:
        c.add(
            Finding(
                "not_allowed",
                "node present but not allowed",
                f"{c.labels(denied)} {'is' if len(denied) == 1 else 'are'} not allowed by the "
                f"device cgroup (no {key} line for {_join(denied_rules)} in "
                f"/etc/pve/lxc/{c.vmid}.conf)",
                c.fix_lines,
                paths=tuple(denied),
                evidence=tuple(evidence.get("denied", [])),
            ),
            explains=("nvml", "cuda", *denied),
        )
    if other_key:
        c.add(
            Finding(
                "wrong_cgroup_key",
                "allowed under the other cgroup key",
                f"{c.labels(other_key)} {'is' if len(other_key) == 1 else 'are'} allowed only by "
                f"the other cgroup version's key; {c.node} runs cgroup "
                f"v{c.host.get('cgroup_version')} and takes {key}",
                f"{c.fix_lines}; lxc_gpu_passthrough_cgroup: auto",
                paths=tuple(other_key),
                evidence=tuple(evidence.get("other_key", [])),
            ),
            explains=("nvml", "cuda", *other_key),
        )
    if host_missing:
        c.add(
            Finding(
                "allowed_missing",
                "node missing on the host",
                f"the conf gives {_join(host_missing)} but {c.node} has no such node "
                "(an optional bind mount of nothing: the container gets none)",
                f"ansible-playbook playbooks/host.yml --limit {c.node} (role nvidia_driver "
                "makes the nodes at boot: nvidia-modprobe -u -c0)",
                paths=tuple(host_missing),
            ),
            explains=("nvml", "cuda", *host_missing),
        )
    if missing:
        c.add(
            Finding(
                "allowed_missing",
                "allowed but missing",
                f"{c.labels(missing)} {'is' if len(missing) == 1 else 'are'} allowed but not in"
                " the container",
                c.fix_lines,
                paths=tuple(missing),
                evidence=tuple(evidence.get("missing", [])),
            ),
            explains=("nvml", "cuda", *missing),
        )
    if pending:
        c.add(
            Finding(
                "restart_pending",
                "conf changed, container not restarted",
                f"the conf allows {c.labels(pending)} but the running container denies "
                f"{'it' if len(pending) == 1 else 'them'} (EPERM): it started before the conf "
                "changed",
                f"pct reboot {c.vmid} on {c.node} (or playbooks/container.yml {c.limit})"
                f"{c.until_ready}",
                paths=tuple(pending),
                evidence=tuple(evidence.get("pending", [])),
            ),
            explains=("nvml", "cuda", *pending),
        )
    if stale_nodes:
        c.add(
            Finding(
                "stale_node",
                "stale device node in the container",
                "; ".join(stale_nodes) + " (a node made by hand or left from another host)",
                f"pct reboot {c.vmid} on {c.node} after {c.fix_lines}",
                evidence=tuple(stale_nodes),
            ),
            explains=("nvml", "cuda"),
        )
    if no_driver:
        c.add(
            Finding(
                "no_driver_answer",
                "no driver behind the node",
                f"{_join(no_driver)} open{'s' if len(no_driver) == 1 else ''} with "
                f"ENXIO/ENODEV: the device cgroup allows {'it' if len(no_driver) == 1 else 'them'} "
                "but no driver answers (card gone or module reloaded since the node was made)",
                f"ansible-playbook playbooks/host.yml --limit {c.node}, then {c.fix_lines}",
                paths=tuple(no_driver),
                evidence=tuple(evidence.get("no_driver", [])),
            ),
            explains=("nvml", "cuda"),
        )


def userspace_checks(c: Ctx, expect: Expectation) -> None:
    if c.ct is None:
        return
    module = str(c.host.get("module_version") or "")
    user = c.ct.get("userspace") or {}
    version = user.get("loader_version") or user.get("version")
    smi = c.ct.get("nvidia_smi") or {}
    fix = (
        f"ansible-playbook playbooks/container.yml --tags nvidia_userspace {c.limit} (role "
        f"nvidia_userspace installs {module or 'the module version'}; nvidia_userspace_version "
        f"must be empty or {module or 'that version'})"
    )
    if not version and not smi.get("present"):
        c.add(
            Finding(
                "no_userspace",
                "no NVIDIA userspace",
                "the container has no libnvidia-ml and no nvidia-smi",
                fix,
            ),
            explains=("nvml", "cuda"),
        )
        return
    if expect.userspace_version and module and expect.userspace_version != module:
        c.add(
            Finding(
                "userspace_mismatch",
                "userspace version pinned to another module",
                f"nvidia_userspace_version is {expect.userspace_version}, the module on {c.node} "
                f"is {module}",
                f"nvidia_userspace_version of {c.name}: empty (follow {c.node}) or {module}",
                severity="warning",
            )
        )
    if (version and module and version != module) or smi.get("mismatch"):
        out = (smi.get("output") or "").strip().splitlines()
        c.add(
            Finding(
                "userspace_mismatch",
                "userspace ≠ module",
                f"the container's userspace is {version or 'unknown'}"
                + (f" ({user.get('loader_nvml')})" if user.get("loader_nvml") else "")
                + f", the kernel module on {c.node} is {module}"
                + (": NVML says Driver/library version mismatch" if smi.get("mismatch") else ""),
                fix,
                evidence=tuple(out[:2]),
            ),
            explains=("nvml", "cuda"),
        )
        return
    leftovers = [v for v in user.get("versions") or [] if v != (version or module)]
    if leftovers:
        c.add(
            Finding(
                "userspace_leftover",
                "left-over userspace libraries",
                f"libnvidia-ml {_join(leftovers)} beside {version} in the container",
                fix,
                severity="warning",
            )
        )


def nvml_cuda_checks(c: Ctx) -> None:
    if c.ct is None:
        return
    smi = c.ct.get("nvidia_smi") or {}
    smi_line = ((smi.get("output") or "").strip().splitlines() or [""])[0]
    if smi.get("present") and not smi.get("ok") and "nvml" not in c.explained:
        c.add(
            Finding(
                "nvml_failed",
                "nvidia-smi fails",
                f"nvidia-smi exits {smi.get('rc')}: {smi_line or 'no output'}",
                f"ansible-playbook playbooks/verify.yml {c.limit} -v for the evidence; then "
                f"playbooks/host.yml --limit {c.node} (driver) or playbooks/container.yml",
            )
        )
    elif (
        smi.get("ok")
        and c.host.get("module_version")
        and smi.get("driver_version") != c.host.get("module_version")
    ):
        c.add(
            Finding(
                "nvml_failed",
                "container sees another driver",
                f"nvidia-smi reports driver {smi.get('driver_version')}, {c.node}'s facts say "
                f"{c.host.get('module_version')}: the container runs elsewhere than "
                "pve_container_node, or the module changed since",
                f"pve_container_node of {c.name}; playbooks/container.yml {c.limit}",
            )
        )
    cuda = c.ct.get("cuda")
    if not cuda:
        return
    api = cuda.get("driver_api") or {}
    torch = cuda.get("torch") or {}
    if api and not api.get("ok"):
        if "cuda" in c.explained:
            return
        step = api.get("step", "?")
        error = api.get("error") or api.get("cuInit") or "failed"
        c.add(
            Finding(
                "cuda_failed",
                "CUDA does not initialise",
                f"CUDA driver API fails at {step}: {error} (python {cuda.get('python')})",
                f"ansible-playbook playbooks/verify.yml {c.limit} -v for the evidence; the "
                f"driver (playbooks/host.yml --limit {c.node}) or the GPU lines "
                f"(playbooks/container.yml {c.limit})",
            )
        )
    elif api.get("ok") and torch.get("cuda") and torch.get("ok") is False:
        c.add(
            Finding(
                "cuda_runtime",
                "engine's CUDA build cannot use the driver",
                f"torch {torch.get('version')} (CUDA {torch.get('cuda')}) in {cuda.get('python')} "
                f"fails while the driver API works: {torch.get('error', '')[:200]}",
                "inference_engine_version (an engine build for this driver) or "
                f"nvidia_driver_version on {c.node} (a driver new enough for CUDA "
                f"{torch.get('cuda')})",
            )
        )


def server_checks(c: Ctx) -> None:
    server = (c.ct or {}).get("server")
    if not server or server.get("ok"):
        return
    c.add(
        Finding(
            "server_down",
            "server not answering",
            f"{server.get('url')} fails its readiness probe at {server.get('stage')}: "
            f"{server.get('detail')}",
            f"ansible-playbook playbooks/serve.yml --limit {c.name} (inference_service_*); in the "
            "container: journalctl -u <the service unit>",
        )
    )


def checks_summary(c: Ctx, required: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if c.ct is None:
        return {"devices": "-", "nvidia_smi": "-", "cuda": "-", "userspace": "-", "server": "-"}
    opened = [d for d in c.ct.get("devices", []) if d["path"] in required and d.get("present")]
    good = [
        d
        for d in opened
        if d.get("open") == _OPENED or (c.simulated and d.get("open") in _NO_DRIVER)
    ]
    out["devices"] = f"{len(good)}/{len(required)} open"
    smi = c.ct.get("nvidia_smi") or {}
    if not smi.get("present"):
        out["nvidia_smi"] = "absent"
    elif smi.get("ok"):
        out["nvidia_smi"] = str(smi.get("driver_version"))
    else:
        out["nvidia_smi"] = "mismatch" if smi.get("mismatch") else f"exit {smi.get('rc')}"
    cuda = c.ct.get("cuda")
    if not cuda:
        out["cuda"] = "not checked"
    else:
        api = cuda.get("driver_api") or {}
        torch = cuda.get("torch") or {}
        out["cuda"] = (
            "ok"
            if api.get("ok")
            else f"{api.get('step', 'fail')}: {api.get('error') or api.get('cuInit')}"
        )
        if api.get("ok") and torch.get("cuda"):
            out["cuda"] += ", torch ok" if torch.get("ok") else ", torch fails"
    user = c.ct.get("userspace") or {}
    out["userspace"] = str(user.get("loader_version") or user.get("version") or "none")
    server = c.ct.get("server")
    out["server"] = (
        "not checked"
        if not server
        else ("ready" if server.get("ok") else server.get("stage", "down"))
    )
    return out


def card_rows(c: Ctx, expect: Expectation, required: Sequence[str]) -> list[dict[str, str]]:
    """One row per card of the container (given by its conf, or wanted by address):
    address, node path and ``ok`` or the codes of the findings that name its node."""
    paths = {p for p in required if c.card_address(p)}
    paths |= {p for p in given_paths(c.conf) if c.card_address(p)}
    rows: dict[str, dict[str, str]] = {}
    for path in sorted(paths, key=lambda p: int(p[len("/dev/nvidia") :])):
        codes = sorted({f.code for f in c.findings if path in f.paths})
        rows[path] = {
            "address": c.card_address(path) or "",
            "path": path,
            "state": ", ".join(codes) if codes else "ok",
        }
    for address in expect.gpus:
        normal = _normal_address(address)
        if not any(r["address"] == normal for r in rows.values()):
            card = next((x for x in c.host.get("cards", []) if x["address"] == normal), None)
            minor = card.get("minor") if card else None
            path = f"/dev/nvidia{minor}" if isinstance(minor, int) else "-"
            rows[normal] = {"address": normal, "path": path, "state": "not given"}
    return list(rows.values())
