"""An ``httpx.AsyncClient`` transport whose HTTP engine is aiohttp.

httpx stays the API the benchmark (and its tests, with ``httpx.MockTransport``) is
written against: one ``httpx.AsyncClient`` per run with an explicit ``httpx.Timeout``
and ``httpx.Limits``. The wire work -- connection pool, keep-alive, HTTP/1.1 parsing and
chunked decoding in C (llhttp), TLS -- is aiohttp's, a maintained library. Chosen by
measurement (``scripts/bench-client-cost.py``; the README's "Client" section has the
numbers): httpx's own transport (httpcore + h11, pure Python) costs ~37 us of client CPU
per streamed token at concurrency 100, this one ~5 us, about what a hand-written HTTP
transport cost, without the hand-written HTTP.

What this adapter adds to aiohttp: httpx's timeouts per request (connect, read, pool),
httpx's pool size, httpx's exception classes (``ConnectError``, ``ConnectTimeout``,
``ReadTimeout``, ``RemoteProtocolError``, ``ReadError``), and one retry of a request
whose *reused* keep-alive connection the server had closed while idle (aiohttp retries
only idempotent methods; a generation is a POST that the server never saw).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

__all__ = ["AiohttpTransport"]

_SKIP_HEADERS = frozenset({"content-length", "transfer-encoding", "host"})


_NO_RESPONSE = "server disconnected without sending a response"
_CUT_BODY = "peer closed connection without sending complete message body"

# (aiohttp exception, httpx exception), most specific first.
_MAP: tuple[tuple[type[BaseException], type[httpx.HTTPError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (TimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.ClientConnectionError, httpx.ReadError),
    (OSError, httpx.ReadError),
)


def _http_error(exc: BaseException, *, body: bool) -> httpx.HTTPError:
    """The httpx exception for an aiohttp one (``body``: raised while reading the body)."""
    message = str(exc) or type(exc).__name__
    for source, target in _MAP:
        if isinstance(exc, source):
            if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
                message = f"{_CUT_BODY if body else _NO_RESPONSE}: {message}"
            return target(message)
    return httpx.TransportError(f"{type(exc).__name__}: {message}")


class _Body(httpx.AsyncByteStream):
    """The response body: every block aiohttp has, as it arrives."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for block in self._response.content.iter_any():
                yield block
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _http_error(exc, body=True) from exc

    async def aclose(self) -> None:
        self._response.release()


async def _on_reuse(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object) -> None:
    del session, params
    ctx.trace_request_ctx.reused = True


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx transport on one aiohttp session (made in the running event loop)."""

    def __init__(self, limits: httpx.Limits, verify: bool | ssl.SSLContext = True) -> None:
        self._limits = limits
        self._ssl: bool | ssl.SSLContext = verify
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_on_reuse)
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry or 0,
            ssl=self._ssl,
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=True,
            trace_configs=[trace],
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            self._session = self._open()
        timeout: dict[str, Any] = request.extensions.get("timeout") or {}
        client_timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeout.get("pool"),
            sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
        )
        headers = [
            (k, v) for k, v in request.headers.multi_items() if k.lower() not in _SKIP_HEADERS
        ]
        body = await request.aread()
        for attempt in (0, 1):
            ctx = SimpleNamespace(reused=False)
            try:
                response = await self._session.request(
                    request.method,
                    str(request.url),
                    headers=headers,
                    data=body or None,
                    timeout=client_timeout,
                    allow_redirects=False,
                    trace_request_ctx=ctx,
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if (
                    ctx.reused
                    and attempt == 0
                    and not isinstance(exc, aiohttp.ClientConnectorError)
                ):
                    continue  # the server closed an idle keep-alive connection: once more
                raise _http_error(exc, body=False) from exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise _http_error(exc, body=False) from exc
            return httpx.Response(
                response.status,
                headers=[
                    (k, v) for k, v in response.raw_headers if k.lower() != b"content-encoding"
                ],
                stream=_Body(response),
                request=request,
                extensions={"http_version": b"HTTP/1.1"},
            )
        raise httpx.RemoteProtocolError(_NO_RESPONSE)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
