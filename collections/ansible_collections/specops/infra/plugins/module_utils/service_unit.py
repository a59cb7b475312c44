"""Put a unit file in place and make its service run it, ready, in one step.

:func:`apply_unit` is what the ``specops.infra.service_unit`` module runs on the serving
host: compare the unit file with the wanted text; when it differs keep the old text
beside it (``<unit>.previous``) and write the new one atomically; reload systemd; stop
the old server gracefully (:func:`service_stop.stop_unit`: its processes and GPU memory
gone); start; wait until the server is ready (:func:`readiness.wait_ready`: health, model
list, one generated token); prove a new process runs (a new ``InvocationID`` and
``MainPID``); with an output gate (:class:`output_gate.NodeGate`), prove its greedy
output is the model's own (the reference) and does not loop. When the new unit never
gets ready or fails the gate, the previous text goes back and the previous server is
started and proven ready again, so a failed change leaves the host as it was.

One call is one round trip from the controller: the rollout, the sweep's applier and
the ``inference_service`` role all change a server through it. Stdlib only (it runs in
the container); systemctl is the only tool it calls.

Secrets (an API key, a hub token) never go into the unit: systemd hands every
``Environment=`` of a unit to any local user over D-Bus (``systemctl show -p
Environment``) whatever the file's mode, and the unit text is returned to the
controller. They go into a root-only ``EnvironmentFile=`` (:class:`SecretEnvironment`,
0600, written and restored with the unit); a unit text with a secret-looking
``Environment=`` key (:func:`secret_like_keys`) is refused before anything changes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from ansible_collections.specops.infra.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.specops.infra.plugins.module_utils.engine.idle import wait_idle
from ansible_collections.specops.infra.plugins.module_utils.output_gate import NodeGate
from ansible_collections.specops.infra.plugins.module_utils.readiness import (
    ReadyResult,
    journal_tail,
    probe,
    unit_active_state,
    wait_ready,
)
from ansible_collections.specops.infra.plugins.module_utils.service_stop import stop_unit

__all__ = [
    "SHOW_PROPERTIES",
    "ApplyResult",
    "Identity",
    "Readiness",
    "SecretEnvironment",
    "UnitChangeError",
    "apply_unit",
    "outlive_hangup",
    "parse_identity",
    "read_identity",
    "render_environment_file",
    "secret_like_keys",
    "started_before_written",
]

SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "UnitFileState",
    "InvocationID",
    "MainPID",
    "ExecMainStartTimestamp",
    "ExecMainStartTimestampMonotonic",
    "ActiveEnterTimestampMonotonic",
)
_RUNNING = ("active", "activating", "reloading")
UNIT_MODE = 0o644  # the unit holds no secret (see the module docstring)
SECRET_MODE = 0o600
# Environment names that hold secrets (a whole _-separated word: HF_TOKEN, VLLM_API_KEY,
# AWS_SECRET_ACCESS_KEY; not TOKENIZERS_PARALLELISM); they belong in the 0600 file.
SECRET_KEY = re.compile(
    r"(?:^|_)(?:TOKEN|SECRETS?|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY"
    r"|(?:API|ACCESS|PRIVATE)_KEY)(?:_|$)",
    re.I,
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_LINE = re.compile(r'^\s*Environment\s*=\s*"?([A-Za-z_][A-Za-z0-9_]*)=', re.M)


def secret_like_keys(unit_text: str) -> list[str]:
    """``Environment=`` keys of a unit text that look like secrets (``HF_TOKEN``, ...)."""
    return sorted({k for k in _ENV_LINE.findall(unit_text) if SECRET_KEY.search(k)})


def render_environment_file(values: Mapping[str, str]) -> str:
    """``KEY='value'`` lines systemd's ``EnvironmentFile=`` reads literally (single quotes:
    no escapes, no ``$`` expansion; a value with ``'`` is double-quoted with ``\\``,
    ``"``, ``$`` and backquote escaped). ValueError names a bad key or value."""
    lines = []
    for key in sorted(values):
        value = str(values[key])
        if not _ENV_NAME.match(key):
            raise ValueError(f"secret_environment: {key!r} is not an environment variable name")
        if any(c in value for c in "\n\r\0"):
            raise ValueError(f"secret_environment.{key}: the value holds a line break or NUL")
        if "'" not in value:
            lines.append(f"{key}='{value}'")
        else:
            escaped = re.sub(r'(["\\$`])', r"\\\1", value)
            lines.append(f'{key}="{escaped}"')
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class SecretEnvironment:
    """The unit's ``EnvironmentFile=``: ``content`` None removes the file."""

    path: str
    content: str | None


