"""``specops bench load`` (specops.bench.load) against real HTTP servers on 127.0.0.1
(bench's synthetic SSE server): a steady load, a server that goes away and comes back
(its outage: every failed request with its time, the span its clients saw), the same
with a client retry on the other target (retried, none failed), a command run beside
the load (its window's latency), the bounds, and the command line."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specops.bench.load import (
    Attempt,
    LoadSpec,
    outages,
    percentile,
    render,
    run_load,
    summarize,
)
from specops.bench.synthetic import SyntheticServer
from specops.cli import main
from specops.errors import ValidationError

Start = Callable[..., SyntheticServer]


def _spec(*urls: str, **kw: object) -> LoadSpec:
    base: dict[str, object] = {"targets": urls, "duration_s": 2.0, "rate": 20.0, "drain_s": 10}
    base.update(kw)
    return LoadSpec(**base)  # type: ignore[arg-type]


def test_a_steady_load_on_a_healthy_server_fails_nothing(synthetic: Start) -> None:
    server = synthetic(chunk_delay_s=0.002)
    report = asyncio.run(run_load(_spec(server.url, output_len=8)))
    s = summarize(report)
    assert s["model"] == "synthetic"  # from /v1/models
    assert 30 <= s["requests"] <= 45  # 20/s for 2 s (open loop)
    assert (s["failed"], s["retried"], s["skipped"]) == (0, 0, 0)
    assert s["ok"] == s["requests"] == server.requests
    assert s["latency"]["e2e_s"]["p50"] is not None
    assert s["outages"] == {}


def test_a_closed_loop_keeps_its_clients_busy(synthetic: Start) -> None:
    server = synthetic(chunk_delay_s=0.01)
    report = asyncio.run(run_load(_spec(server.url, rate=None, concurrency=3, output_len=8)))
    s = summarize(report)
    assert s["requests"] > 10
    assert s["failed"] == 0
    assert s["load"]["concurrency"] == 3


def _restart_later(server: SyntheticServer, after_requests: int, away_s: float) -> threading.Thread:
    """Stop ``server`` once it has answered ``after_requests`` (the load is running:
    a loaded machine may take seconds to start it), start it again ``away_s`` later."""
    port = server.port
    seen = server.requests

    def run() -> None:
        deadline = time.monotonic() + 30
        while server.requests - seen < after_requests and time.monotonic() < deadline:
            time.sleep(0.02)
        server.stop()
        time.sleep(away_s)
        server.start(port)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_server_that_goes_away_shows_each_failed_request_and_its_outage(
    synthetic: Start,
) -> None:
    server = synthetic(chunk_delay_s=0.001)
    other = synthetic(chunk_delay_s=0.001)
    t = _restart_later(server, 5, 1.5)
    report = asyncio.run(run_load(_spec(server.url, other.url, duration_s=4.0)))
    t.join()
    s = summarize(report)
    assert s["failed"] > 5
    assert s["per_target"][other.url]["failed"] == 0
    assert s["per_target"][server.url]["failed"] == s["failed"]
    for ev in s["failed_requests"]:
        (attempt,) = ev["attempts"]
        assert attempt["target"] == server.url
        # refused while away; the one in flight when it went, cut mid-stream
        assert attempt["error"].startswith(("connection error", "truncated stream"))
        assert attempt["sent_at"].endswith("+00:00")
    (span,) = s["outages"][server.url]
    assert span["failed"] == s["failed"]
    assert 1.0 <= span["seconds"] <= 3.0  # the server was away 1.5 s
    lines = render(s)
    assert any(line.startswith(f"outage of {server.url}: ") for line in lines)
    assert sum(line.startswith("failed request ") for line in lines) == s["failed"]


def test_a_retry_on_the_other_target_hides_nothing_from_the_report(synthetic: Start) -> None:
    server = synthetic()
    other = synthetic()
    t = _restart_later(server, 3, 1.0)
    report = asyncio.run(run_load(_spec(server.url, other.url, duration_s=2.5, retries=1)))
    t.join()
    s = summarize(report)
    assert s["failed"] == 0
    assert s["retried"] > 0
    for ev in s["retried_requests"]:
        first, second = ev["attempts"]
        assert (first["target"], first["error"] is not None) == (server.url, True)
        assert (second["target"], second["error"]) == (other.url, None)
    assert s["outages"][server.url]  # the target's own outage is still reported


def test_a_command_run_beside_the_load_gives_its_window(synthetic: Start) -> None:
    server = synthetic()
    cmd = [sys.executable, "-c", "import time; time.sleep(1.0)"]
    spec = _spec(server.url, duration_s=30, tail_s=0.5)
    start = time.monotonic()
    report = asyncio.run(run_load(spec, cmd))
    assert time.monotonic() - start < 10  # the command's end, not the duration, ended it
    s = summarize(report)
    assert s["command"]["rc"] == 0
    w = s["window"]
    assert 0.8 <= w["end_t"] - w["start_t"] <= 3
    assert 0 < w["requests"] < s["requests"]  # the tail's requests are outside it
    assert w["failed"] == 0


def test_the_open_loop_skips_what_its_in_flight_bound_does_not_allow(synthetic: Start) -> None:
    server = synthetic(first_delay_s=1.0)  # every request takes a second
    report = asyncio.run(run_load(_spec(server.url, rate=50, max_in_flight=5, duration_s=1.5)))
    s = summarize(report)
    assert s["requests"] <= 10
    assert s["skipped"] > 30


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"rate": None}, "--rate"),
        ({"concurrency": 2}, "--rate"),
        ({"rate": 10_000.0}, "--rate"),
        ({"duration_s": 0}, "--duration"),
        ({"duration_s": 10 * 86400}, "--duration"),
        ({"rate": None, "concurrency": 100_000}, "--concurrency"),
        ({"retries": 50}, "--retries"),
        ({"targets": ()}, "--base-url"),
    ],
)
def test_the_load_is_bounded(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        _spec("http://127.0.0.1:9", **kw).check()
    assert err.value.field == field


def test_outages_span_from_the_last_success_to_the_first_after() -> None:
    def at(t: float, ok: bool) -> Attempt:
        return Attempt(0, 0, "u", t, f"T{t}", error=None if ok else "connection error: x")

    spans = outages([at(0, True), at(1, True), at(2, False), at(3, False), at(5, True),
                     at(6, False)])  # fmt: skip
    first, last = spans["u"]
    assert (first["failed"], first["seconds"], first["first_failed_at"]) == (2, 4.0, "T2")
    assert (last["failed"], last["seconds"]) == (1, 1.0)  # never answered again: to itself


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_the_command_line_writes_every_attempt_and_exits_1_on_a_failure(
    synthetic: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = synthetic()
    out = tmp_path / "load"
    rc = main(["bench", "load", "--base-url", server.url, "--base-url", "http://127.0.0.1:9",
               "--rate", "10", "--duration", "1", "--out", str(out), "--json"])  # fmt: skip
    said = capsys.readouterr()
    assert rc == 1, said.err
    summary = json.loads(said.out)
    assert summary["failed"] == summary["per_target"]["http://127.0.0.1:9"]["failed"] > 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == summary["requests"]
    assert json.loads((out / "load.json").read_text()) == summary
    rc = main(["bench", "load", "--base-url", server.url, "--concurrency", "1",
               "--duration", "5", "--", sys.executable, "-c", "pass"])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0
    assert "command: rc 0 after" in text
    assert "during it (" in text
