"""Fixture ``synthetic``: bench's in-process synthetic SSE server (bench and tune tests).

``synthetic(**config)`` starts a :class:`specops.bench.synthetic.SyntheticServer` on
127.0.0.1 with that :class:`SyntheticConfig` (``port=N``: on that port, e.g. a
"restarted" server where a stopped one was); every server started stops at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from specops.bench.synthetic import SyntheticConfig, SyntheticServer


@pytest.fixture
def synthetic() -> Iterator[Callable[..., SyntheticServer]]:
    servers: list[SyntheticServer] = []

    def start(port: int = 0, **kwargs: object) -> SyntheticServer:
        server = SyntheticServer(SyntheticConfig(**kwargs))  # type: ignore[arg-type]
        server.start(port)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
