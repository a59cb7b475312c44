"""The server tokenizer asks once more when a reused connection was closed under it."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from specops.bench.prompts import ServerTokenizer
from specops.errors import SpecopsError


async def _serve_dropping_first(drops: int) -> tuple[asyncio.Server, list[int]]:
    seen = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        seen[0] += 1
        if seen[0] <= drops:  # close without a response, as a server at its idle timeout
            writer.close()
            return
        body = json.dumps({"tokens": [1, 2, 3], "count": 3}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen


@pytest.mark.parametrize(("drops", "ok"), [(1, True), (2, False)])
def test_one_retry_after_a_dropped_connection(drops: int, ok: bool) -> None:
    async def scenario() -> None:
        server, seen = await _serve_dropping_first(drops)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            tok = ServerTokenizer(client, "m")
            if ok:
                assert await tok.encode("abc", special=False) == [1, 2, 3]
            else:
                with pytest.raises(httpx.RemoteProtocolError):
                    await tok.encode("abc", special=False)
        server.close()
        await server.wait_closed()
        assert seen[0] == 2, "one request, one retry, never more"

    asyncio.run(scenario())


async def _serve_body(body: bytes) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ({"prompt": "hi there"}, "hi there"),  # vLLM's /detokenize
        ({"text": "hi there"}, "hi there"),  # SGLang 0.5.11's (measured on the H200)
        ({"detokenized": "x"}, None),  # neither: a clear error naming both keys
    ],
)
def test_detokenize_reads_vllm_and_sglang_answers(answer: dict[str, str], text: str | None) -> None:
    async def scenario() -> None:
        server = await _serve_body(json.dumps(answer).encode())
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            tok = ServerTokenizer(client, "m")
            if text is not None:
                assert await tok.decode([1, 2]) == text
            else:
                with pytest.raises(SpecopsError, match="neither 'prompt' nor 'text'"):
                    await tok.decode([1, 2])
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
