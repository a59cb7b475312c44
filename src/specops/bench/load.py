"""Live load as a measurement: a steady background load against a server or a router.

``specops bench load`` holds a load for a bounded time (``--duration``) or for as long
as a command runs (``-- CMD ...``: a rollout, a deploy, a migration), and
reports every request that failed or needed a retry, with timestamps, so that any change
can be measured under traffic: how many requests it cost, when, on which target, and
the latency while it ran.

Two shapes of load, both bounded:

- ``--rate R``: an open loop, one request every 1/R seconds whatever the server does
  (the clients of a real service do not slow down because it does), at most
  ``--max-in-flight`` at once; a request that would exceed it is not sent and counted
  as ``skipped`` (the client, not the server, was the limit);
- ``--concurrency C``: a closed loop, C clients each sending its next request when its
  last one ended.

Requests go to the targets in turn (``--base-url`` once per target: a router, or each
server of a group directly, as clients without a router would). A failed request is
retried up to ``--retries`` times on the next target (0 by default: every failure is
counted as one); a request that succeeded on a retry is ``retried``, one that never did
``failed``. Each attempt is one line of ``requests.jsonl`` (``--out``).

The report (:func:`summarize`): the counts, latency percentiles (end-to-end and time to
first token) of the successful requests overall and within a window (the command's run:
"latency during the rollout"), every failed and retried request with its time and
error, and each target's outages (a run of failed attempts on it: first and last failed
send, and the time from the last success before it to the first success after it,
which is what its clients saw). Load generation lives here; sending and timing one
request is :mod:`specops.bench.client`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from specops.bench.client import RequestRecord, make_client, send_request
from specops.bench.plan import Plan, plan_from_mapping
from specops.bench.prompts import load_corpus
from specops.errors import ValidationError

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_DURATION_S",
    "MAX_RATE",
    "Attempt",
    "CommandRun",
    "LoadReport",
    "LoadSpec",
    "outages",
    "percentile",
    "render",
    "run_load",
    "summarize",
    "write",
]

# Bounds: a load is a measurement beside other work, never a stress test by accident.
MAX_DURATION_S = 24 * 3600.0
MAX_RATE = 500.0
MAX_CONCURRENCY = 256
MAX_IN_FLIGHT = 1024
PROMPT_CHARS = 400  # short prompts: the load must fit any server's context


@dataclass(frozen=True)
class LoadSpec:
    """What load to hold (validated by :meth:`check`)."""

    targets: tuple[str, ...]
    duration_s: float  # the whole load; with a command: its upper bound
    rate: float | None = None  # requests per second (open loop)
    concurrency: int | None = None  # clients (closed loop)
    model: str | None = None  # None: the first model the first target lists
    output_len: int = 32
    retries: int = 0
    max_in_flight: int = 64  # open loop only
    request_timeout_s: float = 300.0
    api_key_file: str | None = None
    temperature: float | None = None
    tail_s: float = 0.0  # with a command: seconds of load after it ended
    drain_s: float = 120.0  # at the end: how long requests in flight may finish

    def check(self) -> None:
        if not self.targets:
            raise ValidationError("--base-url", "give at least one target")
        if (self.rate is None) == (self.concurrency is None):
            raise ValidationError("--rate", "give exactly one of --rate and --concurrency")
        if self.rate is not None and not 0 < self.rate <= MAX_RATE:
            raise ValidationError(
                "--rate", f"{self.rate:g}: must be in (0, {MAX_RATE:g}] per second"
            )
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValidationError(
                "--concurrency", f"{self.concurrency}: must be 1 to {MAX_CONCURRENCY}"
            )
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValidationError(
                "--duration", f"{self.duration_s:g} s: must be in (0, {MAX_DURATION_S:g}] s"
            )
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT:
            raise ValidationError("--max-in-flight", f"must be 1 to {MAX_IN_FLIGHT}")
        if not 0 <= self.retries <= 10:
            raise ValidationError("--retries", f"{self.retries}: must be 0 to 10")
        if not 1 <= self.output_len <= 4096:
            raise ValidationError("--output-len", f"{self.output_len}: must be 1 to 4096")


@dataclass
class Attempt:
    """One attempt of one request: times in seconds since the load's start."""

    request: int
    attempt: int  # 0: the first try
    target: str
    t: float  # sent, seconds since the load's start
    sent_at: str  # the same, wall clock (ISO 8601, UTC, ms)
    latency_s: float | None = None  # the whole request (None: not over)
    ttft_s: float | None = None
    status: int | None = None
    error: str | None = None
    output_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CommandRun:
    """The command the load ran beside: its argv, exit code and window."""

    argv: tuple[str, ...]
    rc: int
    start_t: float  # seconds since the load's start
    end_t: float


