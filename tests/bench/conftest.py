"""Fixtures for the benchmark tests: an in-process synthetic SSE server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from specops.bench.synthetic import SyntheticConfig, SyntheticServer


@pytest.fixture
def synthetic() -> Iterator[Callable[..., SyntheticServer]]:
    """Factory: ``synthetic(**config)`` starts a server on 127.0.0.1; all stop at teardown."""
    servers: list[SyntheticServer] = []

    def start(**kwargs: object) -> SyntheticServer:
        server = SyntheticServer(SyntheticConfig(**kwargs))  # type: ignore[arg-type]
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
