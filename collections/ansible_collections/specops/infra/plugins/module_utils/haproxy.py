"""HAProxy's runtime API: read each backend server's state, drain it, put it back.

The router in front of a serving group is HAProxy from Debian (role ``router``). Its
runtime API is a UNIX socket (``stats socket ... level admin``) that takes one command
per connection and answers in text: ``show stat`` (CSV, one row per frontend, backend
and server), ``set server <backend>/<server> state ready|drain|maint``, ``show servers
state`` (what a reload keeps, through ``server-state-file``). Stdlib only (it runs on
the router host).

Draining a server (:func:`drain`): its state becomes ``drain`` (no new request is sent
to it; the ones it serves go on) and the call waits until it serves none (``scur``, the
server's current sessions, and ``qcur``, the requests queued for it, both 0). A server
that still serves requests after the time allowed is put back as it was and the call
fails: nothing is left half-done. Putting it back (:func:`ready`): ``ready``, then the
call waits until HAProxy's own health check says UP (``rise`` checks in a row passed),
so that a rollout never drains the next server while this one gets no traffic yet.
"""

from __future__ import annotations

import csv
import io
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

__all__ = [
    "ADMIN_STATES",
    "HaproxyError",
    "ServerStat",
    "command",
    "drain",
    "find",
    "parse_admin",
    "parse_stat",
    "ready",
    "save_state",
    "set_state",
    "show_stat",
]

ADMIN_STATES = ("ready", "drain", "maint")
SOCKET_TIMEOUT_S = 10.0


class HaproxyError(RuntimeError):
    """The runtime API refused a command, or a server did not reach the wanted state."""


Sender = Callable[[str, str], str]


def command(sock_path: str, line: str) -> str:
    """Send one command to the runtime API on ``sock_path``; its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(SOCKET_TIMEOUT_S)
        try:
            s.connect(sock_path)
        except OSError as exc:
            raise HaproxyError(
                f"cannot reach HAProxy's runtime API at {sock_path}: {exc} (is haproxy running,"
                " with `stats socket ... level admin` in its configuration?)"
            ) from None
        s.sendall(line.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


@dataclass(frozen=True)
class ServerStat:
    """One backend server as ``show stat`` reports it."""

    backend: str
    server: str
    status: str  # UP, DOWN, DRAIN, MAINT, NOLB, "UP 1/2" (going down), "no check", ...
    check_status: str  # L7OK, L4CON, L7STS, ... ("" before the first check)
    check_code: str  # the HTTP status of the last check
    last_check: str  # its description (HAProxy's last_chk)
    sessions: int  # scur: requests the server serves now
    queued: int  # qcur: requests waiting for it
    total: int  # stot: requests sent to it since HAProxy started
    weight: int
    address: str
    last_change_s: int  # seconds since its status last changed
    # ready, drain or maint: the state the runtime API sets, from ``show servers state``
    # (``status`` alone does not say it: a drained server that is down shows DOWN)
    admin: str = "ready"

    @property
    def up(self) -> bool:
        """Taking requests: UP (a drained or down server is not)."""
        return self.status == "UP"

    @property
    def idle(self) -> bool:
        return self.sessions == 0 and self.queued == 0

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.update(up=self.up)
        return out


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def parse_stat(text: str) -> list[ServerStat]:
    """The server rows of ``show stat``'s CSV (frontends and backend totals left out)."""
    body = text.lstrip("# ")
    rows = csv.DictReader(io.StringIO(body))
    out = []
    for row in rows:
        name = row.get("svname") or ""
        if not row.get("pxname") or name in ("FRONTEND", "BACKEND", ""):
            continue
        stat = ServerStat(
            backend=row["pxname"], server=name, status=row.get("status") or "",
            check_status=(row.get("check_status") or "").lstrip("* "),
            check_code=row.get("check_code") or "", last_check=row.get("last_chk") or "",
            sessions=_int(row.get("scur")), queued=_int(row.get("qcur")),
            total=_int(row.get("stot")), weight=_int(row.get("weight")),
            address=row.get("addr") or "", last_change_s=_int(row.get("lastchg")),
        )  # fmt: skip
        out.append(stat)
    return out


# srv_admin_state bits (HAProxy's server.h): forced, inherited, configured, resolution
# and hostname maintenance; forced and inherited drain.
_MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_DRAIN_BITS = 0x08 | 0x10