@dataclass
class LoadReport:
    """What :func:`run_load` measured; :func:`summarize` makes the report of it."""

    spec: LoadSpec
    model: str
    started_at: str
    attempts: list[Attempt] = field(default_factory=list)
    skipped: list[float] = field(default_factory=list)  # open loop: t of requests not sent
    cut: int = 0  # requests still in flight after drain_s at the end (not counted)
    seconds: float = 0.0
    command: CommandRun | None = None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def _prompts() -> list[str]:
    return [p[:PROMPT_CHARS] for p in load_corpus("mixed")[:64]]


def _plan(spec: LoadSpec, url: str) -> Plan:
    data: dict[str, Any] = {
        "base_url": url,
        "output_len": spec.output_len,
        "concurrency": [1],
        "context_lengths": [1],
        "timeouts": {"request_s": spec.request_timeout_s},
    }
    if spec.model:
        data["model"] = spec.model
    if spec.api_key_file:
        data["api_key_file"] = spec.api_key_file
    if spec.temperature is not None:
        data["temperature"] = spec.temperature
    return plan_from_mapping(data)


async def _model(client: httpx.AsyncClient, url: str) -> str:
    try:
        reply = await client.get("/v1/models")
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValidationError(
            "--model", f"not given, and {url}/v1/models did not name one ({exc})"
        ) from None