@dataclass(frozen=True)
class Identity:
    """Which process serves, from ``systemctl show`` (empty strings / 0 when none)."""

    load_state: str
    active_state: str
    unit_file_state: str
    invocation_id: str
    main_pid: int
    exec_main_start: str
    exec_main_start_monotonic: int
    active_enter_monotonic: int

    @property
    def running(self) -> bool:
        return self.active_state in _RUNNING

    def start_to_healthy(self) -> float | None:
        """Seconds from the main process's start to ``active`` (the unit's /health wait)."""
        if self.active_enter_monotonic > self.exec_main_start_monotonic > 0:
            return round((self.active_enter_monotonic - self.exec_main_start_monotonic) / 1e6, 2)
        return None


@dataclass(frozen=True)
class Readiness:
    url: str
    served_model_name: str
    timeout: float
    interval: float = 2.0
    request_timeout: float = 30.0
    api_key: str | None = None


@dataclass
class ApplyResult:
    changed: bool
    restarted: bool
    written: bool
    before: Identity
    after: Identity
    stop_seconds: float = 0.0
    ready_seconds: float = 0.0
    previous_path: str | None = None
    restored: bool = False
    ready: bool = False
    text_before: str = ""
    stale: bool = False  # the running server started before its unit was last written
    missing: list[str] = field(default_factory=list)
    secrets_changed: bool = False  # the EnvironmentFile's content (never returned)
    output_gate: dict[str, object] | None = None

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["start_to_healthy_seconds"] = self.after.start_to_healthy() if self.restarted else None
        return out


class UnitChangeError(RuntimeError):
    """The new unit did not get ready; ``result`` says whether the previous one came back."""

    def __init__(self, message: str, result: ApplyResult, journal: str = "") -> None:
        super().__init__(message)
        self.result = result
        self.journal = journal


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def parse_identity(text: str) -> Identity:
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def num(key: str) -> int:
        raw = values.get(key, "").strip()
        return int(raw) if raw.isdigit() else 0

    return Identity(
        load_state=values.get("LoadState", "").strip(),
        active_state=values.get("ActiveState", "").strip(),
        unit_file_state=values.get("UnitFileState", "").strip(),
        invocation_id=values.get("InvocationID", "").strip(),
        main_pid=num("MainPID"),
        exec_main_start=values.get("ExecMainStartTimestamp", "").strip(),
        exec_main_start_monotonic=num("ExecMainStartTimestampMonotonic"),
        active_enter_monotonic=num("ActiveEnterTimestampMonotonic"),
    )


def read_identity(unit: str, run: Runner = _run) -> Identity:
    argv = ["systemctl", "show", unit]
    for prop in SHOW_PROPERTIES:
        argv += ["-p", prop]
    return parse_identity(run(argv).stdout)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _put_secrets(secrets: SecretEnvironment | None) -> None:
    """Write (0600, root) or remove the EnvironmentFile; None does nothing."""
    if secrets is None:
        return
    if secrets.content is None:
        if os.path.exists(secrets.path):
            os.unlink(secrets.path)
        return
    os.makedirs(os.path.dirname(secrets.path) or ".", mode=0o700, exist_ok=True)
    write_atomic(secrets.path, secrets.content, SECRET_MODE)


