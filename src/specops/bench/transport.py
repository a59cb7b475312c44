"""A lean HTTP/1.1 transport for ``httpx.AsyncClient``, built for many SSE streams.

httpx stays the API (one ``httpx.AsyncClient`` per run, explicit ``httpx.Timeout`` and
``httpx.Limits``, ``httpx.MockTransport`` in tests); this transport does the wire. Why
hand-written: measured (``scripts/experiments/bench-client-cost.py``, docs/benchmark.md,
"Client"), httpx's own transport (httpcore + h11, pure Python) spends ~40 us of client
CPU per streamed token at concurrency 100, because every HTTP chunk becomes an h11
event and a trip through the connection pool; aiohttp under httpx (tried in this
issue's branch) ~1.5x this transport's whole-run CPU, its parser handing each HTTP
chunk to Python on its own, which left the benchmark no cheaper than the peer it is
measured against. This transport reads whatever bytes the socket has, decodes chunked
framing in bulk and hands the client one block per read, so the client parses one
event per read (``client._fast_block``).

It keeps httpx's contract: the client still sets ``httpx.Timeout`` (connect, read,
write, pool are honoured per operation) and this transport enforces the pool size of
an ``httpx.Limits``; errors are httpx's (``ConnectError``, ``ConnectTimeout``,
``ReadTimeout``, ``PoolTimeout``, ``RemoteProtocolError``, ``ReadError``). It speaks
HTTP/1.1 over TCP or TLS with keep-alive; no proxies, no HTTP/2, no content decoding
(it asks for ``identity``). A request whose reused keep-alive connection the server had
closed while idle is sent once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["StreamingTransport"]

_Key = tuple[str, str, int]


class _Conn:
    __slots__ = ("idle_since", "key", "reader", "writer")

    def __init__(
        self, key: _Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.key = key
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    value: Any = request.extensions.get("timeout") or {}
    return {k: value.get(k) for k in ("connect", "read", "write", "pool")}


class _Body(httpx.AsyncByteStream):
    """The response body: yields every decoded byte the socket had, per read."""

    def __init__(
        self,
        transport: StreamingTransport,
        conn: _Conn,
        *,
        buffer: bytes,
        length: int | None,
        chunked: bool,
        keep_alive: bool,
        read_timeout: float | None,
    ) -> None:
        self._t = transport
        self._conn = conn
        self._buf = buffer
        self._length = length
        self._chunked = chunked
        self._keep = keep_alive
        self._read_timeout = read_timeout
        self._complete = False
        self._released = False

    async def _read(self) -> bytes:
        try:
            async with asyncio.timeout(self._read_timeout):
                data = await self._conn.reader.read(262144)
        except TimeoutError:
            raise httpx.ReadTimeout("timed out waiting for response data") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._chunked:
            async for block in self._iter_chunked():
                yield block
        elif self._length is not None:
            remaining = self._length
            if self._buf:
                part, self._buf = self._buf[:remaining], b""
                remaining -= len(part)
                yield part
            while remaining > 0:
                data = await self._read()
                if not data:
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body"
                    )
                remaining -= len(data)
                yield data
            self._complete = True
        else:
            if self._buf:
                yield self._buf
                self._buf = b""
            while data := await self._read():
                yield data
            self._keep = False
            self._complete = True
        await self.aclose()

    async def _iter_chunked(self) -> AsyncIterator[bytes]:
        buf = self._buf
        self._buf = b""
        pos = 0
        out: list[bytes] = []
        while True:
            # decode every complete chunk in the buffer
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError("bad chunk size in chunked body") from None
                if size == 0:
                    end = buf.find(b"\r\n\r\n", eol)
                    if end < 0 and buf[eol + 2 : eol + 4] != b"\r\n":
                        break  # trailer not complete yet
                    if out:
                        yield b"".join(out)
                    self._complete = True
                    return
                start = eol + 2
                stop = start + size
                if len(buf) < stop + 2:
                    break
                out.append(buf[start:stop])
                pos = stop + 2
            if out:
                yield out[0] if len(out) == 1 else b"".join(out)
                out = []
            data = await self._read()
            if not data:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: "
                    "incomplete chunked read"
                )
            buf = buf[pos:] + data
            pos = 0

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        self._t._release(self._conn, reuse=self._complete and self._keep)


class StreamingTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 keep-alive transport with a bounded connection pool."""

    def __init__(self, limits: httpx.Limits, verify: bool | ssl.SSLContext = True) -> None:
        self._max = limits.max_connections or 1 << 30
        self._max_idle = (
            limits.max_keepalive_connections
            if limits.max_keepalive_connections is not None
            else self._max
        )
        # Idle connections older than this are closed, not reused: the server (uvicorn's
        # 5 s keep-alive for vLLM and SGLang) may have closed them already.
        self._expiry = limits.keepalive_expiry
        self._slots = asyncio.Semaphore(self._max)
        self._idle: dict[_Key, list[_Conn]] = {}
        self._open: set[_Conn] = set()
        if isinstance(verify, ssl.SSLContext):
            self._ssl: ssl.SSLContext | None = verify
        else:
            self._ssl = ssl.create_default_context() if verify else None
            if self._ssl is None:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                self._ssl = ctx

    async def _connect(self, key: _Key, timeout: float | None) -> _Conn:
        scheme, host, port = key
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self._ssl if scheme == "https" else None,
                    limit=1 << 20,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        conn = _Conn(key, reader, writer)
        self._open.add(conn)
        return conn

    def _release(self, conn: _Conn, reuse: bool) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if reuse and len(idle) < self._max_idle and not conn.reader.at_eof():
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()
            self._open.discard(conn)
        self._slots.release()

    def _pop_idle(self, key: _Key) -> _Conn | None:
        """The most recently used idle connection that may still be open, if any."""
        idle = self._idle.get(key) or []
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            stale = self._expiry is not None and now - conn.idle_since > self._expiry
            if stale or conn.reader.at_eof():
                conn.close()
                self._open.discard(conn)
                continue
            return conn
        return None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        key: _Key = (url.scheme, url.host, port)
        t = _timeouts(request)
        try:
            async with asyncio.timeout(t["pool"]):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection in the pool") from None
        try:
            return await self._send(request, key, t)
        except BaseException:
            self._slots.release()
            raise

    async def _send(
        self, request: httpx.Request, key: _Key, t: dict[str, float | None]
    ) -> httpx.Response:
        body = await request.aread()
        head = [f"{request.method} {request.url.raw_path.decode('ascii')} HTTP/1.1"]
        for name, value in request.headers.raw:
            lname = name.lower()
            if lname in (b"accept-encoding", b"content-length", b"transfer-encoding"):
                continue
            head.append(f"{name.decode('latin-1')}: {value.decode('latin-1')}")
        head.append("Accept-Encoding: identity")
        if body or request.method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            # A retry never takes another idle connection: it may be as stale as the first.
            conn = self._pop_idle(key) if attempt == 0 else None
            reused = conn is not None
            conn = conn or await self._connect(key, t["connect"])
            try:
                conn.writer.write(payload)
                async with asyncio.timeout(t["write"]):
                    await conn.writer.drain()
                async with asyncio.timeout(t["read"]):
                    raw_head = await conn.reader.readuntil(b"\r\n\r\n")
            except TimeoutError:
                conn.close()
                self._open.discard(conn)
                raise httpx.ReadTimeout("timed out waiting for the response head") from None
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                conn.close()
                self._open.discard(conn)
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: retry once
                if isinstance(exc, asyncio.IncompleteReadError):
                    raise httpx.RemoteProtocolError(
                        "server disconnected without sending a response"
                    ) from None
                raise httpx.ReadError(str(exc) or type(exc).__name__) from None
            except asyncio.LimitOverrunError:
                conn.close()
                self._open.discard(conn)
                raise httpx.RemoteProtocolError("response head too large") from None
            return self._response(request, conn, raw_head, t["read"])
        raise httpx.RemoteProtocolError("server disconnected without sending a response")

    def _response(
        self, request: httpx.Request, conn: _Conn, raw_head: bytes, read_timeout: float | None
    ) -> httpx.Response:
        lines = raw_head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            conn.close()
            raise httpx.RemoteProtocolError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        keep = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            value = value.strip()
            lname = name.strip().lower()
            headers.append((name.strip(), value))
            if lname == b"content-length":
                length = int(value)
            elif lname == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lname == b"connection":
                keep = value.lower() != b"close"
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
        stream = _Body(
            self,
            conn,
            buffer=b"",
            length=length,
            chunked=chunked,
            keep_alive=keep,
            read_timeout=read_timeout,
        )
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            request=request,
            extensions={"http_version": parts[0]},
        )

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
