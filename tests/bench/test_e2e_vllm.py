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
