"""The server's view of a cell: its queue, running requests, KV-cache usage and
preemptions from its own metrics, and the GPUs' power and utilisation.

Nothing here sends a generation. The names come from the engine descriptor
(``engines.ENGINES[...].server_metrics``: vLLM's and SGLang's spellings); an engine the
bench does not know is read with every engine's names. During a cell's measured phase a
sampler reads the server's ``/metrics`` every ``Plan.sample_interval_s`` seconds (and
``nvidia-smi`` when it is on this machine's PATH: the GPUs the controller can reach,
which are the server's only when the controller runs on its node) and keeps per cell:
the most and the mean requests queued and running, the most and the mean KV-cache
usage, the preemptions over the cell (the counter after minus before), the mean and the
most GPU power (W, summed over the cards) and the mean utilisation (%, over the cards).
A server without these metrics (SGLang without ``--enable-metrics``) gives none, and the
report says so.

Capacity (:func:`capacity`): what the server says it can hold, read once per run: the
most requests it runs at once and the KV cache in tokens (SGLang's ``/get_server_info``;
vLLM's ``cache_config_info`` labels).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import (
    ENGINES,
    ServerMetricNames,
)
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "GpuSample",
    "LoadSample",
    "Sampler",
    "capacity",
    "gpu_sample",
    "names_for",
    "parse_gpu",
    "parse_load",
    "summarize",
]

_SMI_QUERY = "power.draw,utilization.gpu"


def names_for(engine: str) -> list[ServerMetricNames]:
    """The descriptor's names of ``engine``; every engine's for one it does not know."""
    known = ENGINES.get(engine)
    if known is not None:
        return [known.server_metrics] if known.server_metrics is not None else []
    return [d.server_metrics for d in ENGINES.values() if d.server_metrics is not None]


def _running_gauges(engine: str) -> list[str]:
    known = ENGINES.get(engine)
    engines = [known] if known is not None else list(ENGINES.values())
    return [d.running_gauge for d in engines if d.running_gauge]


@dataclass(frozen=True)
class LoadSample:
    """One reading of the server's load gauges and preemption counter."""

    at: float
    queued: float | None = None
    running: float | None = None
    kv_usage: float | None = None  # fraction 0-1
    preemptions: float | None = None  # cumulative


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _first(values: Mapping[str, float], names: Iterable[str]) -> float | None:
    for name in names:
        if _base(name) in values:
            return values[_base(name)]
    return None


def parse_load(text: str, engine: str, at: float = 0.0) -> LoadSample:
    """The load gauges of ``engine`` in Prometheus text (summed over label sets: engines,
    data-parallel ranks), by the descriptor's names."""
    wanted: set[str] = set()
    for n in names_for(engine):
        wanted |= {_base(x) for x in (*n.queued, *n.kv_usage, *n.preemptions)}
    wanted |= set(_running_gauges(engine))
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        base = _base(family.name)
        if base not in wanted:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            sums[base] = sums.get(base, 0.0) + float(sample.value)
    queued = kv = pre = None
    for n in names_for(engine):
        queued = queued if queued is not None else _first(sums, n.queued)
        kv = kv if kv is not None else _first(sums, n.kv_usage)
        pre = pre if pre is not None else _first(sums, n.preemptions)
    return LoadSample(at, queued, _first(sums, _running_gauges(engine)), kv, pre)


def _find(data: Any, keys: Iterable[str]) -> int | None:
    """The first of ``keys`` with an integer value, anywhere in ``data`` (breadth first)."""
    keys = list(keys)
    queue: list[Any] = [data]
    while queue:
        node = queue.pop(0)
        if isinstance(node, Mapping):
            for key in keys:
                value = node.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            queue += [v for v in node.values() if isinstance(v, Mapping | list)]
        elif isinstance(node, list):
            queue += [v for v in node if isinstance(v, Mapping | list)]
    return None


