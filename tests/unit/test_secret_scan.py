"""The secret scanner of the deploy test (tests/plugins/secret_scan.py) on planted
secrets: a tmp tree with files in every mode and owner that matters, and processes that
carry a secret in their command line or environment. Each case where a user other than
root can read a secret must be caught, named by path and the secret's name (never its
value); each root-only case must not."""

from __future__ import annotations

import os
import secrets
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugins.lab_secrets import ALLOWED, Report
from plugins.secret_scan import (
    _CHUNK,
    CmdlineScan,
    Finding,
    ProcessWatch,
    Secret,
    _exec_events,
    _exec_pids,
    scan_stream,
    scan_tree,
)

TOKEN = Secret("PROXMOX_TOKEN_SECRET", "pve-" + secrets.token_hex(16))
KEY = Secret("api key", "key-" + secrets.token_hex(16))
SECRETS = [TOKEN, KEY]
NOBODY = 65534


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    tmp_path.chmod(0o755)  # pytest's 0700 folders would hide every file: open the way
    root.chmod(0o755)
    return root


def _plant(path: Path, text: str, mode: int, uid: int = 0, gid: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path


def _opened_to_root(path: Path) -> None:
    """Every folder above ``path`` lets any user pass (pytest's basetemp is 0700)."""
    for parent in path.parents:
        if parent == Path("/"):
            break
        if not parent.stat().st_mode & 0o001:
            parent.chmod(parent.stat().st_mode | 0o711)


def test_a_world_readable_file_with_a_secret_is_caught(tree: Path) -> None:
    leak = _plant(tree / "facts" / "pve-a", f'{{"env": "{TOKEN.value}"}}', 0o644)
    _opened_to_root(leak)
    scan = scan_tree(tree, SECRETS)
    assert scan.findings == [Finding(str(leak), TOKEN.name, "any user (mode 0644)")]
    assert TOKEN.value not in str(scan.findings[0])
    assert (scan.files, scan.read) == (1, 1)


def test_an_owner_only_root_file_is_not_a_finding_and_not_read(tree: Path) -> None:
    _plant(tree / "key", KEY.value, 0o600)
    _plant(tree / "env", f"VLLM_API_KEY={KEY.value}\n", 0o640)  # group root
    _opened_to_root(tree / "key")
    scan = scan_tree(tree, SECRETS)
    assert scan.findings == []
    assert (scan.files, scan.read) == (2, 0), "only root can read them: not opened"


def test_a_world_readable_file_behind_a_root_only_folder_is_root_s(tree: Path) -> None:
    _plant(tree / "secrets" / "token", TOKEN.value, 0o644)
    (tree / "secrets").chmod(0o700)
    _opened_to_root(tree)
    assert scan_tree(tree, SECRETS).findings == []
    (tree / "secrets").chmod(0o711)  # passable by anybody: the 0644 file is readable
    assert [f.secret for f in scan_tree(tree, SECRETS).findings] == [TOKEN.name]


def test_a_file_owned_by_another_user_is_readable_by_that_user(tree: Path) -> None:
    leak = _plant(tree / "svc" / "hf-token", KEY.value, 0o600, uid=NOBODY)
    (tree / "svc").chmod(0o700)
    os.chown(tree / "svc", NOBODY, NOBODY)
    _opened_to_root(tree)
    scan = scan_tree(tree, SECRETS)
    assert scan.findings == [Finding(str(leak), KEY.name, f"user {NOBODY} (its owner, mode 0600)")]
    # the same file and folder owned by root: root's only
    os.chown(tree / "svc", 0, 0)
    os.chown(leak, 0, 0)
    assert scan_tree(tree, SECRETS).findings == []


def test_a_group_readable_file_is_caught_unless_the_group_is_root_s(tree: Path) -> None:
    leak = _plant(tree / "unit.env", KEY.value, 0o640, gid=NOBODY)
    _opened_to_root(leak)
    assert [f.who for f in scan_tree(tree, SECRETS).findings] == [f"group {NOBODY} (mode 0640)"]
    os.chown(leak, 0, 0)
    assert scan_tree(tree, SECRETS).findings == []


def _acl_letting_read(uid: int) -> bytes:
    """A POSIX access ACL (the kernel's xattr form, as setfacl writes it): owner rw, user
    ``uid`` r, owning group none, mask r, others none."""
    entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 4, uid), (0x04, 0, 0xFFFFFFFF),
               (0x10, 4, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]  # fmt: skip
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_an_acl_that_lets_a_user_read_is_caught(tree: Path) -> None:
    leak = _plant(tree / "acl", KEY.value, 0o600)
    _opened_to_root(leak)
    assert scan_tree(tree, SECRETS).findings == []
    os.setxattr(leak, "system.posix_acl_access", _acl_letting_read(NOBODY))
    assert [f.who for f in scan_tree(tree, SECRETS).findings] == [
        "the users of its ACL (mode 0640 with an ACL)"
    ]


def test_a_secret_across_a_read_boundary_is_found(tree: Path) -> None:
    path = tree / "big.log"
    path.write_bytes(b"x" * (_CHUNK - 5) + TOKEN.needle + b"y" * 100)
    path.chmod(0o644)
    _opened_to_root(path)
    scan = scan_tree(tree, SECRETS)
    assert [f.secret for f in scan.findings] == [TOKEN.name]
    assert scan.bytes_read == _CHUNK - 5 + len(TOKEN.needle) + 100


