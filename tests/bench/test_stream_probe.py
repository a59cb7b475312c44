"""scripts/experiments/stream-probe.py against two local servers that answer the same SSE stream,
one event per write with a pause between (paced) and all in one write (bunched): the
probe sees the difference at the socket, which is what it is for."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
EVENTS = [b'data: {"choices": [{"text": "x"}]}\n\n'] * 5 + [b"data: [DONE]\n\n"]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _load() -> ModuleType:
    return load_script("experiments/stream-probe.py")


def _serve(paced: bool) -> Iterator[str]:
    srv = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            seen.append(conn.recv(65536))
            if paced:
                conn.sendall(HEAD)
                for event in EVENTS:
                    time.sleep(0.05)
                    conn.sendall(event)
            else:
                conn.sendall(HEAD + b"".join(EVENTS))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    thread.join(timeout=10)
    srv.close()
    request = seen[0].split(b"\r\n\r\n", 1)
    assert request[0].startswith(b"POST /v1/completions HTTP/1.1")
    assert json.loads(request[1])["stream"] is True


@pytest.fixture
def paced() -> Iterator[str]:
    yield from _serve(paced=True)


@pytest.fixture
def bunched() -> Iterator[str]:
    yield from _serve(paced=False)


def test_a_paced_stream_arrives_in_pieces(paced: str) -> None:
    r = _load().probe(paced, "m", 8, None, 10.0)
    assert r["complete"], r
    assert r["events"] == len(EVENTS)
    assert r["reads"] >= 3, r["timeline"]  # events 50 ms apart do not arrive as one


def test_a_bunched_stream_arrives_as_one_read(bunched: str) -> None:
    r = _load().probe(bunched, "m", 8, None, 10.0)
    assert r["complete"], r
    assert r["events"] == len(EVENTS)
    assert r["reads"] == 1, r["timeline"]


def test_bad_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = _load()
    with pytest.raises(SystemExit):
        probe.main(["--base-url", "http://127.0.0.1:1", "--model", "m", "--attempts", "11"])
    assert "--attempts: 11 is not between 1 and 10" in capsys.readouterr().err
    key = tmp_path / "key"
    key.write_text("k\n")
    key.chmod(0o644)
    with pytest.raises(SystemExit, match=r"--api-key-file: .* readable by others"):
        probe.main(["--base-url", "http://127.0.0.1:1", "--model", "m", "--api-key-file", str(key)])
    with pytest.raises(SystemExit, match=r"--base-url: 'ftp://x' is not an http\(s\) URL"):
        probe.probe("ftp://x", "m", 8, None, 1.0)
