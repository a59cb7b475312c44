"""Runs a plan: preflight, identity, then each (context, concurrency) cell.

Before the first measured cell, the warm-up over the plan (:func:`_warm_matrix`):
``warmup_waves`` full waves at every cell's concurrency and context, so the engine has
met each batch shape and context (graphs captured, kernels compiled) before anything is
measured; recorded in the results' ``warmup``. A run resumed warms the cells it still
measures (the server may have restarted since).

Per cell: build every prompt first (tokenizing is never timed), send the warm-up
requests, snapshot the server's counters, send the measured requests with at most
``concurrency`` in flight (:meth:`Plan.requests_for`: enough requests to hold the
concurrency for ``waves_per_cell`` waves), snapshot again. A cell whose requests fail
is marked (``partial``/``failed``) with the reasons and the run goes on, unless
``fail_fast``; no fault of a request ends a run. An unreachable server fails the run in
about ``timeouts.connect_s`` naming the URL.

With a :class:`~specops.bench.results.RunStore` every finished cell is on disk before
the next one starts; a cancelled run (Ctrl-C, SIGTERM) writes what it has and re-raises;
a store that already holds cells is resumed: the same plan on the same server, only the
missing cells measured.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import platform
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from ansible_collections.specops.infra.plugins.module_utils.engine.descriptor import ENGINES, shared

from specops.bench import humaneval
from specops.bench.client import RequestRecord, make_client, send_request
from specops.bench.metrics import (
    Acceptance,
    SpecCounters,
    acceptance_from_sglang,
    acceptance_from_vllm,
    parse_spec_counters,
)
from specops.bench.plan import Plan, changed_fields, complete
from specops.bench.prompts import (
    LocalTokenizer,
    PromptBuilder,
    ServerTokenizer,
    Tokenizer,
    load_corpus,
)
from specops.bench.results import Cell, Results, RunStore, ServerIdentity
from specops.bench.serverview import LoadSample, Sampler, capacity, parse_load, summarize
from specops.bench.stats import cell_stats
from specops.errors import SpecopsError, ValidationError

__all__ = ["Observer", "RunState", "new_run_id", "run_plan"]

# The engines' HTTP surface (engines.ENGINES): SGLang names itself on its server-info
# path, vLLM on /version; both count on the same metrics path.
_SGLANG = ENGINES["sglang"]
_VLLM = ENGINES["vllm"]
_METRICS: str = shared("metrics_path")
_MODELS: str = shared("models_path")


def _counts_on_metrics(engine: str) -> bool:
    """Whether the engine's acceptance is read from metrics counters (an unknown engine:
    try them)."""
    known = ENGINES.get(engine)
    return known is None or known.spec_counters is not None


@dataclass
class RunState:
    """Live counters for a progress display (read-only for observers)."""

    cells_total: int = 0
    cells_done: int = 0
    cells_kept: int = 0  # cells a resumed run found already measured
    in_flight: int = 0
    cell_label: str = ""
    cell_tokens: int = 0
    cell_started: float = 0.0
    failures: int = 0
    started: float = 0.0  # perf_counter when measuring began
    requests_total: int = 0  # requests (warm-up included) of the cells still to measure
    requests_done: int = 0
    notes: tuple[str, ...] = ()  # what the run changed of the plan (lengths clipped, dropped)

    @property
    def live_tok_s(self) -> float:
        elapsed = time.perf_counter() - self.cell_started if self.cell_started else 0.0
        return self.cell_tokens / elapsed if elapsed > 0 else 0.0

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started if self.started else 0.0

    @property
    def eta_s(self) -> float | None:
        """Rough time left: the time per finished request so far, for the rest."""
        if not self.requests_done or not self.started:
            return None
        left = max(self.requests_total - self.requests_done, 0)
        return self.elapsed_s / self.requests_done * left


Observer = Callable[[RunState], None]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


async def _get_json(client: httpx.AsyncClient, path: str) -> Any | None:
    try:
        response = await client.get(path)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except json.JSONDecodeError:
        return None


async def _preflight(client: httpx.AsyncClient, plan: Plan) -> tuple[str, int | None]:
    url = f"{plan.base_url}{_MODELS}"
    try:
        response = await client.get(_MODELS, timeout=plan.timeouts.connect_s * 2)
    except httpx.HTTPError as exc:
        raise SpecopsError(
            f"cannot reach {url}: {type(exc).__name__}: {exc or 'no answer'}"
        ) from None
    if response.status_code != 200:
        raise SpecopsError(f"{url} answered HTTP {response.status_code}")
    entries = response.json().get("data") or []
    if not entries:
        raise SpecopsError(f"{url} lists no model")
    chosen = entries[0]
    if plan.model is not None:
        matches = [e for e in entries if e.get("id") == plan.model]
        if not matches:
            names = ", ".join(str(e.get("id")) for e in entries)
            raise ValidationError("model", f"{plan.model!r} is not served at {url} ({names})")
        chosen = matches[0]
    max_len = chosen.get("max_model_len")
    return str(chosen["id"]), int(max_len) if isinstance(max_len, int) else None


def sglang_identity(
    info: dict[str, Any], base_url: str, model: str, max_len: int | None
) -> ServerIdentity:
    """What SGLang's ``/get_server_info`` says of the server. It lists every
    ``speculative_*`` argument whether or not the server speculates (0.5.11: 28 of them,
    the NGRAM and threshold defaults set, measured on the H200): the server speculates
    only when ``speculative_algorithm`` names an algorithm, and then the arguments that
    are set describe it."""
    spec = {k: v for k, v in info.items() if k.startswith("speculative_") and v is not None}
    return ServerIdentity(
        base_url=base_url,
        model=model,
        engine=_SGLANG.name,
        engine_version=str(info.get("version")) if info.get("version") else None,
        max_model_len=max_len,
        speculative=spec if info.get("speculative_algorithm") else None,
        speculative_source=_SGLANG.identity_path,
        spec_counters=False,
        capacity=capacity(_SGLANG.name, info) or None,
    )


async def _identity(
    client: httpx.AsyncClient, plan: Plan, model: str, max_len: int | None
) -> ServerIdentity:
    sg = await _get_json(client, _SGLANG.identity_path)
    if isinstance(sg, dict) and ("speculative_algorithm" in sg or "tp_size" in sg):
        return sglang_identity(sg, plan.base_url, model, max_len)
    version = await _get_json(client, _VLLM.identity_path)
    text = await _metrics_text(client)
    counters = _counters(text)
    speculative: dict[str, Any] | None = None
    source = "not exposed by the server (vLLM shows it only with VLLM_SERVER_DEV_MODE=1)"
    info = await _get_json(client, _VLLM.settings_path)
    if isinstance(info, dict):
        text = json.dumps(info)
        cfg = info.get("vllm_config")
        if isinstance(cfg, dict) and cfg.get("speculative_config") is not None:
            speculative = {"speculative_config": cfg["speculative_config"]}
        elif "speculative_config" in text:
            start = text.find("speculative_config")
            speculative = {"speculative_config_text": text[start : start + 400]}
        source = _VLLM.settings_path
    engine = _VLLM.name if isinstance(version, dict) and "version" in version else "unknown"
    held = capacity(engine, info if isinstance(info, dict) else None, text)
    return ServerIdentity(
        base_url=plan.base_url,
        model=model,
        engine=engine,
        engine_version=str(version["version"]) if isinstance(version, dict) else None,
        max_model_len=max_len,
        speculative=speculative,
        speculative_source=source,
        spec_counters=counters is not None and counters.present,
        capacity=held or None,
    )


async def _metrics_text(client: httpx.AsyncClient) -> str | None:
    """The server's metrics (Prometheus text), None when it has none."""
    try:
        response = await client.get(_METRICS)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def _counters(text: str | None) -> SpecCounters | None:
    if text is None:
        return None
    try:
        return parse_spec_counters(text)
    except ValueError:
        return None


