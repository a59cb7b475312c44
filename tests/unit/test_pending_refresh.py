"""pending_refresh: a refresh recorded as owed on the host before its files change, cleared
after it ran (module_utils and the module through Ansible's own runner).

The role-level proof is the crash campaign's host scenario (points at the tasks between
a boot file and its handler) and the deploy chain in tests/deploy/test_deploy_lab.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pending_refresh import (
    apply,
    holds,
    owe,
    query,
    settle,
)

REPO = Path(__file__).resolve().parents[2]


def test_owed_then_settled(tmp_path: Path) -> None:
    marker = tmp_path / "var/lib/specops/pending/vfio_release-update-initramfs"
    assert not query(str(marker)).owed

    first = owe(str(marker), "modprobe files changed; update-initramfs is owed.")
    assert (first.changed, first.owed, first.was_owed) == (True, True, False)
    assert marker.read_text() == "modprobe files changed; update-initramfs is owed.\n"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o644
    assert stat.S_IMODE(marker.parent.stat().st_mode) == 0o755

    # A run lost before the handler: the next one finds it, and owing again keeps its text.
    again = owe(str(marker), "another run")
    assert (again.changed, again.owed, again.was_owed) == (False, True, True)
    assert marker.read_text().startswith("modprobe files changed")
    assert query(str(marker)).was_owed

    done = settle(str(marker))
    assert (done.changed, done.owed, done.was_owed) == (True, False, True)
    assert not marker.exists()
    assert settle(str(marker)).changed is False


def test_check_mode_writes_and_removes_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pending" / "x"
    out = owe(str(marker), "why", check_mode=True)
    assert (out.changed, out.owed) == (True, True)
    assert not marker.parent.exists()
    marker.parent.mkdir()
    marker.write_text("left by a lost run\n")
    out = settle(str(marker), check_mode=True)
    assert (out.changed, out.owed, out.was_owed) == (True, False, True)
    assert marker.exists()


def test_owed_only_when_a_named_file_is_about_to_change(tmp_path: Path) -> None:
    """A role that does not know whether its files change names them with their text."""
    marker = str(tmp_path / "pending" / "nvidia_driver-update-initramfs")
    conf = tmp_path / "blacklist-nouveau.conf"
    unit = tmp_path / "nvidia-device-nodes.service"
    want = {str(conf): "blacklist nouveau\n", str(unit): "[Unit]\n"}
    assert not holds(want)  # neither file is there

    out = apply(marker, "owed", "r", files=want)
    assert (out.changed, out.owed) == (True, True)  # a missing file: owed
    settle(marker)

    conf.write_text("blacklist nouveau\n")
    unit.write_text("[Unit]\r\n")  # other text (line ends count)
    assert not holds(want)
    assert apply(marker, "owed", "r", files=want).owed
    settle(marker)

    unit.write_text("[Unit]\n")
    assert holds(want)
    out = apply(marker, "owed", "r", files=want)
    assert (out.changed, out.owed) == (False, False)  # nothing will change: nothing owed
    assert not Path(marker).exists()

    # ... but a marker an earlier run left is still found: the refresh is done then.
    owe(marker, "left by a lost run")
    out = apply(marker, "owed", "r", files=want)
    assert (out.changed, out.owed, out.was_owed) == (False, True, True)


@pytest.mark.parametrize(
    ("path", "state", "reason", "words"),
    [
        ("relative/marker", "query", "", "absolute paths are needed, not 'relative/marker'"),
        ("/m", "owed", "  ", "reason:"),
        ("/m", "maybe", "", "state: one of owed, query, settled"),
    ],
)
def test_bad_input_is_named(path: str, state: str, reason: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        apply(path, state, reason)


def test_a_relative_file_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute paths are needed, not 'etc/x'"):
        apply("/m", "owed", "r", files={"etc/x": "text"})


def _module(args: dict[str, object], *, check: bool = False) -> dict[str, object]:
    """The module run as Ansible runs it (its JSON arguments on stdin)."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    env = {**os.environ, "PYTHONPATH": str(REPO / "collections")}
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_collections.specops.infra.plugins.modules.pending_refresh"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def test_the_module_owes_reads_and_settles(tmp_path: Path) -> None:
    marker = str(tmp_path / "pending" / "nvidia_driver-update-initramfs")
    assert _module({"path": marker, "state": "owed", "reason": "r"}, check=True)["changed"] is True
    assert not Path(marker).exists()
    out = _module({"path": marker, "state": "owed", "reason": "r"})
    assert (out["changed"], out["owed"], out["was_owed"]) == (True, True, False)
    out = _module({"path": marker})
    assert (out["changed"], out["owed"], out["was_owed"]) == (False, True, True)
    out = _module({"path": marker, "state": "settled"})
    assert (out["changed"], out["owed"]) == (True, False)
    assert not Path(marker).exists()
    conf = tmp_path / "blacklist-nouveau.conf"
    conf.write_text("blacklist nouveau\n")
    same = {"path": marker, "state": "owed", "reason": "r", "files": {str(conf): conf.read_text()}}
    assert _module(same)["owed"] is False
    assert _module({**same, "files": {str(conf): "other"}})["owed"] is True
    assert _module({"path": marker, "state": "settled"})["changed"] is True
    failed = _module({"path": marker, "state": "owed"})
    assert failed.get("failed") is True
    assert "reason:" in str(failed["msg"])
