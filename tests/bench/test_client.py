"""SSE parsing and failure reasons of the streaming client (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from specops.bench.client import RequestRecord, build_payload, send_request
from specops.bench.plan import Plan


class _Chunks(httpx.AsyncByteStream):
    """Yields byte pieces with a pause before each, like a network stream."""

    def __init__(self, pieces: list[bytes], pause: float = 0.01) -> None:
        self._pieces = pieces
        self._pause = pause

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            await asyncio.sleep(self._pause)
            yield piece


def _sse(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _completion(text: str, tokens: int | None, finish: str | None = None) -> dict:
    chunk: dict = {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    if tokens is not None:
        chunk["usage"] = {
            "prompt_tokens": 7,
            "completion_tokens": tokens,
            "total_tokens": 7 + tokens,
        }
    return chunk


def _run(pieces: list[bytes], api: str = "completions", status: int = 200, **plan_kw):
    seen: dict = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        seen["body"] = json.loads(request.content)
        return httpx.Response(status, stream=_Chunks(pieces))

    plan = Plan(base_url="http://127.0.0.1:9", api=api, **plan_kw)  # type: ignore[arg-type]

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(
            base_url=plan.base_url, transport=httpx.MockTransport(handler)
        ) as client:
            rec = RequestRecord(index=0, context_tokens=7)
            return await send_request(
                client, plan=plan, model="m", prompt="hello", record=rec, clock_origin=0.0
            )

    return asyncio.run(go()), seen


def test_multi_token_chunks_usage_chunk_and_done() -> None:
    pieces = [
        _sse(_completion("Hel", 1)),
        _sse(_completion("lo wor", 4)),  # 3 tokens in one chunk (speculation)
        _sse(_completion("ld!", 6, "length")),  # 2 tokens
        _sse(
            {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 6}}
        ),
        _sse(b"[DONE]"),
    ]
    rec, seen = _run(pieces)
    assert rec.error is None
    assert seen["path"] == "/v1/completions"
    assert seen["body"]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert rec.output_tokens == 6
    assert rec.prompt_tokens == 7
    assert rec.chunk_tokens == [1, 3, 2]
    assert len(rec.chunk_times) == 3
    assert rec.ttft_s == rec.chunk_times[0]
    assert rec.e2e_s == rec.chunk_times[-1]
    assert rec.ttft_s > 0
    assert rec.e2e_s > rec.ttft_s
    assert rec.finish_reason == "length"


def test_two_events_in_one_network_read_are_one_arrival() -> None:
    """Events a read brings together arrived together: one chunk with all their tokens
    (the last event's cumulative usage), not a second chunk 0 s after the first."""
    both = _sse(_completion("a", 1)) + _sse(_completion("b", 3))
    final = _sse({"choices": [], "usage": {"completion_tokens": 3}}) + _sse(b"[DONE]")
    rec, _ = _run([both[:10], both[10:], final[:5], final[5:]])
    assert rec.error is None
    assert rec.chunk_tokens == [3]
    assert rec.ttft_s == rec.e2e_s
    assert rec.output_tokens == 3
    # without usage in every chunk, each event is read on its own (tokens unknown)
    rec, _ = _run([both, final], continuous_usage=False)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2]
    assert rec.output_tokens == 3


def test_usage_only_at_end_gives_unknown_chunk_sizes() -> None:
    pieces = [
        _sse(_completion("a", None)),
        _sse(_completion("bc", None)),
        _sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),
        _sse(b"[DONE]"),
    ]
    rec, _ = _run(pieces, continuous_usage=False)
    assert rec.error is None
    assert rec.chunk_tokens == [None, None]
    assert rec.output_tokens == 5


def test_missing_usage_is_an_error_not_the_requested_length() -> None:
    pieces = [_sse(_completion("a", None)), _sse(_completion("b", None)), _sse(b"[DONE]")]
    rec, _ = _run(pieces, output_len=2)
    assert rec.error is not None
    assert "server sent no usage" in rec.error
    assert rec.output_tokens is None


def test_stream_without_done_is_truncated() -> None:
    rec, _ = _run([_sse(_completion("a", 1))])
    assert rec.error == "truncated stream: ended without data: [DONE]"


def test_http_error_status_is_recorded() -> None:
    rec, _ = _run([b'{"error": "overloaded"}'], status=503)
    assert rec.http_status == 503
    assert rec.error is not None
    assert rec.error.startswith("HTTP 503: ")
    assert "overloaded" in rec.error


def test_error_object_inside_stream() -> None:
    pieces = [_sse(_completion("a", 1)), _sse({"error": {"message": "engine dead"}})]
    rec, _ = _run(pieces)
    assert rec.error == "server error in stream: engine dead"


def test_chat_role_chunk_is_not_content() -> None:
    def chat(delta: dict, tokens: int) -> bytes:
        return _sse(
            {
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                "usage": {"completion_tokens": tokens},
            }
        )

    pieces = [
        chat({"role": "assistant", "content": ""}, 0),
        chat({"content": "Hi"}, 1),
        chat({"content": " there"}, 3),
        _sse({"choices": [], "usage": {"completion_tokens": 3}}),
        _sse(b"[DONE]"),
    ]
    rec, seen = _run(pieces, api="chat")
    assert rec.error is None
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"]["messages"] == [{"role": "user", "content": "hello"}]
    assert rec.chunk_tokens == [1, 2]
    assert rec.output_tokens == 3