def _load(text: str | None, engine: str) -> LoadSample | None:
    if text is None:
        return None
    try:
        return parse_load(text, engine, time.perf_counter())
    except ValueError:
        return None


async def _tokenizer(client: httpx.AsyncClient, plan: Plan, model: str) -> Tokenizer:
    if await ServerTokenizer.available(client, model):
        return ServerTokenizer(client, model)
    if plan.tokenizer_path is not None:
        return LocalTokenizer(plan.tokenizer_path)
    raise ValidationError(
        "tokenizer_path",
        f"{plan.base_url} has no /tokenize; give the model's tokenizer.json to size prompts",
    )


async def _build_prompts(
    builder: PromptBuilder, keys: list[str], tokens: int, parallel: int = 4
) -> list[str]:
    sem = asyncio.Semaphore(parallel)

    async def one(key: str) -> str:
        async with sem:
            return (await builder.build(key, tokens)).text

    return list(await asyncio.gather(*(one(k) for k in keys)))


async def _run_requests(
    client: httpx.AsyncClient,
    *,
    plan: Plan,
    model: str,
    prompts: list[str],
    context: int,
    concurrency: int,
    origin: float,
    state: RunState,
    observer: Observer | None,
    count_tokens: bool,
) -> list[RequestRecord]:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, prompt: str) -> RequestRecord:
        async with sem:
            state.in_flight += 1
            if observer:
                observer(state)
            record = RequestRecord(
                index=i, context_tokens=context, in_flight_at_send=state.in_flight
            )
            try:
                await send_request(
                    client,
                    plan=plan,
                    model=model,
                    prompt=prompt,
                    record=record,
                    clock_origin=origin,
                )
            finally:
                state.in_flight -= 1
                state.requests_done += 1
            if count_tokens and record.ok:
                state.cell_tokens += record.output_tokens or 0
            if record.error:
                state.failures += 1
            if observer:
                observer(state)
            return record

    return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))


