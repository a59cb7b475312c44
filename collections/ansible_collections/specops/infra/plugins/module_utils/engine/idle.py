"""Is the inference engine idle? Running requests from its Prometheus /metrics, stdlib only.

vLLM exports ``vllm:num_requests_running`` (a gauge per engine/model), SGLang
``sglang:num_running_reqs``. :func:`running_requests` sums every sample of those;
``None`` when the text has neither (the engine exports no such gauge: the caller
cannot tell idle from busy). :func:`wait_idle` polls until zero or a deadline.
Used by the ``service_unit`` step before it stops a server (a rollout's drain).
"""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES, shared

__all__ = ["RUNNING_GAUGES", "IdleResult", "running_requests", "wait_idle"]

# Each engine's running-requests gauge (engines.ENGINES), once each, in table order.
RUNNING_GAUGES = tuple(dict.fromkeys(d.running_gauge for d in ENGINES.values() if d.running_gauge))
_METRICS: str = shared("metrics_path")


def running_requests(metrics_text: str) -> float | None:
    total: float | None = None
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in RUNNING_GAUGES:
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            total = (total or 0.0) + value
    return total


@dataclass(frozen=True)
class IdleResult:
    idle: bool
    running: float | None
    seconds: float
    polls: int
    error: str = ""


def _fetch(url: str, timeout: float) -> str:
    # Ansible's open_url: the proxy environment and TLS verification as every module has them.
    with open_url(url, timeout=timeout) as resp:
        return str(resp.read().decode("utf-8", errors="replace"))


def wait_idle(
    base_url: str,
    *,
    timeout: float,
    interval: float = 1.0,
    fetch: Callable[[str, float], str] = _fetch,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> IdleResult:
    began = clock()
    polls = 0
    running: float | None = None
    error = ""
    while True:
        polls += 1
        try:
            running = running_requests(fetch(base_url.rstrip("/") + _METRICS, 10.0))
            error = "" if running is not None else f"no running-requests gauge in {_METRICS}"
        except (OSError, urllib.error.URLError, UrlConnectionError) as exc:
            running, error = None, f"{_METRICS}: {exc}"
        if running == 0:
            return IdleResult(True, 0.0, clock() - began, polls)
        if clock() - began >= timeout:
            return IdleResult(False, running, clock() - began, polls, error)
        sleep(interval)
