"""The benchmark's transport never sends a request on a connection the server has idled out.

Seen on a real vLLM 0.20.1 on an H200 (tests/fixtures/gpu-serving/): a long
single-stream cell (C=1 at 8K context, 24 s) left the pool's other connections idle past
uvicorn's 5 s keep-alive; the next cell's prompt building took one of them (the server
had closed it), retried on another idle one (closed too) and every request of the cell
failed with "server disconnected without sending a response". The transport now drops
idle connections older than ``keepalive_expiry`` and retries on a new connection.

The server here is a plain asyncio HTTP/1.1 server that closes a connection idle for
``IDLE_S`` (uvicorn's ``timeout_keep_alive`` behaviour), on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from specops.bench.transport import StreamingTransport

IDLE_S = 0.2


async def _keepalive_server() -> tuple[asyncio.Server, dict[str, int]]:
    seen = {"requests": 0, "connections": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_S):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (TimeoutError, asyncio.IncompleteReadError):
                    return  # idle past the keep-alive: close, as uvicorn does
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                seen["requests"] += 1
                await asyncio.sleep(0.02)  # the requests of one wave overlap
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen


@pytest.mark.parametrize("expiry", [0.1, None])
def test_no_request_on_an_idled_out_connection(expiry: float | None) -> None:
    """A wave of 4 leaves 4 idle connections; after the server closed them, the next
    wave succeeds: expired ones are never reused (expiry 0.1 s), and without an expiry
    the one retry goes to a new connection, not to another closed idle one."""

    async def scenario() -> dict[str, int]:
        server, seen = await _keepalive_server()
        port = server.sockets[0].getsockname()[1]
        limits = httpx.Limits(
            max_connections=8, max_keepalive_connections=8, keepalive_expiry=expiry
        )
        transport = StreamingTransport(limits)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=5
        ) as client:
            for _ in range(2):
                answers = await asyncio.gather(*(client.post("/x", json={}) for _ in range(4)))
                assert [a.text for a in answers] == ["ok"] * 4
                await asyncio.sleep(IDLE_S * 3)  # the server closes every idle connection
        server.close()
        await server.wait_closed()
        return seen

    seen = asyncio.run(scenario())
    assert seen["requests"] == 8, seen  # nothing was lost or sent twice