def outlive_hangup() -> None:
    """Let a change started on the node finish when the controller's connection drops.

    An SSH session with a terminal hangs up its processes when the controller is lost
    (a laptop lid, a dropped link): a step stopped between writing the unit and the
    restart would leave the old server under the new text. Ignoring SIGHUP lets the
    step run to its end on the node (write, restart, gates, restore on failure); the
    next run reads the outcome. (A SIGKILL of the step itself still can stop it there:
    :func:`started_before_written` finds that on the next run.)
    """
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


# Seconds a file's write may follow its server's start before the server counts as
# started from an earlier text: clock slew between systemd's stamp and the file's.
STALE_MARGIN_S = 2.0


def started_before_written(
    ident: Identity, paths: list[str], *, real_now: float, mono_now: float
) -> bool:
    """Whether the running server started before one of ``paths`` was last written.

    A run stopped between writing the unit (or its environment file) and restarting
    the server leaves a process that runs what an earlier text said, under a file
    that says otherwise; the next run finds the text unchanged. The file's mtime
    (wall clock) is put on the monotonic clock systemd stamps the start with
    (``ExecMainStartTimestampMonotonic``) through the offset between the two clocks now.
    """
    if not ident.running or ident.exec_main_start_monotonic <= 0:
        return False
    started = ident.exec_main_start_monotonic / 1e6
    for path in paths:
        try:
            written = os.stat(path).st_mtime
        except FileNotFoundError:
            continue
        if mono_now - (real_now - written) > started + STALE_MARGIN_S:
            return True
    return False


def _refusals(content: str, requires: Mapping[str, str] | None, check_mode: bool) -> list[str]:
    """RuntimeError (nothing changed) for a secret in the unit text or, outside check
    mode, a missing required path; the missing paths otherwise."""
    leaked = secret_like_keys(content)
    if leaked:
        raise RuntimeError(
            f"the unit text sets {', '.join(leaked)} with Environment=, which every local user "
            "can read (systemctl show): pass secrets as secret_environment (a 0600 "
            "EnvironmentFile) instead; nothing was changed"
        )
    missing = [f"{needed} does not exist: {hint}" for needed, hint in (requires or {}).items()
               if not os.path.exists(needed)]  # fmt: skip
    if missing and not check_mode:
        raise RuntimeError("; ".join(missing))
    return missing


def _systemctl(run: Runner, *args: str) -> None:
    proc = run(["systemctl", *args])
    if proc.returncode != 0:
        raise RuntimeError(
            f"systemctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
        )


def _ready(unit: str, readiness: Readiness) -> ReadyResult:
    return wait_ready(
        readiness.url,
        readiness.served_model_name,
        timeout=readiness.timeout,
        interval=readiness.interval,
        request_timeout=readiness.request_timeout,
        api_key=readiness.api_key,
        unit_state=lambda: unit_active_state(unit),
    )


def _restart(
    unit: str, running: bool, stop_timeout: float, nvidia_smi: str | None, run: Runner
) -> tuple[float, str]:
    """Graceful stop (when running), start; the start's error text ('' when it started)."""
    stop_seconds = (
        stop_unit(unit, timeout=stop_timeout, nvidia_smi=nvidia_smi).seconds if running else 0.0
    )
    proc = run(["systemctl", "start", unit])
    error = "" if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")
    return stop_seconds, error


def _drain(url: str, timeout: float) -> None:
    """Wait until the engine runs no requests (RuntimeError past ``timeout``)."""
    first = wait_idle(url, timeout=0)
    if first.idle or first.running is None:
        return
    idle = wait_idle(url, timeout=timeout, interval=0.25)
    if not idle.idle:
        raise RuntimeError(
            f"{url}: {idle.running:g} request(s) still running after {timeout:g} s of"
            " draining; nothing was changed"
        )