async def _run_cell(
    client: httpx.AsyncClient,
    *,
    plan: Plan,
    model: str,
    builder: PromptBuilder,
    identity: ServerIdentity,
    context: int,
    concurrency: int,
    origin: float,
    state: RunState,
    observer: Observer | None,
) -> Cell:
    label = f"c{concurrency}-ctx{context}"
    started_at = _now()
    warm_keys = [f"{label}-w{i}" for i in range(plan.warmup_per_cell)]
    keys = [f"{label}-r{i}" for i in range(plan.requests_for(concurrency))]
    notes: list[str] = []
    try:
        warm_prompts = await _build_prompts(builder, warm_keys, context)
        prompts = await _build_prompts(builder, keys, context)
    except ValidationError:
        raise
    except (httpx.HTTPError, SpecopsError) as exc:
        reason = f"prompts could not be built: {type(exc).__name__}: {exc}"
        records = [
            RequestRecord(index=i, context_tokens=context, error=reason, done_s=0.0)
            for i in range(len(keys))
        ]
        state.requests_done += len(keys) + len(warm_keys)
        return Cell(
            concurrency=concurrency,
            context_tokens=context,
            status="failed",
            stats=cell_stats(records, plan.slo, concurrency),
            acceptance=Acceptance(source="none", note=reason),
            warmup_requests=0,
            warmup_failed=0,
            started_at=started_at,
            records=records,
            notes=[reason],
        )
    state.cell_label = label
    state.cell_tokens = 0
    common: dict[str, Any] = {
        "plan": plan,
        "model": model,
        "context": context,
        "concurrency": concurrency,
        "origin": origin,
        "state": state,
        "observer": observer,
    }
    warm = await _run_requests(client, prompts=warm_prompts, count_tokens=False, **common)
    warm_failed = sum(1 for r in warm if r.error)
    if warm_failed:
        notes.append(f"{warm_failed} warm-up request(s) failed: {warm[0].error or ''}")
    before_text = await _metrics_text(client)
    before = _counters(before_text) if _counts_on_metrics(identity.engine) else None
    sampler = (
        Sampler(lambda: _metrics_text(client), identity.engine, plan.sample_interval_s)
        if plan.sample_interval_s > 0
        else None
    )
    if sampler is not None:
        sampler.start()
    state.cell_started = time.perf_counter()
    try:
        records = await _run_requests(client, prompts=prompts, count_tokens=True, **common)
    finally:
        if sampler is not None:
            await sampler.stop()
    after_text = await _metrics_text(client)
    after = _counters(after_text) if _counts_on_metrics(identity.engine) else None
    view = (
        summarize(
            sampler.loads, sampler.gpus, _load(before_text, identity.engine),
            _load(after_text, identity.engine), plan.sample_interval_s,
        )
        if sampler is not None
        else None
    )  # fmt: skip
    stats = cell_stats(records, plan.slo, concurrency)
    if any(r.spec for r in records):
        acceptance = acceptance_from_sglang((r.output_tokens, r.spec) for r in records if r.ok)
    elif before is not None and after is not None:
        acceptance = acceptance_from_vllm(before, after)
    else:
        acceptance = Acceptance(source="none", note="no counters readable before/after the cell")
    if stats.completed == 0:
        status = "failed"
    elif stats.failed:
        status = "partial"
    else:
        status = "ok"
    return Cell(
        concurrency=concurrency,
        context_tokens=context,
        status=status,
        stats=stats,
        acceptance=acceptance,
        warmup_requests=len(warm),
        warmup_failed=warm_failed,
        started_at=started_at,
        records=records,
        notes=notes,
        server=view,
    )