def capacity(engine: str, info: Any = None, metrics_text: str | None = None) -> dict[str, Any]:
    """What the server says it can hold: ``max_running_requests`` and
    ``max_total_tokens`` (KV-cache tokens), from its identity answer (``info``) and its
    metrics; an empty mapping when it says nothing."""
    out: dict[str, Any] = {}
    for n in names_for(engine):
        if info is not None and "max_running_requests" not in out:
            found = _find(info, n.max_running)
            if found:
                out["max_running_requests"] = found
        if info is not None and "max_total_tokens" not in out:
            found = _find(info, n.kv_tokens_keys)
            if found:
                out["max_total_tokens"] = found
        if metrics_text and n.cache_info and "max_total_tokens" not in out:
            tokens = _cache_info_tokens(metrics_text, n)
            if tokens:
                out["max_total_tokens"] = tokens
    return out


def _cache_info_tokens(text: str, n: ServerMetricNames) -> int | None:
    for family in text_string_to_metric_families(text):
        if family.name != n.cache_info:
            continue
        for sample in family.samples:
            labels = sample.labels
            for key in n.cache_info_tokens:
                if str(labels.get(key, "")).isdigit():
                    return int(labels[key])
            if len(n.cache_info_blocks) == 2:
                blocks, size = (str(labels.get(k, "")) for k in n.cache_info_blocks)
                if blocks.isdigit() and size.isdigit():
                    return int(blocks) * int(size)
    return None


@dataclass(frozen=True)
class GpuSample:
    at: float
    power_w: float  # summed over the cards
    util_pct: float  # mean over the cards
    cards: int


def parse_gpu(text: str, at: float = 0.0) -> GpuSample | None:
    """``nvidia-smi --query-gpu=power.draw,utilization.gpu --format=csv,noheader,nounits``
    output: one line per card (``[N/A]`` fields skipped)."""
    power: list[float] = []
    util: list[float] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            power.append(float(parts[0]))
            util.append(float(parts[1]))
        except ValueError:
            continue
    if not power:
        return None
    return GpuSample(at, sum(power), statistics.fmean(util), len(power))


def gpu_sample(smi: str | None = None, at: float = 0.0) -> GpuSample | None:
    """One reading of this machine's GPUs (None without ``nvidia-smi`` or on a failure)."""
    binary = smi or shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        proc = subprocess.run(
            [binary, f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_gpu(proc.stdout, at) if proc.returncode == 0 else None


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    return (max(values), statistics.fmean(values)) if values else (None, None)


def summarize(
    loads: list[LoadSample], gpus: list[GpuSample], before: LoadSample | None,
    after: LoadSample | None, interval_s: float,
) -> dict[str, Any]:  # fmt: skip
    """A cell's server view from its samples (see the module docstring)."""
    out: dict[str, Any] = {
        "interval_s": interval_s,
        "samples": len(loads),
        "gpu_samples": len(gpus),
    }
    for name in ("queued", "running", "kv_usage"):
        values = [float(v) for s in loads if (v := getattr(s, name)) is not None]
        out[f"{name}_max"], out[f"{name}_mean"] = _stats(values)
    out["preemptions"] = (
        after.preemptions - before.preemptions
        if before is not None and after is not None
        and before.preemptions is not None and after.preemptions is not None
        else None
    )  # fmt: skip
    out["gpu_power_w_max"], out["gpu_power_w_mean"] = _stats([g.power_w for g in gpus])
    out["gpu_util_pct_mean"] = _stats([g.util_pct for g in gpus])[1]
    out["gpu_cards"] = gpus[0].cards if gpus else None
    return out


@dataclass
class Sampler:
    """Reads ``fetch`` (the server's metrics text, None when it has none) and the GPUs
    every ``interval_s`` until stopped."""

    fetch: Callable[[], Awaitable[str | None]]
    engine: str
    interval_s: float
    smi: str | None = None
    loads: list[LoadSample] = field(default_factory=list)
    gpus: list[GpuSample] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        gpu_ok = bool(self.smi or shutil.which("nvidia-smi"))
        while True:
            now = time.perf_counter()
            text = await self.fetch()
            if text is not None:
                with contextlib.suppress(ValueError):  # not Prometheus text: no sample
                    self.loads.append(parse_load(text, self.engine, now))
            if gpu_ok:
                sample = await asyncio.to_thread(gpu_sample, self.smi, now)
                if sample is not None:
                    self.gpus.append(sample)
                else:
                    gpu_ok = False
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # its own cancellation is the end it expects; a cancellation of the caller
            # still reaches the caller
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
