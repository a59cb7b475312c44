"""The one interface that puts a profile on the canary and restarts it.

:class:`Applier` is what the sweep calls; it returns an :class:`ApplyOutcome` with the
service's identity before and after (systemd ``InvocationID`` and ``MainPID``), so the
caller can prove the old process is gone. :func:`prove_restart` is that check plus a
real generation from the controller.

- :class:`AnsibleApplier` runs the installed collection's
  ``specops.infra.speculative_apply`` for one inventory host (the ``inference_service``
  role with the candidate profile: translator, then one ``service_unit`` step: unit,
  restart, readiness gate) and reads the identities that step returned. It runs in the
  working directory with the operator's environment (their ``ansible.cfg``, as
  :mod:`specops.playbooks` says). A run past its ``timeout`` (a hung SSH, a stuck task)
  is stopped with its whole process group and raises :class:`ApplyError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from ansible_collections.specops.infra.plugins.module_utils.readiness import wait_ready

# One home for a service's identity: the module_utils the serving host runs.
from ansible_collections.specops.infra.plugins.module_utils.service_unit import Identity

from specops.errors import SpecopsError
from specops.playbooks import ansible_tool

__all__ = [
    "PLAYBOOK",
    "AnsibleApplier",
    "Applier",
    "ApplyError",
    "ApplyOutcome",
    "generates",
    "prove_restart",
]

PLAYBOOK = "specops.infra.speculative_apply"


class ApplyError(SpecopsError):
    """The profile could not be applied or the server did not become ready."""


@dataclass(frozen=True)
class ApplyOutcome:
    restarted: bool
    before: Identity | None
    after: Identity
    seconds: float  # wall time of the apply step
    roofline: dict[str, Any] | None = None  # the host's roofline inputs (bench plan section)

    def to_dict(self) -> dict[str, Any]:
        return {
            "restarted": self.restarted,
            "before": asdict(self.before) if self.before else None,
            "after": asdict(self.after),
            "seconds": round(self.seconds, 2),
            "start_to_healthy_s": self.after.start_to_healthy(),
        }


class Applier(Protocol):
    base_url: str
    served_model_name: str

    def apply(self, profile: Mapping[str, Any]) -> ApplyOutcome:
        """Make ``profile`` the running one (restart only if it changed); raise ApplyError."""
        ...


def generates(base_url: str, served: str, timeout: float = 60, api_key: str | None = None) -> None:
    """The server answers /health, lists ``served`` and generates one token (or ApplyError)."""
    ready = wait_ready(base_url, served, timeout=timeout, interval=1.0, api_key=api_key)
    if not ready.ready:
        raise ApplyError(f"{base_url}: not ready: {ready.last.stage}: {ready.last.detail}")


def prove_restart(
    outcome: ApplyOutcome,
    base_url: str,
    served: str,
    ready: Callable[[str, str], None] = generates,
) -> None:
    """No races: a restart must show a new process, and the new one must generate."""
    after = outcome.after
    if after.active_state != "active" or not after.invocation_id:
        raise ApplyError(f"service is {after.active_state or 'unknown'} after the apply")
    if outcome.restarted and outcome.before is not None:
        if after.invocation_id == outcome.before.invocation_id:
            raise ApplyError("restart reported but the InvocationID did not change")
        if after.main_pid == outcome.before.main_pid:
            raise ApplyError(f"restart reported but MainPID is still {after.main_pid}")
    ready(base_url, served)


class AnsibleApplier:
    """Apply through Ansible: ``specops.infra.speculative_apply`` (or ``playbook``, a name
    or a file) limited to ``host``."""

    def __init__(
        self,
        inventory: str | Path,
        host: str,
        base_url: str,
        served_model_name: str,
        *,
        playbook: str | Path = PLAYBOOK,
        extra_vars: Mapping[str, Any] | None = None,
        log: Path | None = None,
        timeout: float = 1800.0,
    ) -> None:
        if timeout <= 0:
            raise ApplyError(f"AnsibleApplier timeout must be > 0 s (got {timeout})")
        self.inventory = str(inventory)
        self.host = host
        self.base_url = base_url
        self.served_model_name = served_model_name
        self.playbook = str(playbook)
        self.extra_vars = dict(extra_vars or {})
        self.log = log
        self.timeout = timeout

    def _command(self, vars_file: Path) -> list[str]:
        return [
            ansible_tool("ansible-playbook"),
            "-i", self.inventory, "-l", self.host, self.playbook, "-e", f"@{vars_file}",
        ]  # fmt: skip

    def _run(self, argv: list[str], env: dict[str, str]) -> tuple[int | None, str]:
        """(exit status, output); status None when it ran past the timeout and was
        stopped, its whole process group (ssh and module children too) with it."""
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            return None, out
        return proc.returncode, out

    def apply(self, profile: Mapping[str, Any]) -> ApplyOutcome:
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="specops-apply-") as tmp:
            report = Path(tmp) / "report.json"
            vars_file = Path(tmp) / "vars.json"
            vars_file.write_text(
                json.dumps(
                    {
                        **self.extra_vars,
                        "inference_service_speculative": dict(profile),
                        "speculative_apply_report": str(report),
                    }
                ),
                encoding="utf-8",
            )
            rc, out = self._run(self._command(vars_file), dict(os.environ))
            if self.log:
                with self.log.open("a", encoding="utf-8") as fh:
                    fh.write(out)
            if rc is None:
                tail = "\n".join(out.strip().splitlines()[-25:])
                raise ApplyError(
                    f"speculative-apply on {self.host} did not finish in {self.timeout:g} s;"
                    f" stopped it (and every process it started):\n{tail}"
                )
            data = json.loads(report.read_text(encoding="utf-8")) if report.exists() else None
        if rc != 0 or data is None:
            tail = "\n".join(out.strip().splitlines()[-25:])
            raise ApplyError(f"speculative-apply on {self.host} failed (rc {rc}):\n{tail}")
        result = data["result"]
        before = Identity(**result["before"]) if result["before"]["invocation_id"] else None
        after = Identity(**result["after"])
        return ApplyOutcome(
            bool(result["restarted"]), before, after, time.monotonic() - began,
            data.get("roofline"),
        )  # fmt: skip