def test_sglang_generate_meta_info_and_spec_fields() -> None:
    def gen(text: str, tokens: int, final: bool = False) -> bytes:
        meta: dict = {"prompt_tokens": 5, "completion_tokens": tokens, "spec_verify_ct": tokens}
        if final:
            meta.update(
                {
                    "spec_verify_ct": 3,
                    "spec_accept_histogram": [1, 1, 1],
                    "finish_reason": {"type": "length"},
                }
            )
        return _sse({"text": text, "meta_info": meta})

    pieces = [gen("a", 1), gen("abc", 3), gen("abcdef", 6, final=True), _sse(b"[DONE]")]
    rec, seen = _run(pieces, api="sglang-generate")
    assert rec.error is None
    assert seen["path"] == "/generate"
    assert seen["body"]["sampling_params"] == {"max_new_tokens": 256}
    assert rec.chunk_tokens == [1, 2, 3]
    assert rec.output_tokens == 6
    assert rec.finish_reason == "length"
    assert rec.spec == {"spec_verify_ct": 3, "spec_accept_histogram": [1, 1, 1]}


def test_sglang_without_meta_info_is_an_error() -> None:
    rec, _ = _run([_sse({"text": "abc"}), _sse(b"[DONE]")], api="sglang-generate")
    assert rec.error == "server sent no meta_info.completion_tokens"


def test_sampling_opt_ins_are_off_by_default() -> None:
    body = build_payload(Plan(base_url="http://127.0.0.1:1"), "m", "p")
    assert "temperature" not in body
    assert "ignore_eos" not in body
    body = build_payload(
        Plan(base_url="http://127.0.0.1:1", temperature=0.0, ignore_eos=True), "m", "p"
    )
    assert body["temperature"] == 0.0
    assert body["ignore_eos"] is True


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused"), "connection error: refused"),
        (httpx.ReadTimeout("slow"), "timeout: ReadTimeout after 300 s without data"),
        (httpx.RemoteProtocolError("peer closed"), "connection error: peer closed"),
    ],
)
def test_transport_failures_have_reasons(exc: Exception, expected: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    plan = Plan(base_url="http://127.0.0.1:9")

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(
            base_url=plan.base_url, transport=httpx.MockTransport(handler)
        ) as client:
            rec = RequestRecord(index=0, context_tokens=1)
            return await send_request(
                client, plan=plan, model="m", prompt="x", record=rec, clock_origin=0.0
            )

    rec = asyncio.run(go())
    assert rec.error is not None
    assert rec.error.startswith(expected)
    assert rec.done_s is not None


def test_crlf_events_and_comment_lines() -> None:
    crlf = (_sse(_completion("a", 1)) + _sse(_completion("bc", 3))).replace(b"\n", b"\r\n")
    pieces = [
        b": keep-alive ping\n\n",
        crlf[:7],
        crlf[7:],
        b"event: message\ndata: " + json.dumps(_completion("d", 4)).encode() + b"\n\n",
        _sse({"choices": [], "usage": {"completion_tokens": 4}}),
        _sse(b"[DONE]"),
    ]
    rec, _ = _run(pieces)
    assert rec.error is None
    assert rec.chunk_tokens == [3, 1]  # "a" and "bc" came in one read: one arrival
    assert rec.output_tokens == 4


@pytest.mark.parametrize(
    "exc", [ValueError("invalid literal for int() with base 16: b'zz'"), KeyError("usage")]
)
def test_any_fault_of_one_request_is_a_failed_request(exc: Exception) -> None:
    """A transport or parser bug ends one request (its reason kept), never the run."""

    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield _sse(_completion("a", 1))
            raise exc

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Broken())

    plan = Plan(base_url="http://127.0.0.1:9")

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(
            base_url=plan.base_url, transport=httpx.MockTransport(handler)
        ) as client:
            rec = RequestRecord(index=0, context_tokens=1)
            return await send_request(
                client, plan=plan, model="m", prompt="x", record=rec, clock_origin=0.0
            )

    rec = asyncio.run(go())
    assert rec.error == f"client error: {type(exc).__name__}: {exc}"
    assert rec.done_s is not None


def test_transport_faults_map_to_httpx_reasons(synthetic) -> None:
    """The real transport under httpx against the synthetic server's faults."""
    from specops.bench.client import make_client  # noqa: PLC0415

    cut = synthetic(die_after_chunks=2)
    crashed = synthetic(exit_after_requests=0)
    ok = synthetic(tokens_per_chunk=2, chunk_delay_s=0.01)  # one read per chunk

    async def one(url: str) -> RequestRecord:
        plan = Plan(base_url=url, output_len=8)
        async with make_client(plan, 2) as client:
            rec = RequestRecord(index=0, context_tokens=1)
            return await send_request(
                client, plan=plan, model="synthetic", prompt="x", record=rec, clock_origin=0.0
            )

    good = asyncio.run(one(ok.url))
    assert good.error is None
    assert good.output_tokens == 8
    assert good.chunk_tokens == [2, 2, 2, 2]
    truncated = asyncio.run(one(cut.url))
    assert truncated.error is not None
    assert truncated.error.startswith("truncated stream: peer closed connection")
    gone = asyncio.run(one(crashed.url))  # the server drops the connection, then stops
    assert gone.error is not None
    assert gone.error.startswith("connection error: "), gone.error
    refused = asyncio.run(one(crashed.url))  # nothing listens any more
    assert refused.error is not None
    assert refused.error.startswith("connection error: "), refused.error
