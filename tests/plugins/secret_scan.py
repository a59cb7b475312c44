"""Find secrets where a user other than root could read them: files, command lines,
process environments and journals (issues 19 and 31).

Two tools, for tests:

``CmdlineScan(secret, markers=...)`` watches every process's ``/proc/*/cmdline`` for
one secret while a block runs, every few milliseconds (the focused tests of issue 19),
and reads the command line of every process the moment it execs (the kernel's process
events connector, as root): a CLI that lives a quarter of a second is not missed by a
scan of ``/proc`` that a loaded machine slows down.

The rest is the scan of a whole run (issue 31): given named secrets (``Secret``),

- :func:`scan_tree` walks a directory tree (no symlink followed, one filesystem) and
  reports each regular file that holds a secret and that a user other than root can
  read: the file's owner when it is not root (an owner can always read, by chmod if
  need be), its group when that is not root's and the mode lets the group read, any
  user when the mode lets others read; for a group or another user only when every
  directory above it, up to ``/``, lets that audience pass (a 0644 file in a 0700
  root folder is root's only). A file whose group bits are an ACL mask (a POSIX ACL is
  set) counts as readable by the ACL's users. Files that no such user can read are
  not even opened, which keeps the scan of a lab (a few GB of engine venv) cheap.
- :class:`ProcessWatch` samples ``/proc`` in a background thread (every 0.2 s by
  default) for as long as a block runs: a secret in a command line is a finding
  (``/proc/<pid>/cmdline`` is world-readable), as is one in the environment of a
  process that does not run as root (``/proc/<pid>/environ`` is readable by root and
  by the process's own user).
- :func:`scan_stream` reads what a command prints (``journalctl -o export``): a
  secret there is a finding (a journal is read by the adm and systemd-journal groups,
  and a unit's own messages by its user).

A finding names the place and the secret's name, never its value; nothing in this
module prints, stores or returns a secret's value.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

__all__ = [
    "CmdlineScan",
    "Finding",
    "ProcessWatch",
    "Secret",
    "TreeScan",
    "audience",
    "redacted",
    "scan_stream",
    "scan_tree",
]

_CHUNK = 1 << 20
_ACL_XATTR = "system.posix_acl_access"


@dataclass(frozen=True)
class Secret:
    """A known secret value under the name a finding shows (``PROXMOX_TOKEN_SECRET``).
    Short values would match by chance: at least 8 characters."""

    name: str
    value: str = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.value) < 8:
            raise ValueError(f"secret {self.name}: use a distinctive value (8+ characters)")

    @property
    def needle(self) -> bytes:
        return self.value.encode()


@dataclass(frozen=True)
class Finding:
    """``secret`` (its name) is in ``where`` (a path, ``pid N (comm) cmdline``, a
    journal), readable by ``who`` (``any user (mode 0644)``, ``user 1000 (owner)``...)."""

    where: str
    secret: str
    who: str

    def __str__(self) -> str:
        return f"{self.where}: holds {self.secret}, readable by {self.who}"


@dataclass
class TreeScan:
    """What :func:`scan_tree` saw: files walked, files read (the others no user but
    root can read), bytes read, and the findings."""

    files: int = 0
    read: int = 0
    bytes_read: int = 0
    findings: list[Finding] = field(default_factory=list)

    def add(self, other: TreeScan) -> None:
        self.files += other.files
        self.read += other.read
        self.bytes_read += other.bytes_read
        self.findings.extend(other.findings)


@dataclass(frozen=True)
class _Dir:
    mode: int
    uid: int
    gid: int


def _passes(chain: Sequence[_Dir], *, uid: int | None = None, gid: int | None = None) -> bool:
    """Whether a non-root audience gets through every directory of ``chain``: a user
    ``uid`` (as owner of the folder, or as anybody), a group ``gid`` (as group, or as
    anybody), or, with neither, any user."""
    for d in chain:
        if d.mode & stat.S_IXOTH:
            continue
        if uid is not None and d.uid == uid and d.mode & stat.S_IXUSR:
            continue
        if gid is not None and d.gid == gid and d.mode & stat.S_IXGRP:
            continue
        return False
    return True


def _has_acl(path: str) -> bool:
    try:
        return _ACL_XATTR in os.listxattr(path, follow_symlinks=False)
    except OSError:
        return False


def audience(path: str, st: os.stat_result, chain: Sequence[_Dir]) -> str | None:
    """Who other than root can read the file ``path`` (its ``lstat`` ``st``; ``chain``:
    every directory above it, from ``/``); None when only root can."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IROTH and _passes(chain):
        return f"any user (mode {mode:04o})"
    if st.st_uid != 0 and _passes(chain, uid=st.st_uid):
        return f"user {st.st_uid} (its owner, mode {mode:04o})"
    if mode & stat.S_IRGRP:
        if st.st_gid != 0 and _passes(chain, gid=st.st_gid):
            return f"group {st.st_gid} (mode {mode:04o})"
        if _has_acl(path) and _passes(chain):
            return f"the users of its ACL (mode {mode:04o} with an ACL)"
    return None