def apply_unit(
    unit: str,
    path: str,
    content: str,
    readiness: Readiness,
    *,
    enabled: bool = True,
    restart: bool = False,
    restore_on_failure: bool = True,
    stop_timeout: float = 300.0,
    nvidia_smi: str | None = None,
    requires: Mapping[str, str] | None = None,
    drain_timeout: float = 0.0,
    check_mode: bool = False,
    secrets: SecretEnvironment | None = None,
    gate: NodeGate | None = None,
    run: Runner = _run,
) -> ApplyResult:
    """Make ``unit`` run from ``content`` and answer; see the module docstring.

    Restarts only when the text changed, the service is not running, it started before
    its unit was last written (:func:`started_before_written`), or ``restart`` asks for
    it. ``requires`` maps paths the unit needs (its interpreter, ...) to what
    to do when one is missing: RuntimeError before anything changes (not in check mode,
    where a new host may not have them yet). ``drain_timeout`` > 0: before a running
    server is touched, wait until its /metrics reports no running requests (RuntimeError,
    nothing changed, when they outlive it; an engine without the gauge, or one that does
    not answer, has nothing to wait for). Raises :class:`UnitChangeError` when the
    server does not get ready or fails ``gate`` (after restoring the previous unit when
    there was one and ``restore_on_failure``; a new unit without a previous one that
    fails the gate is stopped: it answers wrongly). ``secrets``: the unit's 0600
    ``EnvironmentFile=`` (None leaves it alone); a change of it restarts like a unit
    change, and a restore puts its previous content back too. ``gate`` runs after every
    start (and may record a reference before the old server stops); see
    :mod:`output_gate`.
    """
    missing = _refusals(content, requires, check_mode)
    current = _read(path)
    secrets_before = _read(secrets.path) if secrets else None
    secrets_changed = secrets is not None and secrets_before != secrets.content
    before = read_identity(unit, run)
    written = current != content or secrets_changed
    stale = not written and started_before_written(
        before, [path] + ([secrets.path] if secrets else []),
        real_now=time.time(), mono_now=time.monotonic(),
    )  # fmt: skip
    must_start = written or restart or stale or not before.running
    must_enable = enabled and before.unit_file_state != "enabled"
    previous_path = f"{path}.previous" if written and current is not None else None
    if check_mode:
        # Read-only: one probe says whether the server answers now.
        answers = before.running and probe(
            readiness.url, readiness.served_model_name,
            request_timeout=readiness.request_timeout, api_key=readiness.api_key,
        ).ok  # fmt: skip
        return ApplyResult(
            changed=must_start or must_enable, restarted=must_start, written=written,
            before=before, after=before, previous_path=previous_path, ready=answers,
            text_before=current or "", missing=missing, secrets_changed=secrets_changed,
            stale=stale,
        )  # fmt: skip
    if must_start and before.running:
        _before_stop(readiness.url, drain_timeout, gate)
    if written:
        if previous_path is not None and current is not None:
            write_atomic(previous_path, current, UNIT_MODE)
        _put_secrets(secrets if secrets_changed else None)
        write_atomic(path, content, UNIT_MODE)
        _systemctl(run, "daemon-reload")
    if must_enable:
        _systemctl(run, "enable", unit)
    stop_seconds, start_error = 0.0, ""
    if must_start:
        stop_seconds, start_error = _restart(unit, before.running, stop_timeout, nvidia_smi, run)
    ready = _ready(unit, readiness) if not start_error else None
    after = read_identity(unit, run)
    result = ApplyResult(
        changed=must_start or must_enable, restarted=must_start, written=written,
        before=before, after=after, stop_seconds=round(stop_seconds, 2),
        ready_seconds=round(ready.seconds, 2) if ready else 0.0, previous_path=previous_path,
        ready=ready is not None and ready.ready, text_before=current or "",
        secrets_changed=secrets_changed, stale=stale,
    )  # fmt: skip
    gate_failed = ""
    if ready is not None and ready.ready:
        if must_start and before.invocation_id and after.invocation_id == before.invocation_id:
            raise UnitChangeError(
                f"{unit} answered but did not restart into a new process"
                f" (InvocationID {after.invocation_id} before and after)",
                result,
            )
        gate_failed = _gate(gate, result, must_start)
        if not gate_failed:
            return result
    why = gate_failed or (
        f"systemctl start {unit} failed: {start_error}"
        if start_error
        else f"{readiness.url} ({readiness.served_model_name}) not ready after"
        f" {ready.seconds if ready else 0:.0f} s: {ready.last.stage if ready else ''}:"
        f" {ready.last.detail if ready else ''}"
    )
    journal = journal_tail(unit)
    if not (restore_on_failure and written and current is not None):
        if gate_failed:
            why += _stop_wrong(unit, result, stop_timeout, nvidia_smi, run)
        raise UnitChangeError(why, result, journal)
    previous_secrets = (
        SecretEnvironment(secrets.path, secrets_before)
        if secrets_changed and secrets is not None
        else None
    )
    why += _put_back(
        unit, path, current, readiness, result, secrets=previous_secrets,
        stop_timeout=stop_timeout, nvidia_smi=nvidia_smi, run=run,
    )  # fmt: skip
    raise UnitChangeError(why, result, journal)


