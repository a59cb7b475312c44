#!/usr/bin/env python3
"""Crash-point campaign (issue 31): kill the controller at a task boundary, re-run,
check what is left.

A run of ``ansible-playbook`` (or ``scripts/lab.sh``) is started in its own session and
its output followed; when the k-th ``TASK [`` banner of that run appears, the whole
process group gets SIGKILL, as a lost controller does (the task has just begun: its
module may be running on the node). Then the playbook is run again to its end, and the
lab is inspected:

- the re-run ends with rc 0 (and, where asked, one more run reports ``changed=0``);
- every PVE config of every lab node parses with specops' reader
  (``module_utils/pve/conf``) and renders back byte for byte; VM configs and the
  snapshot sections of container configs are byte-identical to before the run; with a
  reference (a clean run's configs), each container's main section holds the same
  options;
- no PVE lock is left: no ``lock:`` in a config, no per-guest lock file
  (``/run/lock/lxc/pve-config-<vmid>.lock``) held;
- every card a VM held before is still on vfio-pci and held by the same VM;
- the server answers a completion on the container's address;
- every ``results.json`` under ``results/`` parses, with every cell measured, and no
  half-written file (``*.tmp``, a dot file) is left next to it; migration state files
  parse.

Scenarios: ``deploy`` (deploy.yml on the lab from the hard real state: ``specops lab
down --destroy`` and ``up`` before each point, a clean run first gives the number of
tasks and the reference configs) and ``migrate`` (playbooks/migrate.yml on a deployed
lab, CT 801 moved back and forth between pve-b and pve-a: after each kill the container
is on exactly one node, and the re-run completes the move). ``host`` is the deploy's
host part (``playbooks/host.yml``, deploy.yml's first tasks) at each point from the hard
real state, its re-run's node trees compared file by file with a clean run's (every
``--complete-every``-th point completed by the whole deploy.yml): it reaches the tasks a
node runs before its driver install, which a chain cannot. Faults that are no
controller kill: ``engine`` (the engine SIGKILLed by its unit during a benchmark cell and
during the readiness gate) and ``reboot-fail`` (a lab node's emulated reboot does not
come back): each must fail clearly, change nothing by half, and a re-run converge.
``lock`` kills speculative-apply.yml while it holds pve-b's node lock (issue 51): the
re-run takes the lock over, saying from whom. After every kill of every scenario on the
lab's nodes the killed run's node locks stay held, and the run after it must take each
over with a message; after a run that completes, no node lock is held.
``--chain`` kills one run
at every point in turn (counted in each run) and lets the last re-run finish: the cost
of one run plus the repeated prefixes (the CI test does this).

Run under the lab lock (the lab is shared)::

    flock /tmp/specops-lab.lock .venv/bin/python scripts/lab/crash-campaign.py \
        --scenario deploy --points 4 --chain

It prints one table row per scenario: crash points tried, converged, anything lost.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

import httpx  # noqa: E402
from ansible_collections.specops.infra.plugins.module_utils import gpu_catalogue, service_stop  # noqa: E402
from ansible_collections.specops.infra.plugins.module_utils.gpu import (  # noqa: E402
    GpuFactsError,
    HostRoots,
    gather_facts,
)
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf  # noqa: E402

from specops_lab import network  # noqa: E402
from specops_lab.pve.layout import Cluster  # noqa: E402

LAB = Path("/var/lib/specops/lab")
VMID = 801
CT_HOST = "lab-ct801"
PORT = 8000
# Where the roles record a refresh owed for changed files until it ran (pending_refresh).
PENDING = "var/lib/specops/pending"
# The node lock's record on a node (module_utils/node_lock.LOCK_PATH).
NODE_LOCK = "var/lib/specops/lock/node.json"
_TASK = re.compile(r"^TASK \[")
# An ansible-playbook recap line (tests/deploy/test_deploy_lab.py reads runs with it too).
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


# ------------------------------------------------------------------ killing a run


@dataclass(frozen=True)
class Segment:
    """One run of the playbook: killed at its ``kill_at``-th task banner, or to its end."""

    argv: tuple[str, ...]
    kill_at: KillAt | None
    killed: bool
    rc: int
    output: str
    seconds: float
    tasks: int  # task banners seen
    orphans: int = 0  # processes of workers let finish their task after the kill
    orphans_left: list[int] = field(default_factory=list)  # still running after the wait
    log: Path | None = None  # where its output was written

    def changed(self) -> dict[str, int]:
        """Per host, ``changed`` summed over the recaps of all imported playbooks."""
        totals: dict[str, int] = {}
        for m in RECAP.finditer(self.output):
            totals[m["host"]] = totals.get(m["host"], 0) + int(m["changed"])
        return totals


@dataclass(frozen=True)
class Position:
    """Where a task banner stands in a run, in terms that hold between runs whose task
    counts differ (a re-run skips what is done): the play it belongs to (its banner's
    text), which time that play banner was printed (a serial batch prints it once per
    batch), and which time this task's name was printed within that play."""

    play: str
    play_n: int
    nth: int


class Positions:
    """Follows a run's output line by line; :meth:`feed` gives each task banner's
    :class:`Position` and counts the banners (``count``)."""

    def __init__(self) -> None:
        self.count = 0
        self._plays: dict[str, int] = {}
        self._play = ("", 0)
        self._names: dict[str, int] = {}

    def feed(self, line: str) -> Position | None:
        if line.startswith("PLAY ["):
            name = _banner_name(line, "PLAY [")
            self._plays[name] = self._plays.get(name, 0) + 1
            self._play = (name, self._plays[name])
            self._names = {}
            return None
        if not _TASK.match(line):
            return None
        name = _banner_name(line)
        self.count += 1
        self._names[name] = self._names.get(name, 0) + 1
        return Position(*self._play, self._names[name])


def task_positions(output: str) -> list[tuple[str, Position]]:
    """Each task banner of a run's output: its name and its :class:`Position`."""
    track = Positions()
    found = []
    for line in output.splitlines():
        pos = track.feed(line)
        if pos is not None:
            found.append((_banner_name(line), pos))
    return found


