"""Load generation: one streaming request, timed chunk by chunk.

Three wire formats: OpenAI ``/v1/completions`` and ``/v1/chat/completions`` (SSE with
``stream_options.include_usage``, plus vLLM/SGLang ``continuous_usage_stats`` so every
chunk says how many tokens it carried), and SGLang's native ``/generate`` (SSE whose
``meta_info`` carries cumulative ``completion_tokens`` and the speculative counters).

Output tokens are counted from ``usage`` (or ``meta_info``), never from chunks: with
speculative decoding one chunk carries several tokens. A stream without a usage
count is a failed request ("server sent no usage"), never a fallback to the requested
length. Every failure carries a reason: HTTP status, timeout, connection error,
truncated stream, or an error object sent inside the stream.

This module only sends and times; statistics live in ``stats`` and acceptance in
``metrics``.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

# meta_info keys of SGLang's /generate that describe speculative decoding (all known
# spellings across versions, engines.ENGINES); copied into the record as sent by the server.
from specops.bench.metrics import SGLANG_SPEC_FIELDS
from specops.bench.plan import ApiKind, Plan, read_api_key
from specops.bench.transport import StreamingTransport

__all__ = [
    "SGLANG_SPEC_FIELDS",
    "RequestRecord",
    "build_payload",
    "endpoint_path",
    "make_client",
    "post_json",
    "send_request",
]


@dataclass
class RequestRecord:
    """What one request did, in seconds relative to ``t_sent`` unless said otherwise."""

    index: int
    context_tokens: int  # prompt length the plan asked for (exact, from the tokenizer)
    t_sent: float = 0.0  # seconds since the run's clock origin (monotonic)
    ttft_s: float | None = None  # first content chunk
    e2e_s: float | None = None  # last content chunk
    done_s: float | None = None  # request over (success or failure)
    chunk_times: list[float] = field(default_factory=list)  # content chunks since t_sent, 1 us
    chunk_tokens: list[int | None] = field(default_factory=list)  # tokens per chunk if known
    output_tokens: int | None = None  # from usage / meta_info
    prompt_tokens: int | None = None  # from usage / meta_info
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    spec: dict[str, Any] | None = None  # SGLang meta_info speculative fields
    in_flight_at_send: int | None = None  # requests in flight (this one included) when sent

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "context_tokens": self.context_tokens,
            "t_sent": self.t_sent,
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "done_s": self.done_s,
            "chunk_times": self.chunk_times,
            "chunk_tokens": self.chunk_tokens,
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "finish_reason": self.finish_reason,
            "http_status": self.http_status,
            "error": self.error,
            "spec": self.spec,
            "in_flight_at_send": self.in_flight_at_send,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """A record as written; fields newer than the file take their defaults."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def endpoint_path(api: ApiKind) -> str:
    return {
        "completions": "/v1/completions",
        "chat": "/v1/chat/completions",
        "sglang-generate": "/generate",
    }[api]


def build_payload(plan: Plan, model: str, prompt: str) -> dict[str, Any]:
    """The JSON body for one streaming request; sampling options only when opted in."""
    if plan.api == "sglang-generate":
        sampling: dict[str, Any] = {"max_new_tokens": plan.output_len}
        if plan.temperature is not None:
            sampling["temperature"] = plan.temperature
        if plan.ignore_eos:
            sampling["ignore_eos"] = True
        return {"text": prompt, "sampling_params": sampling, "stream": True}
    body: dict[str, Any] = {"model": model, "stream": True}
    stream_options: dict[str, Any] = {"include_usage": True}
    if plan.continuous_usage:
        stream_options["continuous_usage_stats"] = True
    body["stream_options"] = stream_options
    if plan.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = plan.output_len
    else:
        body["prompt"] = prompt
        body["max_tokens"] = plan.output_len
    if plan.temperature is not None:
        body["temperature"] = plan.temperature
    if plan.ignore_eos:
        body["ignore_eos"] = True
    return body


_TEMPLATES: weakref.WeakKeyDictionary[
    httpx.AsyncClient, dict[str, tuple[httpx.URL, list[tuple[bytes, bytes]], dict[str, Any]]]
] = weakref.WeakKeyDictionary()


