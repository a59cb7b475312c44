"""The PVE conf lock and atomic write shared by the conf-editing modules."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.pve.conf import (
    PveConfError,
    config_lock,
    write_conf_atomic,
)


def test_lock_waits_then_names_the_lock_file(tmp_path: Path) -> None:
    lock = tmp_path / "run/lock/lxc/pve-config-801.lock"
    with config_lock(str(tmp_path), 801, timeout=1):
        assert lock.is_file()
    with lock.open("a") as held:  # another writer (pct, the API) holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        with (
            pytest.raises(
                PveConfError, match=r"can't lock file '.*pve-config-801\.lock' - got timeout"
            ),
            config_lock(str(tmp_path), 801, timeout=0.3),
        ):
            pass
    with config_lock(str(tmp_path), 801, timeout=1):
        pass  # released by its holder: free again


def test_write_keeps_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    conf = tmp_path / "801.conf"
    conf.write_text("arch: amd64\n")
    conf.chmod(0o640)
    write_conf_atomic(str(conf), "arch: amd64\ncores: 2\n")
    assert conf.read_text() == "arch: amd64\ncores: 2\n"
    assert conf.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["801.conf"]