def _holds(path: str, secrets: Sequence[Secret]) -> tuple[list[Secret], int]:
    """The secrets the file holds, and the bytes read (in chunks that overlap by the
    longest secret, so none is missed at a boundary)."""
    overlap = max(len(s.needle) for s in secrets) - 1
    found: dict[str, Secret] = {}
    size = 0
    tail = b""
    try:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(_CHUNK):
                size += len(chunk)
                window = tail + chunk
                for s in secrets:
                    if s.name not in found and s.needle in window:
                        found[s.name] = s
                tail = window[-overlap:] if overlap else b""
    except OSError:
        pass  # gone or unreadable since the walk: nothing to read
    return list(found.values()), size


def _ancestors(root: Path) -> list[_Dir]:
    chain: list[_Dir] = []
    for p in reversed(root.parents):
        st = p.stat()
        chain.append(_Dir(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid))
    return chain


def scan_tree(
    root: Path,
    secrets: Sequence[Secret],
    *,
    changed_since: float | None = None,
    skip: Iterable[str] = (),
) -> TreeScan:
    """Every regular file under ``root`` (``root`` itself may be a file), symlinks not
    followed, mount points not crossed, folders named in ``skip`` left out (``.git``).
    ``changed_since`` (a ``time.time()``): only files whose status changed since
    (``st_ctime``: what a run wrote, even with an old mtime), for a shared folder such
    as ``/tmp``. A missing root is an empty scan."""
    result = TreeScan()
    if not secrets:
        raise ValueError("scan_tree: no secret to look for")
    try:
        top = root.lstat()
    except FileNotFoundError:
        return result
    skipped = frozenset(skip)
    chain = _ancestors(root)

    def visit(path: str, st: os.stat_result, chain: list[_Dir]) -> None:
        if not stat.S_ISREG(st.st_mode):
            return
        if changed_since is not None and st.st_ctime < changed_since:
            return
        result.files += 1
        who = audience(path, st, chain)
        if who is None:
            return
        result.read += 1
        held, size = _holds(path, secrets)
        result.bytes_read += size
        result.findings.extend(Finding(path, s.name, who) for s in held)

    def walk(path: str, st: os.stat_result, chain: list[_Dir]) -> None:
        inner = [*chain, _Dir(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)]
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(est.st_mode):
                if entry.name in skipped or est.st_dev != top.st_dev:
                    continue
                walk(entry.path, est, inner)
            else:
                visit(entry.path, est, inner)

    if stat.S_ISDIR(top.st_mode):
        walk(str(root), top, chain)
    else:
        visit(str(root), top, chain)
    return result


