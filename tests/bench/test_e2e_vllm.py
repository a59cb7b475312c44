"""End to end against the real lab vLLM CPU server with ngram speculation.

The server fixture comes from ``tests/plugins/vllm_server.py`` (marks the test ``vllm``
and ``slow``). Checks: exact prompt sizes by the server's tokenizer, acceptance > 1
from counter deltas, chunk token counts that add up to usage, and every number of the
report's cells table re-derived from the raw per-request records.
"""

from __future__ import annotations

import asyncio
import json
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


def test_a_run_killed_mid_matrix_resumes_with_its_finished_cells(
    vllm_ngram_server, tmp_path: Path, capsys
) -> None:
    """SIGKILL (no chance to clean up) a real run against the real server after its first
    cells; --resume measures only the rest and keeps the finished cells as measured."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    from specops.cli import main  # noqa: PLC0415

    out = tmp_path / "runs"
    argv = [
        sys.executable, "-m", "specops.cli", "bench", "run", "--base-url",
        vllm_ngram_server.base_url, "--concurrency", "1,2", "--context-lengths", "64,96,128",
        "--output-len", "16", "--requests-per-cell", "3", "--waves-per-cell", "0",
        "--warmup-per-cell", "0", "--temperature", "0", "--out", str(out), "--json",
        "--no-report",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    killed_at = None
    while proc.poll() is None:
        found = list(out.glob("*/cells.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 2:
            proc.kill()
            killed_at = found[0].parent
            break
        time.sleep(0.05)
    proc.communicate(timeout=60)
    assert killed_at is not None, "the run ended before it could be killed"
    assert not (killed_at / "results.json").exists()  # killed: nothing was finished up
    kept = [json.loads(line) for line in (killed_at / "cells.jsonl").read_text().splitlines()
            if line.strip()]  # fmt: skip
    assert 2 <= len(kept) < 6

    assert main(["bench", "run", "--resume", str(killed_at), "--json", "--no-report"]) == 0
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
