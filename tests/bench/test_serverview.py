"""The server's view: load and capacity read by the engine descriptor's names from the
engines' recorded answers, GPU power from nvidia-smi, per cell in the results and the
report."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import stat
from pathlib import Path

import pytest
from plugins.scripts import REPO

from specops.bench.plan import plan_from_mapping
from specops.bench.report import write_report
from specops.bench.results import load_results
from specops.bench.runner import run_plan
from specops.bench.serverview import capacity, gpu_sample, parse_gpu, parse_load

FIX = REPO / "tests" / "fixtures"
VLLM_METRICS = (FIX / "tune" / "vllm-0.32.0-cpu-metrics.txt").read_text()
SGLANG_INFO = json.loads(
    (FIX / "gpu-serving" / "h200-sglang-2026-12-03-run2" / "server-info-ngram.json").read_text()
)


def test_vllm_load_and_capacity_by_the_descriptors_names() -> None:
    load = parse_load(VLLM_METRICS, "vllm-cpu")
    assert (load.queued, load.running, load.kv_usage, load.preemptions) == (0.0, 0.0, 0.0, 0.0)
    # vLLM 0.32's cache_config_info label: 2,097,152 KV tokens
    assert capacity("vllm-cpu", None, VLLM_METRICS) == {"max_total_tokens": 2097152}
    # an engine the bench does not know is read with every engine's names
    assert parse_load(VLLM_METRICS, "unknown").running == 0.0


def test_sglang_capacity_from_its_server_info() -> None:
    """The H200's SGLang 0.5.11 server: 48 running at most, 3,555,950 KV tokens."""
    assert capacity("sglang", SGLANG_INFO) == {
        "max_running_requests": 48, "max_total_tokens": 3555950,
    }  # fmt: skip
    assert capacity("sglang", {}) == {}


def test_nvidia_smi_lines_sum_power_and_average_utilisation(tmp_path: Path) -> None:
    sample = parse_gpu("119.52, 37\n121.48, 41\n[N/A], [N/A]\n", at=2.0)
    assert sample is not None
    assert (sample.power_w, sample.util_pct, sample.cards) == (241.0, 39.0, 2)
    assert parse_gpu("") is None
    smi = _fake_smi(tmp_path, "70.00, 5\n")
    got = gpu_sample(str(smi))
    assert got is not None
    assert (got.power_w, got.cards) == (70.0, 1)
    assert gpu_sample(str(tmp_path / "absent")) is None


def _fake_smi(tmp_path: Path, output: str) -> Path:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return smi


def test_each_cell_carries_the_servers_view(
    synthetic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synthetic server reports vLLM's load gauges (at most 2 running, the rest
    waiting; a request that finds 2 running counts a preemption); a stand-in nvidia-smi
    on PATH reports two cards at 150 W and 60 W."""
    smi = _fake_smi(tmp_path, "150.0, 80\\n60.0, 20\\n")
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    server = synthetic(max_running=2, kv_blocks=64, block_size=16, chunk_delay_s=0.01)
    plan = plan_from_mapping({
        "base_url": server.url, "concurrency": [1, 4], "context_lengths": [64],
        "output_len": 32, "requests_per_cell": 8, "waves_per_cell": 0, "warmup_per_cell": 0,
        "warmup_waves": 0, "sample_interval_s": 0.02,
    })  # fmt: skip
    before = server.preemptions
    results = asyncio.run(run_plan(plan))
    assert results.server.capacity == {"max_total_tokens": 64 * 16}
    for cell in results.cells:
        view = cell.server
        assert view is not None
        assert view["samples"] >= 1
        assert view["running_max"] <= min(cell.concurrency, 2)
        assert 0 <= view["kv_usage_max"] <= 1
        assert view["gpu_power_w_mean"] == 210.0
        assert view["gpu_util_pct_mean"] == 50.0
        assert view["gpu_cards"] == 2
    # the preemptions each cell saw are the server's counter over the cells
    assert sum(c.server["preemptions"] for c in results.cells) == server.preemptions - before
    c1 = results.cells[0]
    assert c1.server["preemptions"] == 0  # one at a time never finds two running
    path = results.save(tmp_path / "r" / "results.json")
    report = write_report(load_results(path), tmp_path / "r").read_text()
    assert "## The server's view" in report
    assert "Capacity the server reported: 1,024 KV-cache tokens." in report
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r" / "cells.csv").read_text())))
    assert rows[0]["gpu_power_w_mean"] == "210.0"


def test_off_it_reads_nothing(synthetic, tmp_path: Path) -> None:
    server = synthetic()
    plan = plan_from_mapping({
        "base_url": server.url, "concurrency": [2], "context_lengths": [64], "output_len": 8,
        "requests_per_cell": 2, "waves_per_cell": 0, "warmup_waves": 0, "sample_interval_s": 0,
    })  # fmt: skip
    results = asyncio.run(run_plan(plan))
    assert results.cells[0].server is None
    path = results.save(tmp_path / "results.json")
    assert "sampling was off" in write_report(load_results(path), tmp_path).read_text()