def parse_admin(text: str) -> dict[tuple[str, str], str]:
    """(backend, server) -> ready, drain or maint, from ``show servers state``."""
    out: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or line.startswith("#") or not fields[0].isdigit():
            continue
        try:
            bits = int(fields[6])
        except ValueError:
            continue
        admin = "maint" if bits & _MAINT_BITS else "drain" if bits & _DRAIN_BITS else "ready"
        out[(fields[1], fields[3])] = admin
    return out


def show_stat(sock_path: str, send: Sender = command) -> list[ServerStat]:
    """Every backend server, with its admin state."""
    rows = parse_stat(send(sock_path, "show stat"))
    admin = parse_admin(send(sock_path, "show servers state"))
    return [replace(r, admin=admin.get((r.backend, r.server), r.admin)) for r in rows]


def find(sock_path: str, backend: str, server: str, send: Sender = command) -> ServerStat:
    for row in show_stat(sock_path, send):
        if row.backend == backend and row.server == server:
            return row
    raise HaproxyError(f"HAProxy has no server {backend}/{server} (show stat)")


def set_state(
    sock_path: str, backend: str, server: str, state: str, send: Sender = command
) -> None:
    if state not in ADMIN_STATES:
        raise ValueError(f"state: {state!r}; valid: {', '.join(ADMIN_STATES)}")
    answer = send(sock_path, f"set server {backend}/{server} state {state}").strip()
    if answer:  # the runtime API answers nothing when it did it
        raise HaproxyError(f"set server {backend}/{server} state {state}: {answer}")


@dataclass(frozen=True)
class Outcome:
    before: ServerStat
    after: ServerStat
    changed: bool
    seconds: float


def drain(
    sock_path: str, backend: str, server: str, *, timeout: float, poll: float = 0.5,
    keep_one_up: bool = True, send: Sender = command,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> Outcome:  # fmt: skip
    """Stop sending new requests to the server and wait until it serves none (see the
    module's doc); :class:`HaproxyError` after ``timeout``, the server put back. With
    ``keep_one_up``, a backend with other servers none of which is UP is refused before
    anything changes: draining this one would leave the model without a server."""
    rows = [r for r in show_stat(sock_path, send) if r.backend == backend]
    before = next((r for r in rows if r.server == server), None)
    if before is None:
        raise HaproxyError(f"HAProxy has no server {backend}/{server} (show stat)")
    others = [r for r in rows if r.server != server]
    if keep_one_up and others and not any(r.up for r in others):
        states = ", ".join(f"{r.server} {r.status}" for r in others)
        raise HaproxyError(
            f"{backend}: no other server is UP ({states}): draining {server} would leave the"
            " model without a server; nothing was changed"
        )
    start = clock()
    set_state(sock_path, backend, server, "drain", send)
    now = find(sock_path, backend, server, send)
    while not now.idle:
        if clock() - start >= timeout:
            set_state(sock_path, backend, server, before.admin, send)
            raise HaproxyError(
                f"{backend}/{server}: {now.sessions} request(s) still in flight and "
                f"{now.queued} queued after {timeout:g} s of draining; put back to "
                f"{before.admin}, nothing else changed"
            )
        sleep(poll)
        now = find(sock_path, backend, server, send)
    return Outcome(before, now, before.admin != "drain", round(clock() - start, 2))


def ready(
    sock_path: str, backend: str, server: str, *, timeout: float, poll: float = 0.5,
    send: Sender = command, clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:  # fmt: skip
    """Let the server take requests again and wait until HAProxy's health check says it
    is UP; :class:`HaproxyError` after ``timeout`` (it stays ready: HAProxy sends it
    requests once its check passes)."""
    before = find(sock_path, backend, server, send)
    start = clock()
    set_state(sock_path, backend, server, "ready", send)
    now = find(sock_path, backend, server, send)
    while not now.up:
        if clock() - start >= timeout:
            raise HaproxyError(
                f"{backend}/{server}: ready, but its health check has not said UP after "
                f"{timeout:g} s (status {now.status}, last check {now.check_status} "
                f"{now.check_code} {now.last_check})"
            )
        sleep(poll)
        now = find(sock_path, backend, server, send)
    return Outcome(before, now, before.admin != "ready", round(clock() - start, 2))


def save_state(sock_path: str, path: str, send: Sender = command) -> str:
    """``show servers state`` into ``path`` (what ``load-server-state-from-file`` reads at
    the next reload: a drained server stays drained across it); the text written."""
    text = send(sock_path, "show servers state")
    if not text.lstrip().startswith("1"):  # the file format's version line
        raise HaproxyError(f"show servers state: unexpected answer {text[:120]!r}")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return text
