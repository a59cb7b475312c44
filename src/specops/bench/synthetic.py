"""A fast synthetic streaming server on 127.0.0.1 for client-cost and fault tests.

It speaks just enough HTTP/1.1 (keep-alive, chunked SSE) to look like vLLM's
OpenAI server and SGLang's ``/generate``: ``/v1/models`` (with ``max_model_len``),
``/version``, ``/metrics`` (spec_decode counters that move with every chunk),
``/tokenize`` and ``/detokenize`` (one token per UTF-8 byte, so sizes are exact),
``/v1/completions``, ``/v1/chat/completions`` and ``/generate``.

Faults, set per server: ``die_after_chunks`` (abort the connection mid-stream),
``no_usage`` (never send usage), ``chunk_delay_s`` (slow stream), ``status`` (answer
every generation with that HTTP status), ``exit_after_requests`` (the whole server
stops listening and drops every connection, as a crashed process would).

Run it standalone with ``python -m specops.bench.synthetic --port 0``; it prints
``PORT <n>`` once listening. It is test equipment, not a model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["SyntheticConfig", "SyntheticServer", "main"]


@dataclass
class SyntheticConfig:
    model: str = "synthetic"
    max_model_len: int = 32768
    tokens_per_chunk: int = 4  # tokens per SSE chunk (like speculative decoding)
    output_tokens: int | None = None  # None: honour max_tokens
    first_delay_s: float = 0.0  # before the first chunk (prefill)
    chunk_delay_s: float = 0.0  # between chunks
    num_speculative_tokens: int = 4
    die_after_chunks: int | None = None
    no_usage: bool = False
    status: int | None = None
    exit_after_requests: int | None = None
    version: str = "synthetic-1"  # what /version answers (an engine upgrade, in tests)
    # Its load as vLLM reports it: at most max_running run, the rest wait; a request that
    # arrives to find max_running running counts one preemption; the KV cache holds
    # kv_blocks x block_size tokens, each running request taking kv_tokens_per_request.
    max_running: int = 256
    kv_blocks: int = 1024
    block_size: int = 16
    kv_tokens_per_request: int = 512


_CHAT_OVERHEAD = 10  # "template" tokens a chat prompt adds


class SyntheticServer:
    """The server; ``start()`` runs it on a background thread and returns the port."""

    def __init__(self, config: SyntheticConfig | None = None) -> None:
        self.config = config or SyntheticConfig()
        self.requests = 0
        self.drafts = 0
        self.accepted = 0
        self.per_pos = [0] * self.config.num_speculative_tokens
        self.prompt_lengths: list[int] = []  # prompt tokens of each generation, as it came
        self.in_flight = 0
        self.preemptions = 0
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    # -- lifecycle -----------------------------------------------------------------
    async def serve(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self, port: int = 0) -> int:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.serve(port))
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="synthetic-sse", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.port

    def _crash(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        loop.call_soon_threadsafe(self._crash)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- HTTP ----------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                keep = await self._route(method, path, body, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _json(self, writer: asyncio.StreamWriter, status: int, data: object) -> bool:
        payload = json.dumps(data).encode() if not isinstance(data, bytes) else data
        ctype = b"application/json" if not isinstance(data, bytes) else b"text/plain"
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, ctype, len(payload))
            + payload
        )
        await writer.drain()
        return True

    async def _route(  # noqa: PLR0911 - one return per route
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        cfg = self.config
        if method == "GET" and path == "/v1/models":
            return await self._json(
                writer,
                200,
                {"object": "list", "data": [{"id": cfg.model, "max_model_len": cfg.max_model_len}]},
            )
        if method == "GET" and path == "/version":
            return await self._json(writer, 200, {"version": cfg.version})
        if method == "GET" and path in ("/health", "/ping"):
            return await self._json(writer, 200, {})
        if method == "GET" and path == "/metrics":
            return await self._json(writer, 200, self._metrics().encode())
        if method == "POST" and path == "/tokenize":
            req = json.loads(body)
            if "messages" in req:
                text = "".join(m["content"] for m in req["messages"])
                ids = list(text.encode())
                return await self._json(writer, 200, {"count": len(ids) + _CHAT_OVERHEAD})
            ids = list(req["prompt"].encode())
            return await self._json(writer, 200, {"tokens": ids, "count": len(ids)})
        if method == "POST" and path == "/detokenize":
            req = json.loads(body)
            text = bytes(req["tokens"]).decode("utf-8", "replace")
            return await self._json(writer, 200, {"prompt": text})
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions", "/generate"):
            return await self._generate(path, json.loads(body), writer)
        return await self._json(writer, 404, {"error": {"message": f"no route {path}"}})

    def _load_lines(self, labels: str) -> list[str]:
        cfg = self.config
        running = min(self.in_flight, cfg.max_running)
        usage = min(1.0, running * cfg.kv_tokens_per_request / (cfg.kv_blocks * cfg.block_size))
        return [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{labels} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{labels} {max(self.in_flight - cfg.max_running, 0)}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{labels} {usage}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{labels} {self.preemptions}",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{cfg.block_size}",engine="0",'
            f'num_gpu_blocks="{cfg.kv_blocks}"}} 1.0',
        ]

    def _metrics(self) -> str:
        labels = f'{{engine="0",model_name="{self.config.model}"}}'
        lines = [
            *self._load_lines(labels),
            "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts counter",
            f"vllm:spec_decode_num_drafts_total{labels} {self.drafts}",
            "# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.",
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f"vllm:spec_decode_num_draft_tokens_total{labels} "
            f"{self.drafts * self.config.num_speculative_tokens}",
            "# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.",
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f"vllm:spec_decode_num_accepted_tokens_total{labels} {self.accepted}",
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per position.",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        for pos, count in enumerate(self.per_pos):
            lines.append(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                f'{{engine="0",model_name="{self.config.model}",position="{pos}"}} {count}'
            )
        return "\n".join(lines) + "\n"

    def _count_draft(self, tokens: int) -> None:
        # a chunk of k tokens = one verify step that accepted k - 1 drafts
        accepted = min(max(tokens - 1, 0), self.config.num_speculative_tokens)
        self.drafts += 1
        self.accepted += accepted
        for pos in range(accepted):
            self.per_pos[pos] += 1

    async def _generate(self, path: str, req: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        if self.in_flight >= self.config.max_running:
            self.preemptions += 1
        self.in_flight += 1
        try:
            return await self._stream(path, req, writer)
        finally:
            self.in_flight -= 1

    async def _stream(  # noqa: PLR0912, PLR0915 - one flat stream loop, a branch per fault
        self, path: str, req: dict[str, Any], writer: asyncio.StreamWriter
    ) -> bool:
        cfg = self.config
        self.requests += 1
        if cfg.exit_after_requests is not None and self.requests > cfg.exit_after_requests:
            self._crash()
            return False
        if cfg.status is not None:
            return await self._json(writer, cfg.status, {"error": {"message": "synthetic fault"}})
        sglang = path == "/generate"
        chat = path == "/v1/chat/completions"
        if sglang:
            prompt = req.get("text", "")
            max_tokens = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
        else:
            max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
            prompt = (
                "".join(m["content"] for m in req["messages"]) if chat else req.get("prompt", "")
            )
        prompt_tokens = len(prompt.encode()) + (_CHAT_OVERHEAD if chat else 0)
        self.prompt_lengths.append(prompt_tokens)
        total = cfg.output_tokens if cfg.output_tokens is not None else max_tokens
        opts = req.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage")) and not cfg.no_usage
        continuous = bool(opts.get("continuous_usage_stats")) and not cfg.no_usage
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if cfg.first_delay_s:
            await asyncio.sleep(cfg.first_delay_s)
        sent = 0
        chunks = 0
        verify = 0
        hist = [0] * (cfg.num_speculative_tokens + 1)
        text_so_far: list[str] = []
        if chat:
            self._event(
                writer,
                '{"id":"chatcmpl-s","object":"chat.completion.chunk","created":0,'
                f'"model":"{cfg.model}","choices":[{{"index":0,"delta":{{"role":"assistant",'
                '"content":""},"finish_reason":null}]}',
            )
        while sent < total:
            k = min(cfg.tokens_per_chunk, total - sent)
            sent += k
            chunks += 1
            verify += 1
            hist[min(k - 1, cfg.num_speculative_tokens)] += 1
            self._count_draft(k)
            piece = " tok" * k
            finish = '"length"' if sent >= total else "null"
            usage = (
                f',"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":'
                f'{prompt_tokens + sent},"completion_tokens":{sent}}}'
                if continuous
                else ""
            )
            if sglang:
                text_so_far.append(piece)
                meta: dict[str, Any] = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": sent,
                    "finish_reason": {"type": "length"} if sent >= total else None,
                    "spec_verify_ct": verify,
                }
                if sent >= total:
                    meta["spec_accept_histogram"] = hist
                    meta["spec_accepted_drafts"] = sent - verify
                data = json.dumps({"text": "".join(text_so_far), "meta_info": meta})
            elif chat:
                data = (
                    '{"id":"chatcmpl-s","object":"chat.completion.chunk","created":0,'
                    f'"model":"{cfg.model}","choices":[{{"index":0,"delta":{{"content":'
                    f'"{piece}"}},"logprobs":null,"finish_reason":{finish}}}]{usage}}}'
                )
            else:
                data = (
                    '{"id":"cmpl-s","object":"text_completion","created":0,'
                    f'"model":"{cfg.model}","choices":[{{"index":0,"text":"{piece}",'
                    f'"logprobs":null,"finish_reason":{finish},"stop_reason":null}}]{usage}}}'
                )
            self._event(writer, data)
            if cfg.die_after_chunks is not None and chunks >= cfg.die_after_chunks:
                await writer.drain()
                writer.transport.abort()
                return False
            if cfg.chunk_delay_s:
                await writer.drain()
                await asyncio.sleep(cfg.chunk_delay_s)
            elif chunks % 8 == 0:
                await writer.drain()
        if include_usage and not sglang:
            obj = "chat.completion.chunk" if chat else "text_completion"
            self._event(
                writer,
                f'{{"id":"s","object":"{obj}","created":0,"model":"{cfg.model}","choices":[],'
                f'"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":'
                f'{prompt_tokens + sent},"completion_tokens":{sent}}}}}',
            )
        self._event(writer, "[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _event(writer: asyncio.StreamWriter, data: str) -> None:
        payload = b"data: " + data.encode() + b"\n\n"
        writer.write(b"%x\r\n" % len(payload) + payload + b"\r\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="synthetic SSE server on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="synthetic")
    parser.add_argument("--tokens-per-chunk", type=int, default=4)
    parser.add_argument("--chunk-delay-s", type=float, default=0.0)
    parser.add_argument("--first-delay-s", type=float, default=0.0)
    parser.add_argument("--max-model-len", type=int, default=32768)
    args = parser.parse_args(argv)
    server = SyntheticServer(
        SyntheticConfig(
            model=args.model,
            tokens_per_chunk=args.tokens_per_chunk,
            chunk_delay_s=args.chunk_delay_s,
            first_delay_s=args.first_delay_s,
            max_model_len=args.max_model_len,
        )
    )

    async def run() -> None:
        await server.serve(args.port)
        print(f"PORT {server.port}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