@dataclass(frozen=True)
class KillAt:
    """A kill point: the ``at``-th task banner of a run (an int) or the first banner
    holding the text ``at`` (at ``where``, when given: a task name that recurs, as the
    host roles' tasks do in each batch, is told apart by its :class:`Position`); the
    kill comes ``after_s`` seconds later (0: at the task boundary; more: in the middle of
    that task, or of a later one)."""

    at: int | str
    after_s: float = 0.0
    where: Position | None = None

    def reached(self, count: int, line: str, pos: Position | None = None) -> bool:
        if isinstance(self.at, int):
            return count == self.at
        return self.at in line and (self.where is None or self.where == pos)

    def __str__(self) -> str:
        at = f"{self.at}"
        if self.where is not None:
            w = self.where
            at += f" (play {w.play!r} #{w.play_n}, #{w.nth} there)"
        return at + (f"+{self.after_s:g}s" if self.after_s else "")


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (the service_stop module's reading of /proc)."""
    return [p for p in service_stop.descendants(pid) if p != pid]


def _stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _ppid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _sid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[3]) if fields else None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill_controller(pid: int, workers: str) -> set[int]:
    """SIGKILL the controller's process group. Ansible's workers run in their own
    sessions (WorkerProcess._detach: setsid). ``kill``: they die with the controller,
    and so does what they started in their session (the module under way: over ssh it
    would die with its connection); a daemon that made its own session lives on, as on
    a real node. ``finish``: each worker finishes the task it runs, then finds no one to
    report to; returns their processes, to wait for."""
    below = _descendants(pid)
    orphans: set[int] = set()
    if workers == "kill":
        # The workers: session leaders whose parent is in the controller's session
        # (ansible-playbook itself, or the script that started it).
        sessions = {pid} | {p for p in below if _sid(p) == p and _sid(_ppid(p) or 0) == pid}
        for _ in range(2):  # twice: a fork between the listing and the kill
            for p in _descendants(pid) + below:
                if _sid(p) in sessions:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
    else:
        orphans.update(p for p in below if _pgid(p) != pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return orphans


def run_segment(
    argv: Sequence[str],
    kill_at: KillAt | None,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
    workers: str = "kill",
    orphan_timeout: float = 900,
    log: Path | None = None,
    on_point: Callable[[], None] | None = None,
) -> Segment:
    """Run ``argv`` in the repository in a new session; with ``kill_at``, SIGKILL its
    whole process group as soon as the ``kill_at``-th ``TASK [`` banner (or the first
    banner holding the text ``kill_at``) is printed; ``workers`` (``kill`` or
    ``finish``) says what becomes of Ansible's workers (see ``_kill_controller``).
    With ``on_point``, that is called at the point instead and the run goes on."""
    if workers not in ("kill", "finish"):
        raise ValueError(f"workers: {workers!r}; valid: kill, finish")
    run_env = dict(os.environ if env is None else env)
    run_env.update(PYTHONUNBUFFERED="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=REPO,
        env=run_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    killed = threading.Event()

    orphans: set[int] = set()

    def kill() -> None:
        orphans.update(_kill_controller(proc.pid, workers))

    def kill_point() -> None:
        if on_point is not None:
            on_point()
            return
        killed.set()
        kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    delayed: threading.Timer | None = None
    lines: list[str] = []
    track = Positions()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            pos = track.feed(line)
            if pos is not None and (
                kill_at is not None and delayed is None and kill_at.reached(track.count, line, pos)
            ):
                if not kill_at.after_s:
                    kill_point()
                    if on_point is None:
                        break
                    continue
                delayed = threading.Timer(kill_at.after_s, kill_point)
                delayed.start()
        rc = proc.wait()
    finally:
        watchdog.cancel()
        if delayed is not None:
            delayed.cancel()
        # A process started by a task may keep the pipe open after the kill: never
        # read to its end, close it.
        proc.stdout.close()
    deadline = time.monotonic() + orphan_timeout
    while {p for p in orphans if _alive(p)} and time.monotonic() < deadline:
        time.sleep(0.5)
    left = sorted(p for p in orphans if _alive(p))
    segment = Segment(
        tuple(argv), kill_at, killed.is_set(), rc, "".join(lines), time.monotonic() - start,
        track.count, len(orphans), left, log,
    )  # fmt: skip
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(segment.output)
    return segment


def _banner_name(line: str, kind: str = "TASK [") -> str:
    """``TASK [role : Name.] ****`` -> ``role : Name.`` as a banner holds it."""
    return line[len(kind) :].rstrip("* \n").removesuffix("]")


def chain(
    argv: Sequence[str],
    points: Sequence[KillAt],
    *,
    env: dict[str, str] | None = None,
    after_kill: Callable[[Segment], None] | None = None,
    logs: Path | None = None,
    facts: Path | None = None,
) -> list[Segment]:
    """Run ``argv`` killed at ``points[0]``, re-run killed at ``points[1]`` (counted in
    that run), ..., then once more to its end. ``after_kill`` inspects the state each
    kill left. A run that does not reach its point (the kills before moved the state
    past it: a re-run skips what is done) runs to its end, unkilled, and the chain goes
    on with the next point. A point at ``Gathering Facts`` empties the fact cache
    (``facts``, ansible.cfg's by default) first: :func:`expire_facts_for`. Returns every
    segment, the completing run last."""
    segments: list[Segment] = []
    for i, k in enumerate([*points, None]):
        name = "end" if k is None else re.sub(r"[^A-Za-z0-9+]+", "-", str(k.at))[:40]
        log = logs / f"{i:02d}-kill-{name}.log" if logs else None
        if k is not None:
            expire_facts_for(k, facts)
        seg = run_segment(argv, k, env=env, log=log)
        segments.append(seg)
        if seg.killed and after_kill is not None:
            after_kill(seg)
    return segments


GATHERING = "Gathering Facts"


def fact_cache() -> Path:
    """The controller's fact cache folder, as ansible.cfg names it."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    return REPO / cfg.get("defaults", "fact_caching_connection")


def expire_facts_for(point: KillAt, cache: Path | None = None) -> None:
    """A play prints ``Gathering Facts`` only for hosts whose cached facts have expired
    (ansible.cfg: ``fact_caching_timeout``, 600 s): a clean run from a fresh lab, longer
    than that, prints it for a later play that a re-run, finding the facts cached, does
    not. For a point at that banner, the cache (``cache``, ansible.cfg's by default) is
    emptied before the run meant for it, so the run is in the clean run's state there
    and the kill lands while facts are read. The cache is the controller's, not a
    node's: emptying it changes no node."""
    if point.at != GATHERING:
        return
    folder = fact_cache() if cache is None else cache
    for entry in folder.glob("*") if folder.is_dir() else ():
        if entry.is_file():
            entry.unlink()


def spread(total: int, n: int) -> list[int]:
    """``n`` points spread over tasks 1..``total`` (never the very first banner)."""
    if n >= total:
        return list(range(1, total + 1))
    return sorted({max(2, round(total * (i + 1) / (n + 1))) for i in range(n)})


# ------------------------------------------------------------------ the lab's state


@dataclass
class LabState:
    """What the checks compare: every PVE conf, and the cards VMs hold."""

    confs: dict[str, bytes] = field(default_factory=dict)
    vm_cards: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)


def _nodes() -> dict[str, Path]:
    cluster = Cluster.load(LAB / "cluster")
    return {name: node.root for name, node in cluster.nodes.items()}


def lab_state() -> LabState:
    state = LabState()
    cluster = Cluster.load(LAB / "cluster")
    for name, node in cluster.nodes.items():
        for conf in sorted(node.host_path("/etc/pve").rglob("*.conf")):
            state.confs[str(conf)] = conf.read_bytes()
        try:
            cards = gather_facts(HostRoots.under(str(node.root))).gpus
        except (GpuFactsError, OSError) as exc:  # a node that is down: say so, go on
            state.vm_cards[f"{name}:facts"] = (f"unreadable: {exc}", None)
            continue
        for card in cards:
            if card.held_by_running_vm is not None:
                state.vm_cards[f"{name}:{card.address}"] = (card.driver, card.held_by_running_vm)
    return state


# What differs between two clean runs of the host part from the same hard state (two
# runs compared on 2026-12-04, 960 files each): the boot's id, pid files, the emulated
# units' process and invocation ids, the node tools' call logs. Everything else in a
# node tree (its /etc, module and driver state, sysfs bindings, device nodes, PVE
# configs) a converged re-run must leave byte for byte as a clean run does.
# The node lock's record (roles/node_lock) names the run that held it last and when:
# checked by node_lock_problems instead.
_VOLATILE = re.compile(
    r"^(proc/sys/kernel/random/boot_id|var/log/.*|.*\.pid|var/lib/specops/lock/.*)$"
)
_UNIT_STATE = ("ActiveState", "SubState", "Result")


def node_state() -> dict[str, str]:
    """Every file, link and device node of every lab node's tree, as ``node/path`` ->
    a digest (mode included), the volatile ones above left out; an emulated unit's
    state file reduced to its state."""
    state: dict[str, str] = {}
    for name, root in _nodes().items():
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if _VOLATILE.match(rel):
                continue
            st = path.lstat()
            key = f"{name}/{rel}"
            if stat.S_ISLNK(st.st_mode):
                state[key] = "-> " + os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                state[key] = f"dir {st.st_mode:o}"
            elif not stat.S_ISREG(st.st_mode):
                state[key] = f"node {st.st_mode:o} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            elif rel.startswith("run/specops-lab/units/") and rel.endswith(".json"):
                unit = json.loads(path.read_bytes() or b"{}")
                state[key] = json.dumps({k: unit.get(k) for k in _UNIT_STATE})
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                state[key] = f"{digest} {st.st_mode:o}"
    return state


def state_differences(reference: dict[str, str], now: dict[str, str]) -> list[str]:
    """What a re-run left otherwise than a clean run: each path named, at most 20."""
    diffs = [
        f"{p}: {'missing' if p not in now else 'extra' if p not in reference else 'differs'}"
        for p in sorted(set(reference) | set(now))
        if reference.get(p) != now.get(p)
    ]
    return diffs[:20] + ([f"... and {len(diffs) - 20} more"] if len(diffs) > 20 else [])


def _kind(path: str) -> str:
    return "qemu" if "/qemu-server/" in path else "lxc"


def _conf_problems(path: str, data: bytes, old: bytes | None, ref: bytes | None) -> list[str]:
    """One conf: parses, renders back, no lock; a VM's and the snapshots unchanged."""
    text = data.decode()
    try:
        parsed = pve_conf.parse(text, kind=_kind(path))
    except pve_conf.PveConfError as exc:
        return [f"{path}: does not parse: {exc}"]
    problems: list[str] = []
    if parsed.render() != text:
        problems.append(f"{path}: does not render back byte for byte")
    if parsed.get("lock"):
        problems.append(f"{path}: lock: {parsed.get('lock')} left")
    if old is not None and _kind(path) == "qemu" and old != data:
        problems.append(f"{path}: a VM config changed")
    if old is not None and _kind(path) == "lxc":
        was = pve_conf.parse(old.decode())
        for name in was.snapshot_names():
            if name not in parsed.snapshot_names() or parsed.section(name) != was.section(name):
                problems.append(f"{path}: snapshot [{name}] changed")
    if ref is not None and _main(ref.decode()) != _main(text):
        diff = sorted(set(_main(ref.decode()).items()) ^ set(_main(text).items()))
        problems.append(f"{path}: main section differs from a clean run's: {diff}")
    return problems


def _held_locks() -> list[str]:
    held: list[str] = []
    for name, root in _nodes().items():
        lock_dir = root / "run/lock/lxc"
        for lock in sorted(lock_dir.glob("pve-config-*.lock")) if lock_dir.is_dir() else []:
            with open(lock, "a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fh, fcntl.LOCK_UN)
                except BlockingIOError:
                    held.append(f"{name}: {lock.name} still held")
    return held


def node_locks() -> dict[str, dict[str, Any]]:
    """Each lab node's node-lock record (roles/node_lock) that says it is held."""
    out: dict[str, dict[str, Any]] = {}
    for name, root in _nodes().items():
        path = root / NODE_LOCK
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("held"):
            out[name] = record
    return out


def node_lock_problems() -> list[str]:
    """After a run that completed: no node lock is held (its end released them)."""
    return [
        f"{name}: node lock still held by {rec.get('holder', {}).get('id')} after the run"
        for name, rec in sorted(node_locks().items())
    ]


def takeover_problems(held: dict[str, dict[str, Any]], output: str) -> list[str]:
    """The run after a kill took over each node lock the killed run held, saying so."""
    said = " ".join(output.split())
    problems = []
    for name, rec in sorted(held.items()):
        pid = rec.get("holder", {}).get("pid")
        if f"node lock: {name}: took the lock over from" not in said or f"pid {pid})" not in said:
            problems.append(
                f"{name}: the killed run's node lock (pid {pid}) was not taken over with a"
                " message by the next run"
            )
    return problems


def settle(timeout: float = 600) -> list[str]:
    """Wait until what a killed run left going on the nodes is done (PVE's tasks run on
    in the API stand-in, as on PVE): no ``lock:`` in a config, no lock file held.
    Returns what is still locked at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        locked = _held_locks() + [
            f"{path}: lock: {pve_conf.parse(data.decode(), kind=_kind(path)).get('lock')}"
            for path, data in lab_state().confs.items()
            if re.search(rb"^lock:", data, re.MULTILINE)
        ]
        if not locked or time.monotonic() > deadline:
            return locked
        time.sleep(2)


def conf_problems(before: LabState, reference: dict[str, bytes] | None = None) -> list[str]:
    """PVE configs, locks and VM-held cards: what a kill must never leave broken."""
    now = lab_state()
    problems: list[str] = []
    for path, data in now.confs.items():
        ref = reference.get(path) if reference is not None and _kind(path) == "lxc" else None
        problems += _conf_problems(path, data, before.confs.get(path), ref)
    if reference is not None:
        problems += [
            f"{p}: a clean run has it, this one not"
            for p in sorted(set(reference) - set(now.confs))
        ] + [
            f"{p}: this run has it, a clean run not"
            for p in sorted(set(now.confs) - set(before.confs) - set(reference))
            if _kind(p) == "lxc"
        ]
    problems += _held_locks()
    for card, held in before.vm_cards.items():
        if now.vm_cards.get(card) != held:
            problems.append(f"{card}: was {held} (driver, VM), now {now.vm_cards.get(card)}")
    return problems


def _main(text: str) -> dict[str, str]:
    """A container's main-section options, the MAC address left out (PVE draws one per
    create)."""
    items = dict(pve_conf.parse(text).items())
    for key, value in items.items():
        if key.startswith("net"):
            items[key] = re.sub(r"hwaddr=[0-9A-Fa-f:]+", "hwaddr=*", value)
    items.pop("lxc", None)
    return items


def boot_problems() -> list[str]:
    """What the nodes would boot otherwise than their files say: an initramfs not rebuilt
    since a modprobe file changed (host points 165 and 166 found it: the handler was
    lost with the controller), or a refresh a run recorded as owed and never did (the
    markers of specops.infra.pending_refresh)."""
    from specops_lab.node import initramfs_drift  # noqa: PLC0415

    problems: list[str] = []
    for name, root in _nodes().items():
        problems += [f"{name}: {d}" for d in initramfs_drift(root)]
        pending = root / PENDING
        for marker in sorted(pending.iterdir()) if pending.is_dir() else []:
            problems.append(f"{name}: /{PENDING}/{marker.name}: a refresh still owed")
    return problems


def serving_problems() -> list[str]:
    """The deployed server answers a completion on the container's address."""
    address = network.load().address(VMID)
    try:
        reply = httpx.post(
            f"http://{address}:{PORT}/v1/completions",
            json={"model": "tiny-qwen", "prompt": "def add(a, b):", "max_tokens": 8},
            timeout=120,
        )
    except httpx.HTTPError as exc:
        return [f"server at {address}:{PORT}: {exc!r}"]
    if reply.status_code != 200 or not reply.json().get("usage", {}).get("completion_tokens"):
        return [f"server at {address}:{PORT}: {reply.status_code} {reply.text[:200]}"]
    return []


def record_problems(*dirs: Path) -> list[str]:
    """Every results.json and migration state file parses; no half-written file left."""
    problems: list[str] = []
    for top in dirs:
        if not top.is_dir():
            continue
        for path in sorted(top.rglob("*")):
            if not path.is_file():
                continue
            if path.suffix == ".tmp" or (path.name.startswith(".") and path.name != ".keep"):
                problems.append(f"{path}: half-written file left")
            elif path.suffix == ".json":
                try:
                    data = json.loads(path.read_text())
                except (ValueError, UnicodeDecodeError) as exc:
                    problems.append(f"{path}: does not parse: {exc}")
                    continue
                if path.name == "results.json" and not isinstance(data.get("cells"), list):
                    problems.append(f"{path}: no cells")
    return problems


def latest_results_problems() -> list[str]:
    """The newest results.json (the run the last deploy names) has every cell measured."""
    found = sorted(_results_dir().glob("*/results.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return [f"no results.json under {_results_dir()}"]
    cells = json.loads(found[-1].read_text()).get("cells") or []
    bad = [c.get("status") for c in cells if c.get("status") != "ok"]
    return [f"{found[-1]}: cells not all measured: {bad or 'none'}"] if bad or not cells else []


# ------------------------------------------------------------------ scenarios


def _specops(*args: str) -> None:
    subprocess.run([str(REPO / ".venv/bin/specops"), *args], cwd=REPO, check=True, timeout=900)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PROXMOX_TOKEN_SECRET"] = (LAB / "secrets/pve-api-token-secret").read_text().strip()
    env["PATH"] = f"{REPO / '.venv/bin'}:{env['PATH']}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    return env


DEPLOY = (str(REPO / ".venv/bin/ansible-playbook"), "-i", "inventory/lab", "deploy.yml")
HOST = (*DEPLOY[:3], "playbooks/host.yml")  # deploy.yml's first import


@dataclass
class Outcome:
    scenario: str
    point: str
    converged: bool
    problems: list[str]
    seconds: float


def _fresh_lab() -> LabState:
    _specops("lab", "down", "--destroy")
    _specops("lab", "up")
    return lab_state()


def _results_dir() -> Path:
    return REPO / "results" / CT_HOST


def check_after(
    final: Segment, before: LabState, reference: dict[str, bytes] | None, *, idempotent: bool
) -> list[str]:
    problems: list[str] = []
    if final.rc != 0:
        problems.append(f"re-run rc {final.rc}: {final.output[-1500:]}")
        return problems
    problems += conf_problems(before, reference)
    problems += node_lock_problems()
    problems += boot_problems()
    problems += serving_problems()
    problems += record_problems(_results_dir())
    problems += latest_results_problems()
    if idempotent:
        log = final.log.with_name(final.log.stem + "-again.log") if final.log else None
        again = run_segment(final.argv, None, env=_env(), log=log)
        changed = {h: c for h, c in again.changed().items() if c}
        if again.rc != 0 or changed:
            problems.append(f"a further run: rc {again.rc}, changed {changed}")
    return problems


def deploy_campaign(
    points: str, *, chained: bool, idempotent_every: int, logs: Path, points_log: Path | None = None
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    before = _fresh_lab()
    clean = run_segment(DEPLOY, None, env=_env(), log=logs / "clean.log")
    if clean.rc != 0:
        raise SystemExit(f"the clean run failed (rc {clean.rc}); see {logs / 'clean.log'}")
    reference = {p: d for p, d in lab_state().confs.items() if _kind(p) == "lxc"}
    # The points' numbers: this clean run's tasks, or an earlier clean run's (its log),
    # so that a campaign can go on where an earlier one stopped (a run that gathers
    # facts the cache no longer holds counts one task more: the names and positions
    # hold, the numbers not).
    numbered = task_positions(points_log.read_text() if points_log else clean.output)
    ks = parse_points(points, len(numbered))
    print(f"deploy: a clean run has {clean.tasks} tasks ({clean.seconds:.0f} s); points "
          f"{_ranges(ks)}{f' of {points_log}' if points_log else ''}")  # fmt: skip
    if chained:
        start = time.monotonic()
        before = _fresh_lab()
        killed: list[str] = []

        def after_kill(seg: Segment) -> None:
            found = settle() or conf_problems(before)
            killed.extend(found)
            print(f"  killed at {seg.kill_at} after {seg.seconds:.0f} s: "
                  f"{'; '.join(found) or 'nothing wrong'}", flush=True)  # fmt: skip

        # Each point is the clean run's k-th task, found by its name and position in the
        # re-run that follows the last kill (a re-run skips what is done: its counts
        # differ; the host roles' tasks recur in each batch: the position tells which).
        kills = [KillAt(numbered[k - 1][0], where=numbered[k - 1][1]) for k in ks]
        segs = chain(DEPLOY, kills, env=_env(), after_kill=after_kill, logs=logs / "chain")
        problems = [f"after a kill: {p}" for p in killed]
        unreached = [k for k, seg in zip(ks, segs, strict=False) if not seg.killed]
        for k, seg in zip(ks, segs, strict=False):
            if not seg.killed and seg.rc != 0:
                problems.append(f"the run for point {k} ended rc {seg.rc} (see {seg.log})")
        problems += check_after(segs[-1], before, reference, idempotent=True)
        tried = [k for k in ks if k not in unreached]
        label = f"chain {len(tried)} of {len(ks)} reached: " + ",".join(map(str, tried))
        if unreached:
            label += f"; not reached (the state had moved past them): {unreached}"
        outcomes.append(Outcome("deploy", label, not problems, problems, time.monotonic() - start))
        return outcomes
    for i, k in enumerate(ks):
        start = time.monotonic()
        before = _fresh_lab()
        point = KillAt(numbered[k - 1][0], where=numbered[k - 1][1])
        expire_facts_for(point)
        seg = run_segment(DEPLOY, point, env=_env(), log=logs / f"k{k:03d}-killed.log")
        problems = [f"after the kill: {p}" for p in settle() or conf_problems(before)]
        held = node_locks()  # the killed run's locks: the re-run takes them over
        if not seg.killed:
            problems.append(f"the run ended (rc {seg.rc}) before its task {k}")
        final = run_segment(DEPLOY, None, env=_env(), log=logs / f"k{k:03d}-rerun.log")
        problems += takeover_problems(held, final.output)
        idem = idempotent_every > 0 and i % idempotent_every == 0
        problems += check_after(final, before, reference, idempotent=idem)
        outcomes.append(Outcome("deploy", str(k), not problems, problems, time.monotonic() - start))
        print(_row(outcomes[-1]), flush=True)
    return outcomes


def host_campaign(
    points: str, *, idempotent_every: int, complete_every: int, logs: Path
) -> list[Outcome]:
    """deploy.yml's host part (``playbooks/host.yml``: the deploy's first tasks, the same
    banners in the same order), every point from the hard real state: a fresh lab, the
    run killed at its k-th task, re-run to the end of the host part; the nodes' trees
    must then equal a clean run's (:func:`node_state`), configs, locks and VM cards as
    :func:`conf_problems` checks. A chain cannot reach the tasks a node runs before its
    driver install once an earlier kill has moved it past them; this reaches each.
    Every ``complete_every``-th point the whole deploy.yml is run after the host part's
    re-run and checked as the deploy scenario does (server, records, changed=0): the
    container part then starts from a host state the comparison proved equal to a clean
    run's."""
    outcomes: list[Outcome] = []
    before = _fresh_lab()
    clean = run_segment(HOST, None, env=_env(), log=logs / "clean.log")
    if clean.rc != 0:
        raise SystemExit(f"the clean run failed (rc {clean.rc}); see {logs / 'clean.log'}")
    reference = node_state()
    # A point is the clean run's k-th task by name and position: a run that finds the
    # fact cache expired (ansible.cfg: 600 s) prints one "Gathering Facts" more.
    tasks = task_positions(clean.output)
    names = [name for name, _ in tasks]
    ks = parse_points(points, clean.tasks)
    files = len(reference)
    print(f"host: a clean run has {clean.tasks} tasks ({clean.seconds:.0f} s), "
          f"{files} files in the node trees; points {_ranges(ks)}", flush=True)  # fmt: skip
    for i, k in enumerate(ks):
        start = time.monotonic()
        before = _fresh_lab()
        point = KillAt(tasks[k - 1][0], where=tasks[k - 1][1])
        expire_facts_for(point)
        seg = run_segment(HOST, point, env=_env(), log=logs / f"k{k:03d}-killed.log")
        problems = [f"after the kill: {p}" for p in settle() or conf_problems(before)]
        held = node_locks()
        hit = task_positions(seg.output)
        if not seg.killed:
            problems.append(f"the run ended (rc {seg.rc}) before its task {k}")
        elif hit[-1] != tasks[k - 1]:
            problems.append(f"killed at {hit[-1]}, the clean run's task {k} is {tasks[k - 1]}")
        final = run_segment(HOST, None, env=_env(), log=logs / f"k{k:03d}-rerun.log")
        if final.rc != 0:
            problems.append(f"re-run rc {final.rc}: {final.output[-1500:]}")
        else:
            problems += conf_problems(before) + boot_problems() + node_lock_problems()
            problems += takeover_problems(held, final.output)
            left = state_differences(reference, node_state())
            problems += [f"not as a clean run: {d}" for d in left]
            if idempotent_every > 0 and i % idempotent_every == 0:
                again = run_segment(HOST, None, env=_env(), log=logs / f"k{k:03d}-again.log")
                changed = {h: c for h, c in again.changed().items() if c}
                if again.rc != 0 or changed:
                    problems.append(f"a further run: rc {again.rc}, changed {changed}")
            if complete_every > 0 and i % complete_every == 0:
                full = run_segment(DEPLOY, None, env=_env(), log=logs / f"k{k:03d}-deploy.log")
                problems += check_after(full, before, None, idempotent=True)
        label = f"{k} {names[k - 1]}"
        outcomes.append(Outcome("host", label, not problems, problems, time.monotonic() - start))
        print(_row(outcomes[-1]), flush=True)
    return outcomes


def _catalogue_name(product_id: str) -> str:
    product = gpu_catalogue.by_id(product_id)
    assert product is not None, product_id
    return product.name


# The card each lab node serves from (inventory/lab/hardware/), by catalogue id.
_MODEL = {"pve-a": _catalogue_name("rtx-a6000"), "pve-b": _catalogue_name("rtx-pro-6000")}


def _migrate_argv(source: str, target: str, state: Path, previous: Path) -> tuple[str, ...]:
    extra = {
        "migrate_vmid": VMID,
        "migrate_source": source,
        "migrate_target": target,
        "migrate_ct_host": CT_HOST,
        "migrate_gpu_model": _MODEL[target],
        "migrate_gpu_count": 1,
        "migrate_state_dir": str(state),
        "migrate_bench_plan": str(_results_dir() / "plan.yml"),
        "migrate_bench_previous": str(previous),
        "migrate_bench_throughput_drop": "off",
        "migrate_bench_latency_rise": "off",
    }
    return (
        str(REPO / ".venv/bin/ansible-playbook"), "-i", "inventory/lab",
        "playbooks/migrate.yml", "-e", json.dumps(extra),
    )  # fmt: skip


def where_is() -> list[str]:
    """The nodes where CT 801 has a config, and where it runs."""
    cluster = Cluster.load(LAB / "cluster")
    found = []
    for name, node in cluster.nodes.items():
        if node.ct_conf(VMID).exists():
            found.append(f"{name}:conf")
        if (node.lxcpath / node.lxc_name(VMID)).exists():
            state = subprocess.run(
                ["lxc-info", "-n", node.lxc_name(VMID), "-P", str(node.lxcpath), "-sH"],
                capture_output=True, text=True, check=False,
            ).stdout.strip()  # fmt: skip
            if state == "RUNNING":
                found.append(f"{name}:running")
    return found


def migrate_campaign(points: str, *, logs: Path, state_root: Path) -> list[Outcome]:
    """On a deployed lab: CT 801 moves pve-b -> pve-a killed at each point (alternating
    directions), the re-run completing the move."""
    outcomes: list[Outcome] = []
    before = _fresh_lab()
    deploy = run_segment(DEPLOY, None, env=_env(), log=logs / "deploy.log")
    if deploy.rc != 0:
        raise SystemExit(f"deploy failed (rc {deploy.rc}); see {logs / 'deploy.log'}")
    previous = next(_results_dir().rglob("results.json"))
    where, other = "pve-b", "pve-a"
    clean = run_segment(
        _migrate_argv(where, other, state_root / "clean", previous),
        None, env=_env(), log=logs / "clean.log",
    )  # fmt: skip
    if clean.rc != 0:
        raise SystemExit(f"a clean migration failed (rc {clean.rc}); see {logs / 'clean.log'}")
    where, other = other, where
    ks = parse_points(points, clean.tasks)
    print(f"migrate: a clean run has {clean.tasks} tasks ({clean.seconds:.0f} s); points {ks}")
    for k in ks:
        start = time.monotonic()
        before = lab_state()
        state = state_root / f"k{k:03d}"
        argv = _migrate_argv(where, other, state, previous)
        seg = run_segment(argv, KillAt(k), env=_env(), log=logs / f"k{k:03d}-killed.log")
        problems = [f"after the kill: {p}" for p in settle() or conf_problems(before)]
        at = where_is()
        if (
            len([w for w in at if w.endswith(":conf")]) != 1
            or len([w for w in at if w.endswith(":running")]) > 1
        ):
            problems.append(f"after the kill CT {VMID} is at {at}")
        final = run_segment(argv, None, env=_env(), log=logs / f"k{k:03d}-rerun.log")
        if final.rc == 0 and where_is() != [f"{other}:conf", f"{other}:running"]:
            problems.append(f"after the re-run CT {VMID} is at {where_is()}, not {other}")
        problems += check_after(final, before, None, idempotent=False)
        problems += record_problems(state)
        if not seg.killed:
            problems.append(f"the run ended before its task {k}")
        outcomes.append(
            Outcome("migrate", str(k), not problems, problems, time.monotonic() - start)
        )
        print(_row(outcomes[-1]), flush=True)
        if final.rc == 0:
            where, other = other, where
        else:
            break
    return outcomes


UNIT = "specops-tiny-qwen.service"


def _ct_systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    """systemctl in CT 801 on the node that holds it."""
    cluster = Cluster.load(LAB / "cluster")
    node = next(n for n in cluster.nodes.values() if n.ct_conf(VMID).exists())
    return subprocess.run(
        ["lxc-attach", "-n", node.lxc_name(VMID), "-P", str(node.lxcpath), "--",
         "systemctl", *args],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def kill_engine() -> None:
    """SIGKILL the engine: the main process of its unit (by the unit's name)."""
    pid = _ct_systemctl("show", "-p", "MainPID", "--value", UNIT).stdout.strip()
    done = _ct_systemctl("kill", "-s", "KILL", "--kill-whom=main", UNIT)
    print(f"engine: {UNIT} main PID {pid} SIGKILLed (rc {done.returncode})", flush=True)


def _said(pattern: str, output: str) -> bool:
    """``pattern`` (a regex, its spaces matching the callback's folding) in the output."""
    return re.search(pattern.replace(" ", r"\s+"), output) is not None


def reboot_fail_campaign(*, logs: Path) -> list[Outcome]:
    """pve-a's emulated reboot does not come back (specops_lab.node.NO_RETURN_FAULT) in
    a deploy from the hard real state, reboot timeout 30 s: the run must fail naming
    pve-a and its boot, with nothing half-changed; the node brought back, a re-run must
    converge."""
    from specops_lab.node import NO_RETURN_FAULT, boot  # noqa: PLC0415

    start = time.monotonic()
    before = _fresh_lab()
    problems: list[str] = []
    root = Cluster.load(LAB / "cluster").node("pve-a").root
    (root / NO_RETURN_FAULT).parent.mkdir(parents=True, exist_ok=True)
    (root / NO_RETURN_FAULT).write_text("issue 31\n")
    seg = run_segment(
        [*DEPLOY, "-e", "nvidia_driver_reboot_timeout=30"], None, env=_env(),
        log=logs / "faulted.log",
    )  # fmt: skip
    if seg.rc == 0:
        problems.append("the run passed with pve-a down")
    if not _said(r"fatal: \[pve-a\]", seg.output) or not _said("boot", seg.output):
        problems.append("the failure does not name pve-a and its boot")
    problems += [f"with pve-a down: {p}" for p in conf_problems(before)]
    (root / NO_RETURN_FAULT).unlink()
    boot(root)
    final = run_segment(DEPLOY, None, env=_env(), log=logs / "rerun.log")
    problems += check_after(final, before, None, idempotent=True)
    outcome = Outcome("reboot-fail", "pve-a", not problems, problems, time.monotonic() - start)
    print(_row(outcome), flush=True)
    return [outcome]


def engine_campaign(*, logs: Path) -> list[Outcome]:
    """On a lab deployed from the hard real state, the engine SIGKILLed (its unit's main
    PID) during a benchmark cell (playbooks/benchmark.yml, reuse off) and during the
    readiness gate (the service stopped; deploy.yml starts it and waits): each run fails
    naming its task, or sees the restarted server (Restart=on-failure); the results it
    writes parse, nothing half-changed; a deploy re-run then converges."""
    _fresh_lab()
    deploy = run_segment(DEPLOY, None, env=_env(), log=logs / "deploy.log")
    if deploy.rc != 0:
        raise SystemExit(f"deploy failed (rc {deploy.rc}); see {logs / 'deploy.log'}")
    bench: tuple[str, ...] = (
        *DEPLOY[:3], "playbooks/benchmark.yml", "-e", "benchmark_reuse=false"
    )  # fmt: skip
    cases = (
        # 1 s in: the lab's smoke benchmark takes a few seconds (at 4 s it had ended).
        ("benchmark cell", bench, KillAt("benchmark : Run the benchmark against", after_s=1)),
        ("readiness gate", DEPLOY,
         KillAt("inference_service : Ensure the server runs this unit", after_s=8)),
    )  # fmt: skip
    outcomes: list[Outcome] = []
    for name, argv, point in cases:
        start = time.monotonic()
        before = lab_state()
        if name == "readiness gate":
            _ct_systemctl("stop", UNIT)
        tag = name.replace(" ", "-")
        seg = run_segment(argv, point, env=_env(), log=logs / f"{tag}.log", on_point=kill_engine)
        problems: list[str] = []
        if seg.rc != 0 and not re.search(r"fatal: \[lab-ct801", seg.output):
            problems.append(f"rc {seg.rc} without a task that names the failure")
        problems += [f"after the fault: {p}" for p in settle() or conf_problems(before)]
        problems += record_problems(_results_dir())
        final = run_segment(DEPLOY, None, env=_env(), log=logs / f"{tag}-rerun.log")
        problems += check_after(final, before, None, idempotent=True)
        outcomes.append(
            Outcome(f"engine kill ({name})", f"{point} rc {seg.rc}", not problems, problems,
                    time.monotonic() - start)
        )  # fmt: skip
        print(_row(outcomes[-1]), flush=True)
    return outcomes


# The rollout scenario: two docker systemd nodes serving the tiny model
# (specops_lab.tune_nodes, as tests/tune/test_real_rollout.py), starting on no
# speculation; the profile rolled out is ngram 6 draft tokens (5 speculative tokens).
_OLD: dict[str, object] = {"method": "none"}
_NEW: dict[str, object] = {
    "method": "ngram",
    "num_draft_tokens": 6,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
}
_NEW_MARK = '"num_speculative_tokens":5'
_SMOKE: dict[str, object] = {
    "concurrency": [2], "context_lengths": [128], "output_len": 32,
    "requests_per_cell": 4, "warmup_per_cell": 1, "humaneval": {"max_tokens": 48},
}  # fmt: skip


def _node_identity(node: str) -> dict[str, str]:
    out = subprocess.run(
        ["docker", "exec", node, "systemctl", "show", UNIT, "-p", "MainPID", "-p",
         "ActiveState", "-p", "ExecStart", "-p", "NeedDaemonReload"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    pid = found.get("MainPID", "0")
    cmdline = subprocess.run(
        ["docker", "exec", node, "cat", f"/proc/{pid}/cmdline"],
        capture_output=True, check=False,
    ).stdout.replace(b"\0", b" ").decode(errors="replace")  # fmt: skip
    found["cmdline"] = cmdline
    return found


_SETTLING = ("activating", "deactivating", "reloading")


def rollout_problems(nodes: Sequence[Any]) -> list[str]:
    """Each node serves one profile, the old or the new: its unit and its running
    process agree (never the unit of one and the process of the other), and it answers."""
    from ansible_collections.specops.infra.plugins.module_utils.readiness import (  # noqa: PLC0415
        wait_ready,
    )

    problems: list[str] = []
    for node in nodes:
        ident = _node_identity(node.name)
        # A start or stop the killed run asked for goes on without it (systemd on the
        # node): judge the node once that job is done (bounded by the unit's timeouts).
        deadline = time.monotonic() + 300
        while ident.get("ActiveState") in _SETTLING and time.monotonic() < deadline:
            time.sleep(2)
            ident = _node_identity(node.name)
        unit_new = _NEW_MARK in ident.get("ExecStart", "")
        proc_new = "num_speculative_tokens" in ident["cmdline"].replace(" ", "")
        if ident.get("ActiveState") != "active" or not ident["cmdline"]:
            problems.append(f"{node.name}: not serving ({ident.get('ActiveState')})")
        elif unit_new != proc_new or ident.get("NeedDaemonReload") == "yes":
            unit, run = ("new" if x else "old" for x in (unit_new, proc_new))
            reload = ident.get("NeedDaemonReload")
            problems.append(f"{node.name}: unit on {unit}, process on {run} (reload {reload})")
        elif not wait_ready(node.base_url, "tiny-qwen", timeout=120).ready:
            problems.append(f"{node.name}: does not answer")
    return problems


def rollout_campaign(points: Sequence[KillAt], *, logs: Path) -> list[Outcome]:
    """playbooks/rollout.yml over two nodes, killed at each point (each time from the old
    profile: the nodes are put back on it by a rollout of the old one), then re-run."""
    from specops_lab.tune_nodes import remove_nodes, start_nodes, write_inventory  # noqa: PLC0415

    outcomes: list[Outcome] = []
    nodes = start_nodes(2)
    try:
        inventory = write_inventory(nodes, logs / "hosts.json", _OLD)
        setup = run_segment(
            [*DEPLOY[:1], "-i", str(inventory), "tests/fixtures/tune/lab-nodes.yml"], None,
            log=logs / "setup.log",
        )  # fmt: skip
        if setup.rc != 0:
            raise SystemExit(f"the nodes' setup failed; see {logs / 'setup.log'}")

        def rollout(profile: dict[str, object], tag: str) -> tuple[str, ...]:
            data = {
                "speculative_rollout_profile": profile,
                "speculative_rollout_smoke_plan": _SMOKE,
                "speculative_rollout_throughput_drop": None,
                "speculative_rollout_baseline_dir": str(logs / "baselines"),
                "speculative_rollout_report_dir": str(logs / f"nodes-{tag}"),
                "speculative_rollout_plain_baseline_dir": str(logs / "plain"),
            }
            path = logs / f"vars-{tag}.json"
            path.write_text(json.dumps(data))
            return (*DEPLOY[:1], "-i", str(inventory), "playbooks/rollout.yml", "-e", f"@{path}")

        for i, point in enumerate(points):
            start = time.monotonic()
            seg = run_segment(rollout(_NEW, f"{i}"), point, log=logs / f"{i:02d}-killed.log")
            problems = [] if seg.killed else [f"the run ended before {point}"]
            problems += [f"after the kill: {p}" for p in rollout_problems(nodes)]
            final = run_segment(rollout(_NEW, f"{i}"), None, log=logs / f"{i:02d}-rerun.log")
            if final.rc != 0:
                problems.append(f"re-run rc {final.rc}")
            for node in nodes:
                if _NEW_MARK not in _node_identity(node.name).get("ExecStart", ""):
                    problems.append(f"{node.name}: not on the new profile after the re-run")
            problems += rollout_problems(nodes)
            problems += record_problems(logs / f"nodes-{i}")
            outcomes.append(Outcome("rollout", str(point), not problems, problems,
                                    time.monotonic() - start))  # fmt: skip
            print(_row(outcomes[-1]), flush=True)
            if i + 1 < len(points):
                back = run_segment(rollout(_OLD, f"back{i}"), None, log=logs / f"{i:02d}-back.log")
                if back.rc != 0:
                    raise SystemExit(f"rolling back to the old profile failed; see {logs}")
    finally:
        remove_nodes(2)
    return outcomes


ROLLOUT_POINTS = (
    # In the new profile's restart and readiness gate on the first node: the apply step
    # is an include at play level (its banner carries no role name); its validation
    # tasks take a few seconds, the restart and gate about a minute.
    KillAt("Apply the new profile (one restart", after_s=8),
    KillAt("speculative_rollout : Run the smoke benchmark and compare", after_s=3),
)


# speculative-apply.yml killed in the service step (the unit written, the server
# restarting, its readiness gate under way) while the run holds pve-b's node lock.
LOCK_POINT = KillAt("inference_service : Ensure the server runs this unit", after_s=5)
APPLY = (*DEPLOY[:3], "playbooks/speculative-apply.yml", "-l", CT_HOST)


def lock_campaign(*, logs: Path) -> list[Outcome]:
    """A run killed while it holds a node lock (issue 51): on a deployed lab,
    speculative-apply.yml with another profile is killed in its service step; the lock
    stays held by the dead run; the re-run (the inventory's profile) takes it over at
    once, saying from whom, converges and releases it."""
    before = _fresh_lab()
    deployed = run_segment(DEPLOY, None, env=_env(), log=logs / "deploy.log")
    if deployed.rc != 0:
        raise SystemExit(f"the deploy failed (rc {deployed.rc}); see {logs / 'deploy.log'}")
    start = time.monotonic()
    other = json.dumps({"inference_service_speculative": {"method": "none"}})
    seg = run_segment((*APPLY, "-e", other), LOCK_POINT, env=_env(), log=logs / "killed.log")
    problems = [] if seg.killed else [f"the run ended (rc {seg.rc}) before {LOCK_POINT}"]
    held = node_locks()
    if "pve-b" not in held:
        problems.append("the killed run held no node lock on pve-b")
    final = run_segment(APPLY, None, env=_env(), log=logs / "rerun.log")
    problems += takeover_problems(held, final.output)
    problems += check_after(final, before, None, idempotent=True)
    outcome = Outcome("lock", str(LOCK_POINT), not problems, problems, time.monotonic() - start)
    print(_row(outcome), flush=True)
    return [outcome]


def parse_points(points: str, total: int) -> list[int]:
    """``all`` (1..total), ``N`` (N spread points) or a list ``k1,k2,a-b,...`` (``a-b``:
    every task from a to b)."""
    if points == "all":
        return list(range(1, total + 1))
    if "," in points or "-" in points or points.startswith("="):
        ks: list[int] = []
        try:
            for part in (p for p in points.lstrip("=").split(",") if p):
                low, _, high = part.partition("-")
                ks += range(int(low), int(high or low) + 1)
        except ValueError:
            raise SystemExit(
                f"--points: {points!r}; valid: all, N (a count) or k1,k2,a-b,..."
            ) from None
        bad = [k for k in ks if not 1 <= k <= total]
        if bad:
            raise SystemExit(f"--points: {bad} outside 1..{total} (the clean run's tasks)")
        return ks
    if points.isdigit() and int(points) > 0:
        return spread(total, int(points))
    raise SystemExit(f"--points: {points!r}; valid: all, N (a count) or k1,k2,a-b,...")


def _ranges(ks: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3, 7``."""
    runs: list[list[int]] = []
    for k in ks:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _row(o: Outcome) -> str:
    lost = "; ".join(o.problems)[:300] or "nothing"
    ok = "yes" if o.converged else "NO"
    return f"| {o.scenario} | {o.point} | {ok} | {lost} | {o.seconds:.0f} s |"


def table(outcomes: Sequence[Outcome]) -> str:
    lines = ["| scenario | crash points tried | converged | anything lost |", "|---|---|---|---|"]
    by: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by.setdefault(o.scenario, []).append(o)
    for scenario, rows in by.items():
        numbered = [o.point.split(" ", 1)[0] for o in rows]
        if all(n.isdigit() for n in numbered):  # one per task (host): its numbers
            tried = _ranges([int(n) for n in numbered])
        else:
            tried = ", ".join(o.point for o in rows)
        ok = sum(o.converged for o in rows)
        lost = "; ".join(p for o in rows for p in o.problems)[:400] or "nothing"
        lines.append(f"| {scenario} | {len(rows)} ({tried}) | {ok}/{len(rows)} | {lost} |")
    return "\n".join(lines)


@contextlib.contextmanager
def _lab_down_after() -> Iterator[None]:
    try:
        yield
    finally:
        _specops("lab", "down", "--destroy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario", action="append",
        choices=("deploy", "host", "migrate", "rollout", "engine", "reboot-fail", "lock"),
    )  # fmt: skip
    parser.add_argument("--points", default="4", help="all | N (spread) | k1,k2,...")
    parser.add_argument(
        "--chain", action="store_true",
        help="deploy: one run killed at every point in turn, then completed",
    )  # fmt: skip
    parser.add_argument(
        "--idempotent-every", type=int, default=1,
        help="deploy, per point: a further run (changed=0) after every n-th point; 0: never",
    )  # fmt: skip
    parser.add_argument(
        "--points-log", type=Path,
        help="deploy: number the points by the tasks of this earlier clean run's log",
    )  # fmt: skip
    parser.add_argument(
        "--complete-every", type=int, default=25,
        help="host: the whole deploy.yml run and checked after every n-th point; 0: never",
    )  # fmt: skip
    ns = parser.parse_args(argv)
    logs = REPO / ".cache" / "crash-campaign" / time.strftime("%Y%m%dT%H%M%S")
    outcomes: list[Outcome] = []
    with _lab_down_after():
        for scenario in ns.scenario or ["deploy"]:
            if scenario == "deploy":
                outcomes += deploy_campaign(
                    ns.points, chained=ns.chain, idempotent_every=ns.idempotent_every,
                    logs=logs / "deploy", points_log=ns.points_log,
                )  # fmt: skip
            elif scenario == "host":
                outcomes += host_campaign(
                    ns.points, idempotent_every=ns.idempotent_every,
                    complete_every=ns.complete_every, logs=logs / "host",
                )  # fmt: skip
            elif scenario == "migrate":
                outcomes += migrate_campaign(
                    ns.points, logs=logs / "migrate", state_root=logs / "migrate-state"
                )
            elif scenario == "rollout":
                outcomes += rollout_campaign(ROLLOUT_POINTS, logs=logs / scenario)
            elif scenario == "engine":
                outcomes += engine_campaign(logs=logs / scenario)
            elif scenario == "lock":
                outcomes += lock_campaign(logs=logs / scenario)
            else:
                outcomes += reboot_fail_campaign(logs=logs / scenario)
    print(table(outcomes))
    print(f"logs: {logs}")
    return 0 if all(o.converged for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