def _put_back(
    unit: str, path: str, current: str, readiness: Readiness, result: ApplyResult, *,
    secrets: SecretEnvironment | None, stop_timeout: float, nvidia_smi: str | None,
    run: Runner,
) -> str:  # fmt: skip
    """Restore the previous unit text (and secrets file), restart, prove it ready; the note."""
    write_atomic(path, current, UNIT_MODE)
    if secrets is not None:
        _put_secrets(secrets)
    _systemctl(run, "daemon-reload")
    _restarted, restart_error = _restart(unit, True, stop_timeout, nvidia_smi, run)
    back = _ready(unit, readiness) if not restart_error else None
    result.after = read_identity(unit, run)
    result.restored = back is not None and back.ready
    result.ready = result.restored
    if result.restored and back is not None:
        return (
            f"; the previous unit is back and {unit} answers again (ready in {back.seconds:.0f} s)"
        )
    return f"; restoring the previous unit failed too ({restart_error or 'not ready'})"


def _before_stop(url: str, drain_timeout: float, gate: NodeGate | None) -> None:
    """Before a running server is stopped: drain it, and let the gate read its output."""
    if drain_timeout > 0:
        _drain(url, drain_timeout)
    if gate is not None:
        gate.before_change()


def _stop_wrong(
    unit: str, result: ApplyResult, stop_timeout: float, nvidia_smi: str | None, run: Runner
) -> str:
    """Stop a first unit that failed the output gate (it answers wrongly); the note."""
    stop_unit(unit, timeout=stop_timeout, nvidia_smi=nvidia_smi)
    result.after = read_identity(unit, run)
    result.ready = False
    return f"; {unit} was stopped (it has no previous unit to go back to)"


def _gate(gate: NodeGate | None, result: ApplyResult, started: bool) -> str:
    """Run the output gate on a ready server; '' when it passed (or there is none)."""
    if gate is None:
        return ""
    if not started:
        recorded = gate.record_running()
        if recorded:
            result.changed = True
            result.output_gate = {
                "ok": True, "check": None, "recorded": recorded,
                "message": "reference recorded from the running server",
            }  # fmt: skip
        return ""
    verdict = gate.after_ready()
    result.output_gate = {
        **verdict.as_dict(), "recorded": gate.recorded, "seconds": round(gate.seconds, 2)
    }  # fmt: skip
    if verdict.ok:
        return ""
    result.ready = False
    return f"output gate ({verdict.check}): {verdict.message}"
