"""Rollout decisions on real measurements: the smoke gate, the drain's idle check."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.engine.idle import (
    running_requests,
    wait_idle,
)

from specops.bench.compare import threshold_arg
from specops.bench.plan import plan_from_mapping
from specops.bench.results import Results
from specops.bench.runner import run_plan
from specops.errors import ValidationError
from specops.tune import output_gate
from specops.tune.rollout import load_records, overhead, overhead_table, smoke_gate, summary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"
PLAN = {"concurrency": [1, 2], "context_lengths": [64], "output_len": 32,
        "requests_per_cell": 4, "warmup_per_cell": 1}  # fmt: skip


def measure(synthetic, **config: object) -> Results:
    server = synthetic(**config)
    plan = plan_from_mapping({**PLAN, "base_url": f"http://127.0.0.1:{server.port}"})
    return asyncio.run(run_plan(plan))


def scaled(results: Results, factor: float) -> Results:
    """A copy of measured results with every cell's throughput times ``factor``: the
    gate decides on recorded numbers, not on how fast this machine is right now."""
    copy = Results.from_dict(results.to_dict())
    for cell in copy.cells:
        cell.stats = replace(cell.stats, output_tok_s=cell.stats.output_tok_s * factor)
    return copy


def test_gate_passes_same_speed_and_fails_a_slow_candidate(synthetic) -> None:
    base = measure(synthetic)
    assert all(c.stats.output_tok_s > 0 for c in base.cells)
    for factor in (1.0, 0.6, 1.5):  # within a 50 % drop, or faster
        ok = smoke_gate(base, scaled(base, factor), throughput_drop=0.5)
        assert ok.ok, (factor, ok.message)
    bad = smoke_gate(base, scaled(base, 0.4), throughput_drop=0.5)
    assert not bad.ok
    assert bad.gate == "throughput"
    assert "output_tok_s" in bad.message
    assert "-60%" in bad.message
    # off: a collapse is measured and reported but does not gate; failures still do
    off = smoke_gate(base, scaled(base, 0.1), throughput_drop=None)
    assert off.ok, off.message
    tp = [f for f in off.findings if f["metric"] == "output_tok_s"]
    assert tp
    assert all(f["note"] == "not gated" and f["change"] < -0.8 for f in tp)


def test_threshold_argument_takes_a_fraction_or_off() -> None:
    assert threshold_arg("0.25") == 0.25
    assert threshold_arg("off") is None
    for bad in ("-0.1", "fast"):
        with pytest.raises(argparse.ArgumentTypeError, match="or off"):
            threshold_arg(bad)


def test_gate_fails_on_failed_requests(synthetic) -> None:
    base = measure(synthetic)
    broken = measure(synthetic, status=503)
    result = smoke_gate(base, broken)
    assert not result.ok
    assert result.gate == "smoke-failures"


def test_gate_correctness_on_humaneval_pass_drop(synthetic) -> None:
    base = measure(synthetic)
    cand = measure(synthetic)
    base.correctness = {"passed": 10, "pass_at_1": 10 / 20, "problems": 20}
    cand.correctness = {"passed": 8, "pass_at_1": 8 / 20, "problems": 20}
    assert smoke_gate(base, cand, throughput_drop=0.9, max_pass_drop=2).ok
    result = smoke_gate(base, cand, throughput_drop=0.9, max_pass_drop=1)
    assert result.gate == "correctness"
    with pytest.raises(ValidationError, match="throughput_drop"):
        smoke_gate(base, cand, throughput_drop=0)


def test_running_requests_from_recorded_vllm_metrics() -> None:
    text = (FIXTURES / "vllm-0.32.0-cpu-metrics.txt").read_text()
    assert running_requests(text) == 0.0
    busy = text.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny-qwen"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="tiny-qwen"} 3.0',
    )
    assert running_requests(busy) == 3.0
    assert running_requests('sglang:num_running_reqs{tp_rank="0"} 2\n') == 2.0
    assert running_requests("# nothing here\nfoo 1\n") is None


def test_wait_idle_over_http_until_requests_finish() -> None:
    state = {"polls": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state["polls"] += 1
            body = f'vllm:num_requests_running{{engine="0"}} {max(0, 3 - state["polls"])}.0\n'
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = wait_idle(url, timeout=10, interval=0.05)
        assert result.idle
        assert result.polls == 3
        state["polls"] = -100
        stuck = wait_idle(url, timeout=0.3, interval=0.05)
        assert not stuck.idle
        assert stuck.running is not None
        assert stuck.running > 0
    finally:
        server.shutdown()
        server.server_close()


def test_records_summary(tmp_path: Path) -> None:
    for i, (outcome, gate) in enumerate([("changed", None), ("restored", "restart-readiness")]):
        (tmp_path / f"n{i}.json").write_text(json.dumps({
            "node": f"n{i}", "outcome": outcome, "failed_gate": gate, "message": "m",
            "started_at": f"2026-11-29T09:0{i}:00", "rollout_s": 60.0 + i,
            "engine_start_to_healthy_s": 55.0,
        }))  # fmt: skip
    records = load_records(tmp_path)
    assert [r["node"] for r in records] == ["n0", "n1"]
    table = summary(records)
    assert "| n0 | changed |  | 60.0 | 55.0 | 5.0 | m |" in table
    assert "| n1 | restored | restart-readiness |" in table


def test_overhead_leaves_out_what_the_engine_and_the_measurements_spend() -> None:
    record = {
        "node": "n0", "rollout_s": 42.1, "engine_start_to_healthy_s": 34.5,
        "engine_stop_s": 0.6, "ready_s": 1.5, "baseline_s": 0.0, "smoke_s": 0.8,
    }  # fmt: skip
    row = overhead(record)
    assert row is not None
    assert row["overhead"] == pytest.approx(7.6)
    assert row["orchestration"] == pytest.approx(7.6 - 0.6 - 1.5 - 0.8)
    lines = overhead_table([record])
    assert lines[1].split()[0] == "n0"
    assert lines[-1] == "worst orchestration 4.7 s (target <= 5 s)"
    # the output gate's decoding is a measurement too
    gated = overhead({**record, "rollout_s": 44.1, "output_gate_s": 2.0})
    assert gated is not None
    assert gated["output gate"] == 2.0
    assert gated["orchestration"] == pytest.approx(4.7)
    # a node gated on the server a stopped rollout had started: no restart to take out
    resumed = {**record, "node": "n1", "engine_start_to_healthy_s": None}
    assert overhead(resumed) is None
    both = overhead_table([record, resumed])
    assert [line.split()[0] for line in both[1:2]] == ["n0"]
    assert "not restarted by this rollout" in both[2]
    assert both[2].endswith(": n1")
    assert both[-1] == "worst orchestration 4.7 s (target <= 5 s)"
    assert overhead_table([resumed])[-1].endswith(": n1")


def test_rollout_report_shows_each_changed_node_roofline(synthetic, tmp_path: Path) -> None:
    import asyncio  # noqa: PLC0415

    from specops.bench.plan import plan_from_mapping  # noqa: PLC0415
    from specops.bench.runner import run_plan  # noqa: PLC0415

    server = synthetic(chunk_delay_s=0.002)
    plan = plan_from_mapping({"base_url": server.url, "concurrency": [1], "context_lengths": [32],
                              "output_len": 8, "requests_per_cell": 2, "warmup_per_cell": 0,
                              "roofline": {"gpu": "h200", "bytes_per_token": 1.6e10}})  # fmt: skip
    smoke = asyncio.run(run_plan(plan)).save(tmp_path / "smoke" / "results.json")
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    (nodes / "n0.json").write_text(json.dumps({
        "node": "n0", "outcome": "changed", "started_at": "1", "rollout_s": 9.0,
        "engine_start_to_healthy_s": 5.0, "smoke_results": str(smoke), "message": "ok",
    }))  # fmt: skip
    (nodes / "n1.json").write_text(json.dumps({
        "node": "n1", "outcome": "changed", "started_at": "2", "rollout_s": 9.0,
        "engine_start_to_healthy_s": 5.0, "message": "ok",
    }))  # fmt: skip
    text = summary(load_records(nodes))
    n0 = text.split("### n0", 1)[1].split("### n1", 1)[0]
    assert "NVIDIA H200: 1 card(s)" in n0
    assert "| 32 |" in n0
    assert "No roofline: no smoke benchmark results in the node's record" in text.split("### n1")[1]


def test_controller_output_gate_sends_the_plans_api_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollout's and the sweep's output gate dial a server that may have --api-key:
    the key the bench plan names (api_key_file 0600, or api_key_env) goes with every
    gate request; a key file others can read is refused, naming api_key_file."""
    key = tmp_path / "api-key"
    key.write_text("gate-k3y\n")
    key.chmod(0o600)
    assert output_gate.api_key_of({"api_key_file": str(key)}) == "gate-k3y"
    assert output_gate.api_key_of({}) is None
    monkeypatch.setenv("SPECOPS_TEST_KEY", "env-k3y")
    assert output_gate.api_key_of({"api_key_env": "SPECOPS_TEST_KEY"}) == "env-k3y"
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # /v1/models, as the engines' auth answers without a key
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == "Bearer gate-k3y"
            body = b'{"data": [{"id": "m"}]}' if ok else b'{"error": "Unauthorized"}'
            self.send_response(200 if ok else 401)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(RuntimeError, match="no served model listed"):
            output_gate.served_model(url)
        assert output_gate.served_model(url, api_key=output_gate.api_key_of(
            {"api_key_file": str(key)})) == "m"  # fmt: skip
        assert seen == [None, "Bearer gate-k3y"]
    finally:
        server.shutdown()
        server.server_close()
    key.chmod(0o644)
    with pytest.raises(ValidationError, match=r"^api_key_file: .* is readable by others"):
        output_gate.api_key_of({"api_key_file": str(key)})
