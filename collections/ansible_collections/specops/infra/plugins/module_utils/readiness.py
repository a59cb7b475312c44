"""Readiness of an OpenAI-compatible inference server (vLLM or SGLang), stdlib only.

A server is *ready* when, in one probe, all three hold:

1. ``GET /health`` answers 200 (vLLM: the engine is alive; SGLang 0.5.11 also runs a
   one-token generate there);
2. ``GET /v1/models`` lists the served model name;
3. ``POST /v1/completions`` with ``max_tokens: 1`` returns a choice and
   ``usage.completion_tokens >= 1`` (a real generation through the OpenAI API).

:func:`wait_ready` probes until ready or a deadline. Runs on the managed host (the
``specops.infra.readiness_gate`` module) and on the controller (the sweep and rollout
import it as ``ansible_collections.specops.infra.plugins.module_utils.readiness``);
the standard library and Ansible's ``open_url`` (which every module carries), so nothing
needs installing in the container.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import shared

# Every engine answers the same paths (engines.ENGINES; shared() refuses once they differ).
_HEALTH: str = shared("health_path")
_MODELS: str = shared("models_path")

__all__ = [
    "STAGES",
    "Probe",
    "ReadyResult",
    "check_completion",
    "check_models",
    "journal_tail",
    "probe",
    "unit_active_state",
    "wait_ready",
]

STAGES = ("health", "models", "generation")


@dataclass(frozen=True)
class Probe:
    """One probe: ``ok`` when every stage passed, else the first failing ``stage``."""

    ok: bool
    stage: str
    detail: str
    models: list[str] = field(default_factory=list)
    text: str = ""
    completion_tokens: int = 0


@dataclass(frozen=True)
class ReadyResult:
    ready: bool
    seconds: float
    attempts: int
    last: Probe


def _request(
    url: str, *, body: dict[str, Any] | None, timeout: float, api_key: str | None
) -> tuple[int, str]:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:  # Ansible's open_url: the proxy environment and TLS verification modules honour
        with open_url(url, data=data, headers=headers, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", errors="replace")


def check_models(body: str, served_name: str) -> tuple[bool, list[str], str]:
    """Whether a ``/v1/models`` body lists ``served_name``; also the ids it lists."""
    try:
        data = json.loads(body)
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        return False, [], f"/v1/models: not an OpenAI model list ({exc}): {body[:200]}"
    if served_name not in ids:
        return False, ids, f"/v1/models lists {ids}, not {served_name!r}"
    return True, ids, "listed"


def check_completion(body: str) -> tuple[bool, str, int, str]:
    """Whether a ``/v1/completions`` body holds a generation: (ok, text, tokens, detail)."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        text = str(choice.get("text", ""))
        usage = data.get("usage") or {}
        tokens = int(usage.get("completion_tokens", 0))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return False, "", 0, f"/v1/completions: no choice in the answer ({exc}): {body[:200]}"
    if tokens < 1:
        return False, text, tokens, f"/v1/completions: usage.completion_tokens is {tokens}"
    return True, text, tokens, "generated"


class _NotReady(Exception):
    def __init__(self, stage: str, detail: str, models: list[str] | None = None) -> None:
        super().__init__(detail)
        self.stage = stage
        self.detail = detail
        self.models = models or []


def _checks(
    base: str, served_name: str, request_timeout: float, api_key: str | None, prompt: str
) -> Probe:
    status, body = _request(f"{base}{_HEALTH}", body=None, timeout=request_timeout, api_key=api_key)
    if status != 200:
        raise _NotReady("health", f"{_HEALTH} answered {status}: {body[:200]}")
    status, body = _request(f"{base}{_MODELS}", body=None, timeout=request_timeout, api_key=api_key)
    if status != 200:
        raise _NotReady("models", f"{_MODELS} answered {status}: {body[:200]}")
    ok, ids, detail = check_models(body, served_name)
    if not ok:
        raise _NotReady("models", detail, ids)
    status, body = _request(
        f"{base}/v1/completions",
        body={"model": served_name, "prompt": prompt, "max_tokens": 1, "temperature": 0},
        timeout=request_timeout,
        api_key=api_key,
    )
    if status != 200:
        raise _NotReady("generation", f"/v1/completions answered {status}: {body[:200]}", ids)
    ok, text, tokens, detail = check_completion(body)
    if not ok:
        raise _NotReady("generation", detail, ids)
    return Probe(True, "ready", detail, ids, text, tokens)


def probe(
    base_url: str,
    served_name: str,
    *,
    request_timeout: float = 10.0,
    api_key: str | None = None,
    prompt: str = "Hello",
) -> Probe:
    """Run the three checks once, in order; stop at the first that fails."""
    base = base_url.rstrip("/")
    try:
        return _checks(base, served_name, request_timeout, api_key, prompt)
    except _NotReady as exc:
        return Probe(False, exc.stage, exc.detail, exc.models)
    except (urllib.error.URLError, OSError, TimeoutError, UrlConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        return Probe(False, "health", f"{base}: cannot connect ({reason})")


def unit_active_state(unit: str) -> str:
    """``systemctl is-active`` of ``unit`` (``active``, ``activating``, ``failed``, ...)."""
    proc = subprocess.run(
        ["systemctl", "is-active", unit], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or "unknown"


def journal_tail(unit: str, lines: int = 50) -> str:
    """The last ``lines`` journal lines of ``unit`` (this boot), or why there are none."""
    proc = subprocess.run(
        ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else f"(journalctl failed: {proc.stderr.strip()})"


def wait_ready(
    base_url: str,
    served_name: str,
    *,
    timeout: float,
    interval: float = 2.0,
    request_timeout: float = 10.0,
    api_key: str | None = None,
    prompt: str = "Hello",
    unit_state: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReadyResult:
    """Probe until ready or ``timeout`` seconds pass.

    ``unit_state`` (e.g. ``lambda: unit_active_state("x.service")``) lets a dead unit
    end the wait early: ``failed`` or ``inactive`` means it will not become ready.
    """
    start = clock()
    attempts = 0
    while True:
        attempts += 1
        last = probe(
            base_url, served_name, request_timeout=request_timeout, api_key=api_key, prompt=prompt
        )
        if last.ok:
            return ReadyResult(True, clock() - start, attempts, last)
        if unit_state is not None:
            state = unit_state()
            if state in ("failed", "inactive"):
                detail = f"the unit is {state}; last probe: {last.detail}"
                return ReadyResult(
                    False, clock() - start, attempts, Probe(False, last.stage, detail)
                )
        if clock() - start + interval > timeout:
            return ReadyResult(False, clock() - start, attempts, last)
        sleep(interval)