class _Load:
    """The running load: clients, counters, the attempts so far."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.plans = [_plan(spec, url) for url in spec.targets]
        width = spec.concurrency or spec.max_in_flight
        self.clients = [make_client(p, width) for p in self.plans]
        self.prompts = _prompts()
        self.next_target = itertools.count()
        self.next_request = itertools.count()
        self.in_flight = 0
        self.model = spec.model or ""
        self.origin = time.perf_counter()
        self.epoch = time.time()
        self.report: LoadReport | None = None

    def now(self) -> float:
        return time.perf_counter() - self.origin

    async def close(self) -> None:
        for c in self.clients:
            await c.aclose()

    async def one(self, index: int) -> None:
        """One request, retried on the next targets up to ``retries`` times."""
        assert self.report is not None
        prompt = self.prompts[index % len(self.prompts)]
        first = next(self.next_target)
        for attempt in range(self.spec.retries + 1):
            k = (first + attempt) % len(self.clients)  # a retry: the next target
            t = self.now()
            rec = RequestRecord(index=index, context_tokens=0)
            at = Attempt(index, attempt, self.spec.targets[k], round(t, 3), _iso(self.epoch + t))
            self.report.attempts.append(at)
            await send_request(
                self.clients[k], plan=self.plans[k], model=self.model, prompt=prompt,
                record=rec, clock_origin=self.origin,
            )  # fmt: skip
            at.latency_s = None if rec.done_s is None else round(rec.done_s, 4)
            at.ttft_s = None if rec.ttft_s is None else round(rec.ttft_s, 4)
            at.status, at.error, at.output_tokens = rec.http_status, rec.error, rec.output_tokens
            if at.ok:
                return
            if attempt < self.spec.retries:
                await asyncio.sleep(min(0.5 * (attempt + 1), 2.0))

    async def counted(self, index: int) -> None:
        self.in_flight += 1
        try:
            await self.one(index)
        finally:
            self.in_flight -= 1

    async def open_loop(self, stop: asyncio.Event, tasks: set[asyncio.Task[None]]) -> None:
        assert self.spec.rate is not None
        assert self.report is not None
        period = 1.0 / self.spec.rate
        due = self.now()
        while not stop.is_set():
            if self.in_flight >= self.spec.max_in_flight:
                self.report.skipped.append(round(self.now(), 3))
            else:
                task = asyncio.create_task(self.counted(next(self.next_request)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            due += period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(due - self.now(), 0.0))

    async def closed_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.counted(next(self.next_request))


async def _command(argv: Sequence[str], load: _Load, stdout: int | None) -> CommandRun:
    start = load.now()
    # its standard error with its output where that goes (one log of the command)
    stderr = asyncio.subprocess.STDOUT if stdout is not None else None
    proc = await asyncio.create_subprocess_exec(*argv, stdout=stdout, stderr=stderr)
    rc = await proc.wait()
    return CommandRun(tuple(argv), rc, round(start, 3), round(load.now(), 3))


async def run_load(
    spec: LoadSpec, during: Sequence[str] | None = None, *, during_stdout: int | None = None
) -> LoadReport:
    """Hold the load for ``spec.duration_s`` seconds, or while ``during`` runs (then
    ``tail_s`` more; ``duration_s`` bounds it: the command is left running past it, the
    load not), then let requests in flight finish (``drain_s``). ``during_stdout``: where
    the command's standard output goes (a file descriptor; None: this process's)."""
    spec.check()
    load = _Load(spec)
    try:
        if not load.model:
            load.model = await _model(load.clients[0], spec.targets[0])
        load.report = LoadReport(spec, load.model, _iso(load.epoch))
        stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()
        if spec.rate is not None:
            workers = [asyncio.create_task(load.open_loop(stop, tasks))]
        else:
            workers = [asyncio.create_task(load.closed_loop(stop))
                       for _ in range(spec.concurrency or 1)]  # fmt: skip
        command: asyncio.Task[CommandRun] | None = None
        if during:
            command = asyncio.create_task(_command(during, load, during_stdout))
            done, _ = await asyncio.wait({command}, timeout=spec.duration_s)
            if done:
                await asyncio.sleep(max(min(spec.tail_s, spec.duration_s - load.now()), 0.0))
        else:
            await asyncio.sleep(spec.duration_s)
        stop.set()
        pending = set(workers) | set(tasks)
        _, late = await asyncio.wait(pending, timeout=spec.drain_s) if pending else (set(), set())
        for task in late:
            task.cancel()
        load.report.cut = len(late)
        load.report.seconds = round(load.now(), 3)
        if command is not None:
            load.report.command = await command
        return load.report
    finally:
        await load.close()


# -- the report ------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _latency(attempts: Sequence[Attempt]) -> dict[str, Any]:
    e2e = [a.latency_s for a in attempts if a.ok and a.latency_s is not None]
    ttft = [a.ttft_s for a in attempts if a.ok and a.ttft_s is not None]

    def pct(values: list[float]) -> dict[str, float | None]:
        return {
            f"p{q}": None if not values else round(float(percentile(values, q) or 0), 4)
            for q in (50, 90, 99)
        } | {"max": round(max(values), 4) if values else None}

    return {"requests": len(e2e), "e2e_s": pct(e2e), "ttft_s": pct(ttft)}


def _requests(attempts: Sequence[Attempt]) -> dict[int, list[Attempt]]:
    out: dict[int, list[Attempt]] = {}
    for a in sorted(attempts, key=lambda a: (a.request, a.attempt)):
        out.setdefault(a.request, []).append(a)
    return out


def outages(attempts: Sequence[Attempt]) -> dict[str, list[dict[str, Any]]]:
    """Per target, each run of failed attempts in send order: its first and last failed
    send, how many failed, and ``seconds``: from the last success before it (else its
    first failure) to the first success after it (else its last failure)."""
    out: dict[str, list[dict[str, Any]]] = {}
    by_target: dict[str, list[Attempt]] = {}
    for one in sorted(attempts, key=lambda x: x.t):
        by_target.setdefault(one.target, []).append(one)
    for target, seq in by_target.items():
        spans: list[dict[str, Any]] = []
        run: list[Attempt] = []
        last_ok: Attempt | None = None
        following: list[Attempt | None] = [*seq, None]
        for a in following:
            if a is not None and not a.ok:
                run.append(a)
                continue
            if run:
                begin = last_ok.t if last_ok is not None else run[0].t
                end = a.t if a is not None else run[-1].t
                spans.append({
                    "first_failed_at": run[0].sent_at, "last_failed_at": run[-1].sent_at,
                    "first_failed_t": run[0].t, "last_failed_t": run[-1].t,
                    "failed": len(run), "seconds": round(end - begin, 3),
                    "errors": sorted({str(x.error)[:80] for x in run}),
                })  # fmt: skip
                run = []
            if a is not None:
                last_ok = a
        if spans:
            out[target] = spans
    return out


def summarize(report: LoadReport, window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The report as keyed numbers: counts, latency (overall and in ``window``, by
    default the command's run), every failed and retried request, outages per target."""
    requests = _requests(report.attempts)
    failed = {i: a for i, a in requests.items() if not a[-1].ok}
    retried = {i: a for i, a in requests.items() if a[-1].ok and len(a) > 1}
    if window is None and report.command is not None:
        window = (report.command.start_t, report.command.end_t)
    final = [a[-1] for a in requests.values()]

    def events(chosen: Mapping[int, list[Attempt]]) -> list[dict[str, Any]]:
        return [
            {"request": i, "attempts": [
                {"target": a.target, "sent_at": a.sent_at, "t": a.t, "status": a.status,
                 "error": a.error} for a in atts]}
            for i, atts in sorted(chosen.items())
        ]  # fmt: skip

    per_target: dict[str, dict[str, int]] = {}
    for a in report.attempts:
        row = per_target.setdefault(a.target, {"attempts": 0, "ok": 0, "failed": 0})
        row["attempts"] += 1
        row["ok" if a.ok else "failed"] += 1
    out: dict[str, Any] = {
        "model": report.model,
        "started_at": report.started_at,
        "seconds": report.seconds,
        "targets": list(report.spec.targets),
        "load": {
            "rate": report.spec.rate,
            "concurrency": report.spec.concurrency,
            "output_len": report.spec.output_len,
            "retries": report.spec.retries,
        },
        "requests": len(requests),
        "ok": len(requests) - len(failed) - len(retried),
        "retried": len(retried),
        "failed": len(failed),
        "skipped": len(report.skipped),
        "cut_at_end": report.cut,
        "per_target": per_target,
        "latency": _latency(final),
        "failed_requests": events(failed),
        "retried_requests": events(retried),
        "outages": outages(report.attempts),
    }
    if window is not None:
        inside = [a for a in final if window[0] <= a.t <= window[1]]
        out["window"] = {
            "start_t": window[0], "end_t": window[1],
            "start_at": _iso_of(report, window[0]), "end_at": _iso_of(report, window[1]),
            "requests": len(inside), "failed": sum(not a.ok for a in inside),
            "latency": _latency(inside),
        }  # fmt: skip
    if report.command is not None:
        run = report.command
        out["command"] = {
            "argv": list(run.argv),
            "rc": run.rc,
            "seconds": round(run.end_t - run.start_t, 1),
        }
    return out


