"""The service_unit step's pieces that need no systemd: identity, atomic write, requires.

The step itself (write, graceful stop, start, readiness, restore) runs against real
systemd and the real vLLM CPU server in ``molecule/inference`` and in the fleet tests
(``tests/tune/test_real_rollout.py``: a start the engine refuses is restored).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.service_unit import (
    UNIT_MODE,
    Readiness,
    apply_unit,
    parse_identity,
    render_environment_file,
    secret_like_keys,
    started_before_written,
)

SHOW = """LoadState=loaded
ActiveState=active
UnitFileState=enabled
InvocationID=5f0c3c1e8a3b4c0e9d7f6a5b4c3d2e1f
MainPID=4242
ExecMainStartTimestamp=Sun 2026-11-29 15:40:01 UTC
ExecMainStartTimestampMonotonic=1000000000
ActiveEnterTimestampMonotonic=1034520000
"""


def test_identity_from_systemctl_show() -> None:
    ident = parse_identity(SHOW)
    assert ident.running
    assert ident.main_pid == 4242
    assert ident.invocation_id == "5f0c3c1e8a3b4c0e9d7f6a5b4c3d2e1f"
    assert ident.start_to_healthy() == 34.52


def test_identity_of_a_unit_that_never_ran() -> None:
    ident = parse_identity(
        "LoadState=not-found\nActiveState=inactive\nInvocationID=\nMainPID=0\n"
        "ExecMainStartTimestampMonotonic=0\nActiveEnterTimestampMonotonic=0\n"
    )
    assert not ident.running
    assert ident.main_pid == 0
    assert ident.invocation_id == ""
    assert ident.start_to_healthy() is None


def test_a_server_started_before_its_unit_was_written_is_stale(tmp_path: Path) -> None:
    """The unit's mtime (wall clock) against systemd's monotonic start stamp."""
    unit, env = tmp_path / "x.service", tmp_path / "x.env"
    unit.write_text("u\n")
    env.write_text("K=v\n")
    ident = parse_identity(SHOW)  # started at monotonic 1000 s
    written = unit.stat().st_mtime
    os.utime(env, (written - 600, written - 600))

    # the files written 600 s (env) and 0 s (unit) before "now"; "now" on the monotonic
    # clock is 1000 s + `after`, so the server started `after` s before now
    def stale(after: float, paths: list[str]) -> bool:
        return started_before_written(ident, paths, real_now=written, mono_now=1000 + after)

    assert stale(300, [str(unit)])  # the unit written 300 s after the start
    assert not stale(300, [str(env)])  # the environment file 300 s before it
    assert stale(300, [str(env), str(unit)])
    assert not stale(1.5, [str(unit)])  # within the margin of the two clocks
    assert not stale(300, [str(tmp_path / "absent")])
    never = parse_identity("ActiveState=inactive\nExecMainStartTimestampMonotonic=0\n")
    assert not started_before_written(never, [str(unit)], real_now=written, mono_now=2000)


def test_a_started_change_outlives_the_controllers_hangup() -> None:
    """A process that called outlive_hangup survives the SIGHUP a lost SSH session sends;
    the same process without it dies of it (the default)."""
    code = (
        "import os, signal, sys\n"
        "from ansible_collections.specops.infra.plugins.module_utils import service_unit\n"
        # the default an SSH session's process has (a run under nohup inherits SIG_IGN)
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
        "if sys.argv[1] == 'hold':\n    service_unit.outlive_hangup()\n"
        "os.kill(os.getpid(), signal.SIGHUP)\nprint('finished')\n"
    )
    held = subprocess.run(
        [sys.executable, "-c", code, "hold"], capture_output=True, text=True, check=False
    )
    assert (held.returncode, held.stdout) == (0, "finished\n"), held.stderr
    plain = subprocess.run(
        [sys.executable, "-c", code, "plain"], capture_output=True, text=True, check=False
    )
    assert plain.returncode == -signal.SIGHUP


def test_write_atomic_replaces_with_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "x.service"
    path.write_text("old\n")
    os.chmod(path, 0o600)
    write_atomic(str(path), "new\n", UNIT_MODE)
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    write_atomic(str(path), "newer\n")  # no mode: the file keeps its own
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["x.service"]


def test_missing_requirement_fails_before_anything_changes(tmp_path: Path) -> None:
    path = tmp_path / "x.service"
    path.write_text("old\n")
    venv = tmp_path / "venv" / "bin" / "python"
    with pytest.raises(RuntimeError, match=rf"{venv} does not exist: run inference_engine"):
        apply_unit(
            "x.service", str(path), "new\n",
            Readiness(url="http://127.0.0.1:9", served_model_name="m", timeout=1),
            requires={str(venv): "run inference_engine first"},
        )  # fmt: skip
    assert path.read_text() == "old\n"
    assert not (tmp_path / "x.service.previous").exists()


def test_a_secret_in_the_unit_text_is_refused_before_anything_changes(tmp_path: Path) -> None:
    path = tmp_path / "x.service"
    path.write_text("old\n")
    unit = '[Service]\nEnvironment=TOKENIZERS_PARALLELISM=false\nEnvironment="HF_TOKEN=abc"\n'
    with pytest.raises(RuntimeError, match=r"sets HF_TOKEN with Environment=.*secret_environment"):
        apply_unit(
            "x.service", str(path), unit,
            Readiness(url="http://127.0.0.1:9", served_model_name="m", timeout=1),
        )  # fmt: skip
    assert path.read_text() == "old\n"
    assert secret_like_keys(unit) == ["HF_TOKEN"]
    names = "VLLM_API_KEY AWS_SECRET_ACCESS_KEY DB_PASSWORD MY_APIKEY GH_TOKEN_FILE"
    assert secret_like_keys("".join(f"Environment={n}=1\n" for n in names.split())) == sorted(
        names.split()
    )
    harmless = "TOKENIZERS_PARALLELISM MAX_NUM_BATCHED_TOKENS KEYBOARD HF_HUB_OFFLINE"
    assert secret_like_keys("".join(f"Environment={n}=1\n" for n in harmless.split())) == []


def test_environment_file_is_read_literally_by_systemd_rules() -> None:
    """systemd's EnvironmentFile=: single quotes keep everything ($, \\, spaces) as is;
    a value with a single quote is double-quoted with \\ " $ ` escaped."""
    text = render_environment_file({"B": 'it\'s "x" \\ $HOME', "A": "a$b c%d"})
    assert text == 'A=\'a$b c%d\'\nB="it\'s \\"x\\" \\\\ \\$HOME"\n'
    with pytest.raises(ValueError, match=r"secret_environment.K: the value holds a line break"):
        render_environment_file({"K": "a\nb"})
    with pytest.raises(ValueError, match=r"'1BAD' is not an environment variable name"):
        render_environment_file({"1BAD": "x"})
