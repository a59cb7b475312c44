"""End to end against the real lab vLLM CPU server with ngram speculation.

The server fixture comes from ``tests/plugins/vllm_server.py`` (marks the test ``vllm``
and ``slow``). Checks: exact prompt sizes by the server's tokenizer, acceptance > 1
from counter deltas, chunk token counts that add up to usage, and every number of the
report's cells table re-derived from the raw per-request records.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

from bench_consistency import assert_report_consistent

from specops.bench.plan import plan_from_mapping
from specops.bench.report import write_report
from specops.bench.results import load_results
from specops.bench.runner import run_plan


def test_ngram_matrix_against_real_vllm(vllm_ngram_server, tmp_path: Path) -> None:
    server = vllm_ngram_server
    plan = plan_from_mapping(
        {
            "base_url": server.base_url,
            "concurrency": [1, 3],
            "context_lengths": [128, 600],
            "output_len": 48,
            "requests_per_cell": 6,
            "warmup_per_cell": 1,
            "sample_interval_s": 0.2,
            # opt-in greedy: the tiny random-weight model then falls into repeats that
            # n-gram lookup can draft; sampled output gives it nothing to propose
            "temperature": 0.0,
            "humaneval": {"enabled": True, "limit": 6, "max_tokens": 96},
        }
    )
    results = asyncio.run(run_plan(plan))
    assert results.server.engine == "vllm"
    assert results.server.engine_version is not None
    assert results.server.engine_version.startswith("0.32")
    assert results.server.model == server.model_name
    assert results.server.spec_counters
    assert len(results.cells) == 4
    multi_token_chunks = 0
    for cell in results.cells:
        assert cell.status == "ok", cell.stats.failure_reasons
        for rec in cell.records:
            assert rec.prompt_tokens == cell.context_tokens  # exact, by the server's count
            assert rec.output_tokens is not None
            assert 1 <= rec.output_tokens <= 48
            assert sum(t or 0 for t in rec.chunk_tokens) == rec.output_tokens
            multi_token_chunks += sum(1 for t in rec.chunk_tokens if t and t > 1)
        acc = cell.acceptance
        assert acc.source == "vllm-metrics"
        assert acc.mean_acceptance_length is not None
        assert acc.mean_acceptance_length > 1.0
        assert len(acc.per_position) == 3  # num_speculative_tokens 3
        assert acc.per_position == sorted(acc.per_position, reverse=True)
    assert multi_token_chunks > 0  # speculation shows up as several tokens per chunk
    # the warm-up reached every cell first; the server's own view of each cell, read by
    # the engine descriptor's names from the real server's metrics
    assert results.warmup is not None
    assert (results.warmup["cells"], results.warmup["failed"]) == (4, 0)
    assert results.server.capacity is not None
    assert results.server.capacity["max_total_tokens"] > 0  # cache_config_info
    for cell in results.cells:
        view = cell.server
        assert view is not None
        assert view["samples"] >= 1
        assert view["kv_usage_max"] is not None
        assert 0 <= view["kv_usage_max"] <= 1
        assert view["preemptions"] is not None

    correctness = results.correctness
    assert correctness is not None
    assert correctness["problems"] == 6
    assert correctness["generated"] == 6, correctness["generation_errors"]
    assert len(correctness["verdicts"]) == 6

    path = results.save(tmp_path / "results.json")
    report = write_report(load_results(path), tmp_path)
    assert_report_consistent(path, report)
    text = report.read_text()
    for cell in results.cells:
        assert f"| {cell.concurrency} | {cell.context_tokens} | vllm-metrics |" in text
    assert "HumanEval: " in text
    json.loads(path.read_text())  # valid JSON on disk


class _HoldAfter:
    """A TCP relay in front of the real server that lets ``let_through`` generation
    requests (``POST /v1/completions`` or chat) reach it and holds every later one unsent: the
    client then waits inside its next cell, however slow or fast this machine is, and the
    test kills it there. Everything else (``/tokenize``, ``/metrics``) passes."""

    MARKS = (b"POST /v1/completions ", b"POST /v1/chat/completions ")

    def __init__(self, upstream: str, let_through: int) -> None:
        from urllib.parse import urlsplit  # noqa: PLC0415

        up = urlsplit(upstream)
        self._upstream = (up.hostname or "127.0.0.1", up.port or 80)
        self._left = let_through
        self._lock = threading.Lock()
        self.held = threading.Event()
        self._release = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(self._upstream, timeout=60)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while chunk := src.recv(65536):
                asked = sum(chunk.count(m) for m in self.MARKS) if requests else 0
                if asked:
                    with self._lock:
                        self._left -= asked
                        over = self._left < 0
                    if over:
                        self.held.set()
                        self._release.wait(120)
                        return
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                sock.close()

    def let_all_through(self) -> None:
        with self._lock:
            self._left = 1 << 30
        self._release.set()  # the held request's connection closes: its client is gone

    def close(self) -> None:
        self._release.set()
        self._listener.close()


def test_a_run_killed_mid_matrix_resumes_with_its_finished_cells(
    vllm_ngram_server, tmp_path: Path, capsys
) -> None:
    """SIGKILL (no chance to clean up) a real run against the real server inside its third
    cell; --resume measures only the rest and keeps the finished cells as measured."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    from specops.cli import main  # noqa: PLC0415

    out = tmp_path / "runs"
    # two cells of three requests each reach the server; the third cell's first waits
    relay = _HoldAfter(vllm_ngram_server.base_url, let_through=6)
    argv = [
        sys.executable, "-m", "specops.cli", "bench", "run", "--base-url",
        relay.base_url, "--concurrency", "1,2", "--context-lengths", "64,96,128",
        "--output-len", "16", "--requests-per-cell", "3", "--waves-per-cell", "0",
        "--warmup-per-cell", "0", "--temperature", "0", "--out", str(out), "--json",
        "--no-report",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and not relay.held.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        found = list(out.glob("*/cells.jsonl"))
        held = relay.held.is_set()
        proc.kill()
        _, stderr = proc.communicate(timeout=60)
        assert held, f"the run never asked for a 7th generation: rc {proc.returncode}\n{stderr}"
        assert len(found) == 1, found
        killed_at = found[0].parent
        assert not (killed_at / "results.json").exists()  # killed: nothing was finished up
        kept = [json.loads(line) for line in (killed_at / "cells.jsonl").read_text().splitlines()
                if line.strip()]  # fmt: skip
        assert [(c["concurrency"], c["context_tokens"]) for c in kept] == [(1, 64), (2, 64)]

        # the resumed run keeps its plan (the relay's address): from now on all pass
        relay.let_all_through()
        assert main(["bench", "run", "--resume", str(killed_at), "--json", "--no-report"]) == 0
    finally:
        relay.close()
    capsys.readouterr()
    done = load_results(killed_at / "results.json")
    assert [(c.concurrency, c.context_tokens) for c in done.cells] == [
        (1, 64), (2, 64), (1, 96), (2, 96), (1, 128), (2, 128)
    ]  # fmt: skip
    assert all(c.status == "ok" for c in done.cells)
    for before in kept:
        again = next(c for c in done.cells if c.concurrency == before["concurrency"]
                     and c.context_tokens == before["context_tokens"])  # fmt: skip
        assert again.to_dict() == before  # kept as measured, not measured again