def scan_stream(where: str, data: bytes, secrets: Sequence[Secret], who: str) -> list[Finding]:
    """A finding for each secret in ``data`` (what ``where`` printed), read by ``who``."""
    return [Finding(where, s.name, who) for s in secrets if s.needle in data]


def _uid(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])  # effective
    except (OSError, ValueError, IndexError):
        return None
    return None


def _process(pid: str) -> str:
    """``comm, unit``: the process's name and the last part of its cgroup (the systemd
    unit it runs in, or the container), so a finding says whose process it is."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cgroup = Path(f"/proc/{pid}/cgroup").read_text().splitlines()[-1]
    except (OSError, IndexError):
        return "?"
    return f"{comm}, {cgroup.rsplit('/', 1)[-1] or '/'}"


class ProcessWatch:
    """Samples ``/proc`` every ``interval`` seconds while the ``with`` block runs.

    ``secrets`` is a sequence, or a callable that returns the secrets known so far (one
    made during the run, read from its file once it exists). ``findings`` keeps one
    finding per process, place and secret; ``samples`` counts the passes over
    ``/proc`` and ``processes`` the distinct processes seen, so a test proves the
    watch ran while the run's processes lived."""

    def __init__(
        self,
        secrets: Sequence[Secret] | Callable[[], Sequence[Secret]],
        *,
        interval: float = 0.2,
    ) -> None:
        if callable(secrets):
            self._source = secrets
        else:
            fixed = list(secrets)
            self._source = lambda: fixed
        self.interval = interval
        self.samples = 0
        self.processes = 0
        self._seen: set[tuple[str, str]] = set()
        self._found: dict[tuple[str, str, str], Finding] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.error: BaseException | None = None

    @property
    def findings(self) -> list[Finding]:
        return list(self._found.values())

    def sample(self) -> None:
        """One pass over every process of this machine (containers' included)."""
        secrets = list(self._source())
        for entry in os.scandir("/proc"):
            pid = entry.name
            if not pid.isdigit():
                continue
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            key = (pid, cmdline[:200].decode("utf-8", "replace"))
            if key not in self._seen:
                self._seen.add(key)
                self.processes += 1
            if not secrets:
                continue
            for s in secrets:
                if s.needle in cmdline:
                    self._add(pid, "cmdline", s, "any user (/proc/<pid>/cmdline)")
            try:
                environ = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue
            held = [s for s in secrets if s.needle in environ]
            if held:
                uid = _uid(pid)
                if uid not in (0, None):
                    for s in held:
                        self._add(pid, "environ", s, f"user {uid} (the process's own user)")
        self.samples += 1

    def _add(self, pid: str, place: str, secret: Secret, who: str) -> None:
        key = (pid, place, secret.name)
        if key not in self._found:
            where = f"pid {pid} ({_process(pid)}) /proc/{pid}/{place}"
            self._found[key] = Finding(where, secret.name, who)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval)
        except Exception as exc:  # kept for __exit__, which raises it
            self.error = exc

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None and exc is None:
            raise RuntimeError("the process watch stopped early") from self.error
        self.sample()  # the last state too


def redacted(raw: bytes, secret: bytes) -> str:
    """A command line as shown in a report: NULs as spaces, the secret replaced."""
    return raw.replace(secret, b"<secret>").replace(b"\0", b" ").decode("utf-8", "replace")


# The kernel's process events connector (linux/cn_proc.h): a netlink socket that
# receives a message per exec, fork, exit... once it has asked to listen (root only).
_NETLINK_CONNECTOR = 11
_CN_IDX_PROC = _CN_VAL_PROC = 1
_PROC_CN_MCAST_LISTEN = 1
_PROC_EVENT_EXEC = 0x00000002
_NLMSG_DONE = 3
_NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT_HDR = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
_EXEC = struct.Struct("=II")  # process_pid, process_tgid