def _request(client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Request:
    """A POST like ``client.build_request`` makes, from a template built once per path.

    Same URL, headers and timeout extensions as the client would merge; it skips
    re-parsing and re-merging them for every request (measurable at thousands/s).
    """
    per_client = _TEMPLATES.setdefault(client, {})
    template = per_client.get(path)
    if template is None:
        built = client.build_request("POST", path, headers={"Content-Type": "application/json"})
        headers = [(k, v) for k, v in built.headers.raw if k.lower() != b"content-length"]
        template = (built.url, headers, dict(built.extensions))
        per_client[path] = template
    url, headers, extensions = template
    return httpx.Request("POST", url, headers=headers, content=body, extensions=extensions)


# Below uvicorn's 5 s keep-alive (vLLM, SGLang): an idle connection is dropped by the
# client before the server closes it under a request.
KEEPALIVE_S = 4.0


async def post_json(client: httpx.AsyncClient, path: str, payload: Any) -> httpx.Response:
    """A small JSON POST through the run's client, read whole (the tokenizer's calls:
    one or two per prompt, so they skip httpx's per-call URL and header merging too)."""
    return await client.send(_request(client, path, orjson.dumps(payload)))


def make_client(plan: Plan, max_concurrency: int) -> httpx.AsyncClient:
    """The run's one client: explicit timeouts and a pool sized to the concurrency.

    Its transport is :class:`~specops.bench.transport.StreamingTransport` (bulk SSE
    reads; httpx's default h11 transport costs ~15x more CPU per streamed token).
    """
    t = plan.timeouts
    headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
    if plan.api_key_env:
        token = os.environ.get(plan.api_key_env)
        if token:
            headers["Authorization"] = f"Bearer {token}"
    if plan.api_key_file:
        headers["Authorization"] = f"Bearer {read_api_key(plan.api_key_file)}"
    pool = max_concurrency + 4
    limits = httpx.Limits(
        max_connections=pool, max_keepalive_connections=pool, keepalive_expiry=KEEPALIVE_S
    )
    return httpx.AsyncClient(
        base_url=plan.base_url,
        timeout=httpx.Timeout(connect=t.connect_s, read=t.read_s, write=t.read_s, pool=t.read_s),
        limits=limits,
        transport=StreamingTransport(limits),
        headers=headers,
        trust_env=False,
    )


class _StreamState:
    """Per-request parsing state; kept small because it runs once per chunk."""

    __slots__ = (
        "done", "fast", "last_tokens", "origin", "record", "saw_usage", "sglang_text_len",
    )  # fmt: skip

    def __init__(self, record: RequestRecord, origin: float, fast: bool = False) -> None:
        self.record = record
        self.origin = origin
        self.last_tokens = 0
        self.saw_usage = False
        self.done = False
        self.sglang_text_len = 0
        self.fast = fast  # read by read (see _fast_block); off for good once it does not fit


def _content_chunk(state: _StreamState, now: float, tokens: int | None) -> None:
    rec = state.record
    elapsed = round(now - state.origin, 6)
    if rec.ttft_s is None:
        rec.ttft_s = elapsed
    rec.e2e_s = elapsed
    rec.chunk_times.append(elapsed)
    rec.chunk_tokens.append(tokens)


def _handle_openai(state: _StreamState, data: dict[str, Any], now: float, chat: bool) -> None:
    # Runs once per SSE event: kept flat on purpose (see scripts/experiments/bench-client-cost.py).
    rec = state.record
    choices = data.get("choices")
    usage = data.get("usage")
    tokens_now: int | None = None
    if usage.__class__ is dict:
        completion = usage.get("completion_tokens")
        if completion is not None:
            tokens_now = int(completion)
            rec.output_tokens = tokens_now
            prompt = usage.get("prompt_tokens")
            if prompt is not None:
                rec.prompt_tokens = int(prompt)
            state.saw_usage = True
    if not choices:
        if "error" in data:
            err = data["error"]
            message = err.get("message", err) if isinstance(err, dict) else err
            raise _StreamError(f"server error in stream: {message}")
        return
    choice = choices[0]
    if chat:
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    else:
        text = choice.get("text")
    finish = choice.get("finish_reason")
    if finish is not None:
        rec.finish_reason = str(finish)
    carried: int | None = None
    if tokens_now is not None:
        carried = tokens_now - state.last_tokens
        state.last_tokens = tokens_now
    if text or (carried is not None and carried > 0):
        elapsed = round(now - state.origin, 6)  # 1 us resolution: smaller, faster JSON
        if rec.ttft_s is None:
            rec.ttft_s = elapsed
        rec.e2e_s = elapsed
        rec.chunk_times.append(elapsed)
        rec.chunk_tokens.append(carried)


def _handle_sglang(state: _StreamState, data: dict[str, Any], now: float) -> None:
    rec = state.record
    if "error" in data:
        err = data["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        raise _StreamError(f"server error in stream: {message}")
    meta = data.get("meta_info")
    text = data.get("text") or ""
    tokens_now: int | None = None
    if isinstance(meta, dict):
        if meta.get("completion_tokens") is not None:
            tokens_now = int(meta["completion_tokens"])
            rec.output_tokens = tokens_now
            state.saw_usage = True
        if meta.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(meta["prompt_tokens"])
        reason = meta.get("finish_reason")
        if isinstance(reason, dict):
            rec.finish_reason = str(reason.get("type"))
        elif reason is not None:
            rec.finish_reason = str(reason)
        spec = {k: meta[k] for k in SGLANG_SPEC_FIELDS if k in meta}
        if spec:
            rec.spec = spec
    carried: int | None = None
    if tokens_now is not None:
        carried = tokens_now - state.last_tokens
        state.last_tokens = tokens_now
    grew = len(text) > state.sglang_text_len
    state.sglang_text_len = max(state.sglang_text_len, len(text))
    if (carried is not None and carried > 0) or (carried is None and grew):
        _content_chunk(state, now, carried)


def _handle_sglang_event(state: _StreamState, data: dict[str, Any], now: float, chat: bool) -> None:
    del chat
    _handle_sglang(state, data, now)


class _StreamError(Exception):
    pass


def _decode(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise _StreamError(f"unparsable SSE data: {payload[:120]!r}") from None


def _slow_event(event: bytes) -> list[bytes]:
    """Data payloads of an event with comments, other fields or several lines."""
    return [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]


_DONE = b"data: [DONE]"


def _finish_reason(rec: RequestRecord, block: bytes) -> None:
    for event in block.split(b"\n\n"):
        if b'"finish_reason"' not in event:
            continue
        data = orjson.loads(event[6:])
        choices = data.get("choices") if data.__class__ is dict else None
        if choices and choices[0].get("finish_reason") is not None:
            rec.finish_reason = str(choices[0]["finish_reason"])


def _fast_block(state: _StreamState, block: bytes, now: float) -> bool:
    """Every event of one network read at once (OpenAI API with continuous usage).

    Events that arrived in one read arrived at the same moment: they are one content
    arrival at ``now``, carrying the tokens by which the last event's cumulative
    ``usage.completion_tokens`` grew. So only that event is parsed (plus the one naming
    a finish reason); the others are only counted as plain ``data: {...}`` events.
    Returns False, changing nothing, for a block of any other shape (an error object,
    comments or other fields, no usage): the caller parses it event by event.
    """
    if b'"error"' in block:
        return False
    done = block.endswith(_DONE)
    if done:
        block = block[: -len(_DONE)].rstrip(b"\n")
        if not block:
            state.done = True
            return True
    if block.count(b"\n") != 2 * block.count(b"\n\ndata: {") or not block.startswith(b"data: {"):
        return False  # not only "data: {...}" events (comments, fields, split lines)
    last = block.rfind(b"\n\ndata: {")
    data = orjson.loads(block[last + 8 :] if last >= 0 else block[6:])
    usage = data.get("usage") if data.__class__ is dict else None
    completion = usage.get("completion_tokens") if usage.__class__ is dict else None
    if completion is None:
        state.fast = False  # the server sends no usage per chunk: event by event from now on
        return False
    rec = state.record
    if block.count(b'"finish_reason"') != block.count(b'"finish_reason":null') + block.count(
        b'"finish_reason": null'
    ):
        _finish_reason(rec, block)  # an event here names one (the stream's last, usually)
    tokens_now = int(completion)
    prompt = usage.get("prompt_tokens")  # type: ignore[union-attr]
    if prompt is not None:
        rec.prompt_tokens = int(prompt)
    rec.output_tokens = tokens_now
    state.saw_usage = True
    carried = tokens_now - state.last_tokens
    state.last_tokens = tokens_now
    if carried > 0:
        elapsed = round(now - state.origin, 6)
        if rec.ttft_s is None:
            rec.ttft_s = elapsed
        rec.e2e_s = elapsed
        rec.chunk_times.append(elapsed)
        rec.chunk_tokens.append(carried)
    if done:
        state.done = True
    return True


async def _consume(response: httpx.Response, state: _StreamState, api: ApiKind) -> None:
    # The client's hot path (scripts/experiments/bench-client-cost.py): per network read one split
    # and, in the common case, one JSON parse (_fast_block); else event by event, orjson
    # per event.
    chat = api == "chat"
    handle = _handle_sglang_event if api == "sglang-generate" else _handle_openai
    buffer = b""
    perf = time.perf_counter
    loads = orjson.loads
    async for raw in response.aiter_raw():
        now = perf()
        buffer = buffer + raw if buffer else raw
        if b"\r" in raw:  # CRLF line ends are valid SSE
            buffer = buffer.replace(b"\r\n", b"\n")
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            continue
        block, buffer = buffer[:cut], buffer[cut + 2 :]
        if state.fast and _fast_block(state, block, now):
            continue
        for event in block.split(b"\n\n"):
            if event.startswith(b"data: {") and b"\n" not in event:
                try:
                    data = loads(event[6:])
                except orjson.JSONDecodeError:
                    raise _StreamError(f"unparsable SSE data: {event[6:126]!r}") from None
                handle(state, data, now, chat)
                continue
            payloads = [event[6:]] if event.startswith(b"data: ") else _slow_event(event)
            for payload in payloads:
                if payload == b"[DONE]":
                    state.done = True
                    continue
                data = _decode(payload)
                if isinstance(data, dict):
                    handle(state, data, now, chat)


async def send_request(
    client: httpx.AsyncClient,
    *,
    plan: Plan,
    model: str,
    prompt: str,
    record: RequestRecord,
    clock_origin: float,
) -> RequestRecord:
    """Send one streaming request and fill ``record``; never raises for server faults."""
    try:
        return await _send(
            client, plan=plan, model=model, prompt=prompt, record=record, clock_origin=clock_origin
        )
    finally:
        record.done_s = time.perf_counter() - clock_origin - record.t_sent


async def _send(  # noqa: PLR0911, PLR0912 - one branch per failure class, each with its reason
    client: httpx.AsyncClient,
    *,
    plan: Plan,
    model: str,
    prompt: str,
    record: RequestRecord,
    clock_origin: float,
) -> RequestRecord:
    body = orjson.dumps(build_payload(plan, model, prompt))
    path = endpoint_path(plan.api)
    origin = time.perf_counter()
    record.t_sent = origin - clock_origin
    state = _StreamState(
        record, origin, fast=plan.continuous_usage and plan.api != "sglang-generate"
    )
    try:
        async with asyncio.timeout(plan.timeouts.request_s):
            response = await client.send(_request(client, path, body), stream=True)
            try:
                record.http_status = response.status_code
                if response.status_code >= 400:
                    detail = (await response.aread())[:200].decode("utf-8", "replace")
                    record.error = f"HTTP {response.status_code}: {detail.strip()}"
                    return record
                await _consume(response, state, plan.api)
            finally:
                await response.aclose()
    except TimeoutError:
        record.error = f"timeout: request exceeded {plan.timeouts.request_s:g} s"
        return record
    except httpx.TimeoutException as exc:
        record.error = f"timeout: {type(exc).__name__} after {_timeout_of(exc, plan)}"
        return record
    except httpx.ConnectError as exc:
        record.error = f"connection error: {exc or type(exc).__name__} ({plan.base_url})"
        return record
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        if record.http_status is None:  # nothing came back: the server went away
            record.error = f"connection error: {exc or type(exc).__name__} ({plan.base_url})"
        else:
            record.error = f"truncated stream: {exc or type(exc).__name__}"
        return record
    except httpx.HTTPError as exc:
        record.error = f"HTTP client error: {type(exc).__name__}: {exc}"
        return record
    except _StreamError as exc:
        record.error = str(exc)
        return record
    except Exception as exc:  # a fault of one request never ends a run: it is a failed request
        record.error = f"client error: {type(exc).__name__}: {exc}"
        return record
    if not state.done:
        record.error = "truncated stream: ended without data: [DONE]"
    elif not state.saw_usage:
        record.error = (
            "server sent no meta_info.completion_tokens"
            if plan.api == "sglang-generate"
            else "server sent no usage (stream_options.include_usage ignored?)"
        )
    elif record.ttft_s is None:
        record.error = "stream carried no content"
    return record


def _timeout_of(exc: httpx.TimeoutException, plan: Plan) -> str:
    t = plan.timeouts
    if isinstance(exc, httpx.ConnectTimeout):
        return f"{t.connect_s:g} s connect"
    if isinstance(exc, httpx.ReadTimeout):
        return f"{t.read_s:g} s without data"
    return f"{t.read_s:g} s"