def test_symlinks_are_not_followed_and_only_changed_files_count(tree: Path, tmp_path: Path) -> None:
    outside = _plant(tmp_path / "outside" / "token", TOKEN.value, 0o644)
    _opened_to_root(outside)
    (tree / "link").symlink_to(outside)
    (tree / "dirlink").symlink_to(outside.parent)
    assert scan_tree(tree, SECRETS).findings == []
    _plant(tree / "old", KEY.value, 0o644)
    assert scan_tree(tree, SECRETS, changed_since=time.time() + 60).files == 0
    assert scan_tree(tree, SECRETS, changed_since=time.time() - 60).files == 1


def test_skipped_folders_and_a_missing_root(tree: Path) -> None:
    _plant(tree / ".git" / "objects" / "x", TOKEN.value, 0o644)
    _opened_to_root(tree / ".git" / "objects" / "x")
    assert scan_tree(tree, SECRETS, skip=(".git",)).findings == []
    assert len(scan_tree(tree, SECRETS).findings) == 1
    assert scan_tree(tree / "absent", SECRETS).files == 0
    with pytest.raises(ValueError, match="8\\+ characters"):
        Secret("short", "abc")


def test_a_stream_holding_a_secret_is_caught() -> None:
    data = b"MESSAGE=started with --api-key " + KEY.needle + b"\n"
    found = scan_stream("journal of ct", data, SECRETS, "the journal's readers")
    assert found == [Finding("journal of ct", KEY.name, "the journal's readers")]
    assert scan_stream("journal of ct", b"nothing", SECRETS, "x") == []


def _sleeper(
    *argv: str, env: dict[str, str] | None = None, user: int | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *argv],
        env=env,
        user=user,
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait(timeout=30)


def _wait_running(pid: int) -> None:
    for _ in range(100):
        if b"time.sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        time.sleep(0.05)
    pytest.fail(f"pid {pid} never ran")


def test_a_command_line_with_a_secret_is_caught(procs: list[subprocess.Popen[bytes]]) -> None:
    with ProcessWatch(SECRETS, interval=0.05) as watch:
        procs.append(_sleeper("--token", TOKEN.value))
        _wait_running(procs[-1].pid)
        time.sleep(0.3)
    pid = procs[-1].pid
    mine = [f for f in watch.findings if f.where.startswith(f"pid {pid} ")]
    assert [(f.where.endswith(f"/proc/{pid}/cmdline"), f.secret, f.who) for f in mine] == [
        (True, TOKEN.name, "any user (/proc/<pid>/cmdline)")
    ], mine
    assert TOKEN.value not in "\n".join(map(str, watch.findings))
    assert watch.samples >= 2
    assert watch.processes > 0


def test_a_secret_in_the_environment_of_a_non_root_process_is_caught(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    env = {"PATH": os.environ["PATH"], "VLLM_API_KEY": KEY.value}
    procs.append(_sleeper("as-root", env=env))
    procs.append(_sleeper("as-nobody", env=env, user=NOBODY))
    for p in procs:
        _wait_running(p.pid)
    watch = ProcessWatch(lambda: SECRETS)
    watch.sample()
    root_pid, nobody_pid = procs[0].pid, procs[1].pid
    where = {f.where.split(" ")[1]: f for f in watch.findings}
    assert str(root_pid) not in where, "root's own environment is root's"
    assert where[str(nobody_pid)].secret == KEY.name
    assert where[str(nobody_pid)].where.endswith(f"/proc/{nobody_pid}/environ")
    assert where[str(nobody_pid)].who == f"user {NOBODY} (the process's own user)"


def test_the_deploy_scan_allows_only_the_server_unit_its_own_key() -> None:
    """The one allowance of the lab deploy's scan: the API key in the environment of the
    inference unit's processes (their own user's). The same key anywhere else fails."""
    key = "the server's API key"
    own = "user 997 (the process's own user)"
    server = "pid 7 (python, specops-tiny-qwen.service) /proc/7"
    unit = Finding(f"{server}/environ", key, own)
    elsewhere = [
        Finding("pid 8 (python, session-1.scope) /proc/8/environ", key, own),
        Finding(f"{server}/cmdline", key, "any user (/proc/<pid>/cmdline)"),
        Finding("/srv/ct/etc/specops/tiny.env", key, "any user (mode 0644)"),
        Finding(f"{server}/environ", "inference_engine_hf_token", own),
    ]
    assert [a.allows(unit) for a in ALLOWED] == [True]
    report = Report(findings=[unit, *elsewhere])
    assert report.failures == elsewhere
    assert "allowed because: the inference unit's own processes" in report.summary()


def test_the_exec_connector_names_each_exec() -> None:
    """CmdlineScan's second source: the kernel's process events (as root, as the suite
    runs): the pid of a process started now arrives as an exec event."""
    sock = _exec_events()
    assert sock is not None, "the process events connector (root) is what CmdlineScan reads"
    try:
        proc = subprocess.Popen(["sleep", "0.3"])
        seen: set[int] = set()
        deadline = time.monotonic() + 5
        while proc.pid not in seen and time.monotonic() < deadline:
            seen.update(_exec_pids(sock))
        proc.wait()
        assert proc.pid in seen
    finally:
        sock.close()


def test_a_short_lived_command_line_is_caught_at_its_exec() -> None:
    """A process that lives 30 ms, started while the /proc scan is made slow on purpose
    (one scan a second): its command line is read at its exec."""
    secret = secrets.token_hex(12)
    with CmdlineScan(secret, markers=("specops-marker",), interval=1.0) as scan:
        time.sleep(0.2)  # the scan thread is in its 1 s sleep
        subprocess.run(["sh", "-c", "sleep 0.03", "specops-marker", secret], check=True)
        time.sleep(0.3)
    assert scan.seen["specops-marker"] >= 1
    assert len(scan.hits) >= 1
    assert secret not in "".join(scan.hits)  # shown as <secret>