def _iso_of(report: LoadReport, t: float) -> str:
    start = datetime.fromisoformat(report.started_at).timestamp()
    return _iso(start + t)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def render(summary: Mapping[str, Any]) -> list[str]:
    """The summary as lines for a terminal."""
    lat = summary["latency"]
    load = summary["load"]
    shape = f"{load['rate']:g} req/s" if load["rate"] else f"concurrency {load['concurrency']}"
    lines = [
        f"load: {shape} against {', '.join(summary['targets'])} ({summary['model']}), "
        f"{summary['seconds']:.0f} s from {summary['started_at']}",
        f"requests {summary['requests']}: ok {summary['ok']}, retried {summary['retried']}, "
        f"failed {summary['failed']}, skipped {summary['skipped']} (client at its in-flight"
        f" bound), cut at the end {summary['cut_at_end']}",
        f"latency (ms, successful requests): e2e p50 {_ms(lat['e2e_s']['p50'])} p90 "
        f"{_ms(lat['e2e_s']['p90'])} p99 {_ms(lat['e2e_s']['p99'])} max "
        f"{_ms(lat['e2e_s']['max'])}; ttft p50 {_ms(lat['ttft_s']['p50'])} p99 "
        f"{_ms(lat['ttft_s']['p99'])}",
    ]
    if "command" in summary:
        c = summary["command"]
        lines.append(f"command: rc {c['rc']} after {c['seconds']:.0f} s: {' '.join(c['argv'])}")
    if "window" in summary:
        w = summary["window"]
        wl = w["latency"]
        lines.append(
            f"during it ({w['start_at']} - {w['end_at']}): requests {w['requests']}, failed "
            f"{w['failed']}; e2e p50 {_ms(wl['e2e_s']['p50'])} p90 {_ms(wl['e2e_s']['p90'])} "
            f"p99 {_ms(wl['e2e_s']['p99'])} max {_ms(wl['e2e_s']['max'])} ms"
        )
    for kind in ("failed_requests", "retried_requests"):
        for ev in summary[kind]:
            tries = "; ".join(
                f"{a['sent_at']} {a['target']}: {a['error'] or 'ok'}" for a in ev["attempts"]
            )
            lines.append(f"{kind.split('_')[0]} request {ev['request']}: {tries}")
    for target, spans in summary["outages"].items():
        for sp in spans:
            lines.append(
                f"outage of {target}: {sp['failed']} failed from {sp['first_failed_at']} to "
                f"{sp['last_failed_at']} ({sp['seconds']:.1f} s without an answer): "
                f"{'; '.join(sp['errors'])}"
            )
    return lines


def write(report: LoadReport, summary: Mapping[str, Any], out: Path) -> None:
    """``requests.jsonl`` (every attempt) and ``load.json`` (the summary) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "requests.jsonl").open("w", encoding="utf-8") as fh:
        for a in sorted(report.attempts, key=lambda a: a.t):
            fh.write(json.dumps(a.to_dict()) + "\n")
    (out / "load.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
