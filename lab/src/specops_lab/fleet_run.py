"""Run a playbook on a lab fleet and read what it cost (the fleet benchmark and its tests).

:func:`run_playbook` runs ``ansible-playbook`` against a lab fleet's inventory
(:mod:`specops_lab.fleet`) with the lab directory's own node roots and fact cache, with
Ansible's profiling callbacks on (``ansible.posix.profile_tasks`` and
``ansible.posix.timer``), and measures its wall time, the peak RSS of the controller (the
largest process of the run: ``wait4``'s rusage over ``ansible-playbook`` and its
workers) and the PVE API stand-in's requests during the run (its request log).
:func:`recap` reads the PLAY RECAP; :func:`profile_summary` the per-task times that
``profile_tasks`` prints at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HostCounts", "PlaybookRun", "profile_summary", "recap", "run_playbook"]

REPO_ROOT = Path(__file__).resolve().parents[3]
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)"
    r"\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)
_COUNTS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
# profile_tasks' closing list: "<role : >task name ------------- 1.23s"
_PROFILE = re.compile(r"^(?P<task>\S.*?) -{3,} (?P<s>\d+\.\d+)s$", re.MULTILINE)


@dataclass(frozen=True)
class HostCounts:
    """One host's line of the PLAY RECAP."""

    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int
    rescued: int
    ignored: int

    @property
    def tasks(self) -> int:
        """Task results on this host (ok counts the changed ones)."""
        return self.ok + self.failed + self.skipped + self.unreachable


@dataclass(frozen=True)
class PlaybookRun:
    """What one ``ansible-playbook`` run did and cost."""

    argv: tuple[str, ...]
    rc: int
    wall_s: float
    peak_rss_mb: float
    cpu_s: float  # user + system of ansible-playbook and everything it ran
    main_cpu_s: float  # the ansible-playbook process alone (its strategy loop), sampled
    api_calls: int
    output: str

    @property
    def hosts(self) -> dict[str, HostCounts]:
        return recap(self.output)

    @property
    def tasks(self) -> int:
        return sum(c.tasks for c in self.hosts.values())

    @property
    def changed(self) -> int:
        return sum(c.changed for c in self.hosts.values())


def recap(output: str) -> dict[str, HostCounts]:
    """The PLAY RECAP of a run's output, by host."""
    return {m["host"]: HostCounts(*(int(m[k]) for k in _COUNTS)) for m in _RECAP.finditer(output)}


def profile_summary(output: str) -> list[tuple[str, float]]:
    """``profile_tasks``' closing list: (task, seconds), as printed (slowest first)."""
    return [(m["task"].strip(), float(m["s"])) for m in _PROFILE.finditer(output)]


def _own_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` itself (not its children), from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lines(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def run_playbook(
    lab_dir: Path,
    inventory: Path,
    playbook: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
) -> PlaybookRun:
    """``ansible-playbook -i INVENTORY PLAYBOOK ARGS`` on the fleet of ``lab_dir``."""
    venv = Path(sys.executable).parent
    secret_file = lab_dir / "secrets" / "pve-api-token-secret"
    run_env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        SPECOPS_LAB_DIR=str(lab_dir),
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(lab_dir / "facts"),
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks,ansible.posix.timer",
        PROFILE_TASKS_TASK_OUTPUT_LIMIT="8",
        PATH=f"{venv}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    if secret_file.is_file():
        run_env["PROXMOX_TOKEN_SECRET"] = secret_file.read_text().strip()
    run_env.update(env or {})
    argv = (str(venv / "ansible-playbook"), "-i", str(inventory), playbook, *args)
    requests = lab_dir / "api-requests.log"
    before = _lines(requests)
    log = lab_dir / "last-run.log"
    start = time.monotonic()
    with log.open("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=run_env, stdout=out, stderr=subprocess.STDOUT
        )
        deadline = start + timeout
        main_cpu = 0.0
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                main_cpu = _own_cpu(proc.pid) or main_cpu
                if time.monotonic() > deadline:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.05)
        except BaseException:
            proc.kill()  # this run is stopped: its playbook too
            proc.wait()
            raise
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read()
    return PlaybookRun(
        argv=argv,
        rc=proc.returncode,
        wall_s=wall,
        peak_rss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        main_cpu_s=main_cpu,
        api_calls=_lines(requests) - before,
        output=output,
    )
