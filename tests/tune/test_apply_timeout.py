"""AnsibleApplier stops a speculative-apply run that outlives its timeout (a hung SSH, a
stuck task) with every process it started, and says so; it used to wait forever."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.service_stop import alive

from specops.tune.apply import AnsibleApplier, ApplyError

pytestmark = pytest.mark.slow

MARKER = "599.0417"  # a sleep no other process of this machine runs


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", MARKER.encode()]:
                found.append(int(entry.name))
    return found


def test_a_hung_apply_is_stopped_with_its_children(tmp_path: Path) -> None:
    playbook = tmp_path / "hang.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.command: sleep {MARKER}\n"
    )
    applier = AnsibleApplier(
        "localhost,",
        "localhost",
        "http://127.0.0.1:9",
        "m",
        playbook=playbook,
        extra_vars={"ansible_python_interpreter": sys.executable},
        timeout=10,
    )
    errors: list[BaseException] = []

    def apply() -> None:
        try:
            applier.apply({"method": "none"})
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    worker = threading.Thread(target=apply)
    worker.start()
    seen: list[int] = []
    while worker.is_alive() and not seen:
        seen = _sleepers()
        time.sleep(0.05)
    worker.join(timeout=120)
    assert seen, "the hung task never started (the test proves nothing then)"
    (error,) = errors
    assert isinstance(error, ApplyError)
    assert "did not finish in 10 s; stopped it" in str(error)
    # The task's own child went with the group (a zombie until reaped is gone already).
    deadline = time.monotonic() + 30
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(seen) == []


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ApplyError, match="timeout must be > 0"):
        AnsibleApplier("localhost,", "localhost", "http://127.0.0.1:9", "m", timeout=0)