async def _warm_matrix(
    client: httpx.AsyncClient,
    *,
    plan: Plan,
    model: str,
    builder: PromptBuilder,
    cells: list[tuple[int, int]],
    origin: float,
    state: RunState,
    observer: Observer | None,
) -> dict[str, Any] | None:
    """``plan.warmup_waves`` full waves (C requests, at most C in flight) at each
    (context, concurrency) of ``cells``, none measured; what it did, for the results
    (None when off or nothing is left to measure)."""
    if plan.warmup_waves < 1 or not cells:
        return None
    began = time.perf_counter()
    sent = failed = 0
    first_error: str | None = None
    for context, concurrency in cells:
        label = f"{_label(concurrency, context)}-m"
        keys = [f"{label}{i}" for i in range(plan.warmup_waves * concurrency)]
        state.cell_label = f"warm-up {_label(concurrency, context)}"
        try:
            prompts = await _build_prompts(builder, keys, context)
        except ValidationError:
            raise
        except (httpx.HTTPError, SpecopsError) as exc:
            failed += len(keys)
            state.requests_done += len(keys)
            first_error = first_error or f"prompts could not be built: {exc}"
            continue
        records = await _run_requests(
            client, plan=plan, model=model, prompts=prompts, context=context,
            concurrency=concurrency, origin=origin, state=state, observer=observer,
            count_tokens=False,
        )  # fmt: skip
        sent += len(records)
        bad = [r for r in records if r.error]
        failed += len(bad)
        if bad and first_error is None:
            first_error = bad[0].error
    return {
        "waves": plan.warmup_waves,
        "cells": len(cells),
        "requests": sent,
        "failed": failed,
        "seconds": round(time.perf_counter() - began, 3),
        "error": first_error,
    }


def new_run_id() -> str:
    """A run id: UTC time to the millisecond and a random suffix (the run directory's
    name). Ids sort by time: runs started within one second (a re-run, a sweep's short
    cells) keep their order, which the random suffix alone would not."""
    now = dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{uuid.uuid4().hex[:6]}"


def _label(concurrency: int, context: int) -> str:
    return f"c{concurrency}-ctx{context}"


def _begin(
    store: RunStore | None,
    before: Results | None,
    results: Results,
    matrix: list[tuple[int, int]],
    plan: Plan,
) -> tuple[dict[tuple[int, int], Cell], RunState]:
    """The cells a resumed run keeps (by (C, context)), the progress state; the store
    started (or its cut-short last line dropped)."""
    kept = {(c.concurrency, c.context_tokens): c for c in (before.cells if before else [])}
    if store is not None:
        if before is None:
            store.start(results)
        else:
            store.rewrite_cells(list(kept.values()))
            store.update_header(results)
    todo = [(ctx, c) for ctx, c in matrix if (c, ctx) not in kept]
    state = RunState(
        cells_total=len(matrix),
        cells_done=len(matrix) - len(todo),
        cells_kept=len(matrix) - len(todo),
        started=time.perf_counter(),
        requests_total=sum(
            plan.requests_for(c) + plan.warmup_per_cell + plan.warmup_waves * c for _, c in todo
        ),
    )
    return kept, state


def _interrupted(results: Results, cells: int, store: RunStore | None) -> None:
    results.interrupted = True
    results.finished_at = _now()
    results.notes.append(
        f"interrupted after {len(results.cells)} of {cells} cells; "
        "the finished cells are kept (resume with --resume)"
    )
    if store is not None:
        store.finish(results)