def _exec_events() -> socket.socket | None:
    """A socket subscribed to the connector's events, or None (not root, no connector)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_CONNECTOR)
    except OSError:
        return None
    try:
        sock.bind((0, _CN_IDX_PROC))
        op = struct.pack("=I", _PROC_CN_MCAST_LISTEN)
        cn = _CN_MSG.pack(_CN_IDX_PROC, _CN_VAL_PROC, 0, 0, len(op), 0)
        size = _NLMSG_HDR.size + len(cn) + len(op)
        sock.send(_NLMSG_HDR.pack(size, _NLMSG_DONE, 0, 0, 0) + cn + op)
        sock.settimeout(0.1)
    except OSError:
        sock.close()
        return None
    return sock


def _exec_pids(sock: socket.socket) -> list[int]:
    """The pids that exec'd in the next message (none after 0.1 s of quiet)."""
    try:
        data = sock.recv(65536)
    except (TimeoutError, OSError):
        return []
    pids = []
    offset = 0
    while offset + _NLMSG_HDR.size <= len(data):
        length = _NLMSG_HDR.unpack_from(data, offset)[0]
        if length < _NLMSG_HDR.size:
            break
        event = offset + _NLMSG_HDR.size + _CN_MSG.size
        if event + _EVENT_HDR.size + _EXEC.size <= offset + length:
            what = _EVENT_HDR.unpack_from(data, event)[0]
            if what == _PROC_EVENT_EXEC:
                pids.append(_EXEC.unpack_from(data, event + _EVENT_HDR.size)[1])
        offset += (length + 3) & ~3
    return pids


class CmdlineScan:
    """``with CmdlineScan(secret, markers=("migrate preflight",)) as scan: run(...)``
    reads ``/proc/*/cmdline`` of every process of this machine in a background thread
    (every few milliseconds) for as long as the block runs. ``scan.hits`` lists each
    process whose command line held the secret (what any local user could have read
    there), the secret itself shown as ``<secret>``; ``scan.seen`` counts, per marker,
    the scans that saw a process whose command line held it, so a test proves the scan
    ran while the interesting processes lived."""

    def __init__(
        self, secret: str, *, markers: tuple[str, ...] = (), interval: float = 0.003
    ) -> None:
        if len(secret) < 8:
            raise ValueError("use a distinctive test secret (8+ characters)")
        self.secret = secret.encode()
        self.markers = {m: m.encode() for m in markers}
        self.interval = interval
        self.hits: list[str] = []
        self.seen: dict[str, int] = dict.fromkeys(markers, 0)
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._lock = threading.Lock()
        self._events = _exec_events()  # None when the connector is not ours (not root)
        self._exec_thread = threading.Thread(target=self._exec_loop, daemon=True)

    def _check(self, pid: str, raw: bytes, found: dict[str, bool]) -> None:
        if self.secret in raw:
            with self._lock:
                self.hits.append(f"pid {pid}: {redacted(raw, self.secret)[:300]}")
        for name, marker in self.markers.items():
            if marker in raw:
                found[name] = True

    def _count(self, found: dict[str, bool]) -> None:
        with self._lock:
            for name, hit in found.items():
                self.seen[name] += int(hit)

    def _scan_once(self) -> None:
        found: dict[str, bool] = dict.fromkeys(self.markers, False)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            self._check(entry.name, raw, found)
        self._count(found)
        self.scans += 1

    def _exec_loop(self) -> None:
        """Each exec's command line, read as the event arrives."""
        assert self._events is not None
        while not self._stop.is_set():
            for pid in _exec_pids(self._events):
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                found = dict.fromkeys(self.markers, False)
                self._check(str(pid), raw, found)
                self._count(found)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._scan_once()
            time.sleep(self.interval)

    def __enter__(self) -> CmdlineScan:
        self._thread.start()
        if self._events is not None:
            self._exec_thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._events is not None:
            self._exec_thread.join(timeout=10)
            self._events.close()