def _same_run(before: Results, plan: Plan, identity: ServerIdentity) -> None:
    """Refuse to resume on another plan or server: the cells would not be comparable."""
    changed = changed_fields(before.plan, plan)
    if changed:
        raise ValidationError(
            "resume",
            f"{before.run_id} was measured with another plan (changed: {', '.join(changed)});"
            " start a new run instead",
        )
    was, is_ = before.server, identity
    for key in ("base_url", "model", "engine", "engine_version", "speculative"):
        if getattr(was, key) != getattr(is_, key):
            raise ValidationError(
                "resume",
                f"the server changed since {before.run_id} began ({key}: "
                f"{getattr(was, key)!r} -> {getattr(is_, key)!r}); start a new run instead",
            )


async def run_plan(
    plan: Plan,
    observer: Observer | None = None,
    fail_fast: bool = False,
    store: RunStore | None = None,
    server_instance: str | None = None,
) -> Results:
    """Run the whole matrix (and HumanEval when the plan asks) and return the results.

    ``store``: keep each finished cell there as it ends; a store holding a run already
    is resumed (its plan, its server, only the cells it lacks). ``server_instance``: the
    serving process measured, recorded for ``bench run --reuse`` (a resumed run keeps
    its own).
    """
    before = store.load() if store is not None and store.exists() else None
    created = before.created_at if before else _now()
    run_id = before.run_id if before else store.dir.name if store else new_run_id()
    origin = time.perf_counter()
    async with make_client(plan, max(plan.concurrency)) as client:
        model, max_len = await _preflight(client, plan)
        identity = await _identity(client, plan, model, max_len)
        effective, notes = complete(plan, model, max_len)
        contexts = effective.context_lengths
        if before is not None:
            _same_run(before, effective, identity)
            notes = list(before.notes)
        results = Results(
            run_id=run_id,
            created_at=created,
            finished_at=None,
            host={
                "hostname": socket.gethostname(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            plan=effective.to_dict(),
            server=identity,
            cells=[],
            notes=notes,
            correctness=before.correctness if before else None,
            resumed_at=[*before.resumed_at, _now()] if before else [],
            server_instance=before.server_instance if before else server_instance,
        )
        matrix = [(ctx, c) for ctx in contexts for c in plan.concurrency]
        kept, state = _begin(store, before, results, matrix, effective)
        state.notes = tuple(notes)
        if observer and notes:
            observer(state)
        tokenizer = await _tokenizer(client, plan, model)
        builder = PromptBuilder(
            tokenizer, plan.api, load_corpus(plan.prompt_set, plan.prompt_file), plan.seed
        )
        stop = False
        try:
            results.warmup = await _warm_matrix(
                client, plan=effective, model=model, builder=builder,
                cells=[(ctx, c) for ctx, c in matrix if (c, ctx) not in kept],
                origin=origin, state=state, observer=observer,
            ) or (before.warmup if before else None)  # fmt: skip
            if results.warmup is not None and store is not None:
                store.update_header(results)
            for context, concurrency in matrix:
                done = kept.get((concurrency, context))
                if done is not None:
                    results.cells.append(done)
                    continue
                cell = await _run_cell(
                    client,
                    plan=effective,
                    model=model,
                    builder=builder,
                    identity=identity,
                    context=context,
                    concurrency=concurrency,
                    origin=origin,
                    state=state,
                    observer=observer,
                )
                results.cells.append(cell)
                if store is not None:
                    store.add(cell)
                state.cells_done += 1
                if observer:
                    observer(state)
                if fail_fast and cell.status != "ok":
                    results.notes.append(
                        f"stopped after cell {_label(concurrency, context)} (--fail-fast): "
                        f"{cell.stats.failed} failed request(s)"
                    )
                    stop = True
                    break
            if plan.humaneval.enabled and not stop and results.correctness is None:
                results.correctness = await humaneval.run_humaneval(client, effective, model)
        except asyncio.CancelledError:
            _interrupted(results, len(matrix), store)
            raise
    results.finished_at = _now()
    if store is not None:
        store.finish(results)
    return results
