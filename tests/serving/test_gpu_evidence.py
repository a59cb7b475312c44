"""What a real vLLM 0.20.1 on an H200 did, read back by the project's own code.

``tests/fixtures/gpu-serving/h200-2026-12-03/`` is what ``scripts/device/serve-gpu-device.py``
brought back from the accelerator machine: the units the ``inference_service`` role
rendered (``units/``), the run's record (``record.json``: every step, the gates'
verdicts with token ids), the benchmark results per serving config, the raw
speculative counters from ``/metrics`` around each benchmark, and P1 on the plain and
the ngram server. These tests run the readers, the gate, the acceptance arithmetic,
the roofline, the report and P1's verdicts on it: what the CPU lab never produces (a
CUDA server's numerics, batch shapes and speeds) is in every number here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils import lxc_gpu
from ansible_collections.specops.infra.plugins.module_utils import output_gate as og
from ansible_collections.specops.infra.plugins.module_utils.gpu_catalogue import find
from ansible_collections.specops.infra.plugins.module_utils.pve import conf as pve_conf
from ansible_collections.specops.infra.plugins.module_utils.speculative.engines import Engine
from ansible_collections.specops.infra.plugins.module_utils.speculative.profile import (
    SpeculativeProfile,
)
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import to_argv

from specops.bench import fidelity
from specops.bench.compare import speedup_rows
from specops.bench.metrics import acceptance_from_vllm, parse_spec_counters
from specops.bench.report import render_markdown
from specops.bench.results import Results, load_results
from specops.bench.roofline import roofline_rows
from specops.tune.rollout import plain_gate
from specops_lab import unit_exec

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-serving" / "h200-2026-12-03"
RECORD: dict[str, Any] = json.loads((RUN / "record.json").read_text())
STEPS: dict[str, Any] = RECORD["steps"]
CONFIGS = ("plain", "ngram", "draft", "bad")
H200_GB_S = 4800.0  # the catalogue's H200 (NVIDIA data sheet), checked below


def _results(name: str) -> Results:
    return load_results(RUN / f"bench-{name}.results.json")


def _cell(results: Results, concurrency: int, context: int) -> Any:
    return next(
        c for c in results.cells if c.concurrency == concurrency and c.context_tokens == context
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_the_server_ran_the_command_line_the_role_rendered(name: str) -> None:
    unit = unit_exec.parse_unit((RUN / "units" / f"{name}.service").read_text())
    started = STEPS[f"config-{name}"]["start"]
    env = dict.fromkeys(started["environment_keys"], "")
    assert unit.argv(env) == started["argv"]
    # The API key came from the unit's root-only EnvironmentFile, never the unit itself.
    assert "VLLM_API_KEY" in started["environment_keys"]
    assert "VLLM_API_KEY" not in unit.environment
    assert "SGLANG_SIMULATE_ACC_LEN" in unit.unset
    assert started["argv"][:3] == [
        "/opt/torch/.venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_the_speculative_flags_are_the_translators_for_vllm_0_20_1(name: str) -> None:
    settings = json.loads((RUN / "units" / f"{name}.json").read_text())
    profile = SpeculativeProfile.from_mapping(
        {k: v for k, v in settings["profile"].items() if v is not None}
    )
    expected = to_argv(profile, Engine.parse("vllm", "0.20.1"))
    argv = STEPS[f"config-{name}"]["start"]["argv"]
    assert argv[-len(expected) :] == expected


def test_the_flag_list_read_on_the_device_is_the_one_shipped() -> None:
    flags = STEPS["flags"]
    assert flags["rc"] == 0, flags["output"]
    assert flags["same_flags_as_shipped"] is True
    assert flags["same_speculative_as_shipped"] is True
    assert "306 flags" in flags["output"]


def test_every_server_became_ready_through_the_readiness_gate() -> None:
    for name in CONFIGS:
        ready = STEPS[f"config-{name}"]["ready"]
        assert ready["ok"], (name, ready)
        assert ready["stage"] == "ready"  # health, the model list and one generated token
        assert STEPS[f"config-{name}"]["stop"] == {
            "killed": False, "rc": 0, "seconds": STEPS[f"config-{name}"]["stop"]["seconds"]
        }, "SIGTERM stopped it (the unit's KillSignal), nothing was killed"  # fmt: skip


def _outputs(token_ids: list[list[int]]) -> list[og.Decoded]:
    return [og.Decoded(p, "", ids) for p, ids in zip(og.PROMPTS, token_ids, strict=True)]


def _reference() -> og.Reference:
    ids = STEPS["config-plain"]["gate_reference_token_ids"]
    return og.Reference("r1b", "/srv/models/r1b", og.prompts_digest(og.PROMPTS), 48, "plain",
                        _outputs(ids))  # fmt: skip


def test_speculation_is_lossless_one_request_at_a_time() -> None:
    """ngram and draft_model reproduced the plain server's greedy tokens exactly."""
    for name in ("ngram", "draft"):
        message = STEPS[f"config-{name}"]["gate"]["message"]
        assert (
            "one request at a time it passed: greedy output matches the reference"
            " (method none (no speculation)): 1.000 >= 0.9 on token ids"
        ) in message, message


@pytest.mark.parametrize("name", ["plain", "ngram", "draft"])
def test_inside_a_batch_even_plain_output_moves(name: str) -> None:
    """Measured: inside a batch of 32 other requests the greedy tokens of a random-weight
    1B model differ from the same server's one-at-a-time tokens WITHOUT speculation too
    (bf16 batch shapes; random weights leave near ties everywhere). The loaded-batch
    check is therefore off by default (inference_service_output_gate_load: 0); these are
    the figures that say why. The gate's evaluation of the recorded tokens reproduces
    the recorded rates."""
    gate = STEPS[f"config-{name}"]["gate"]
    under = gate["under_load"]
    assert under["started"] == 32
    verdict = og.evaluate(
        _outputs(under["token_ids"]), _reference(), og.GateConfig(detect_loops=False)
    )
    assert verdict.match_rate == pytest.approx(under["match_rate"], abs=1e-4)
    assert verdict.per_prompt == under["per_prompt"]
    assert not verdict.ok
    assert gate["check"] == "lossless-under-load"


def test_a_planted_generation_default_is_refused() -> None:
    gate = STEPS["config-bad"]["gate"]
    assert (gate["ok"], gate["check"]) == (False, "lossless")
    assert gate["match_rate"] < 0.9
    assert "repetition_penalty" in (RUN / "units" / "bad.service").read_text()


@pytest.mark.parametrize(("name", "k"), [("ngram", 4), ("draft", 3)])
def test_acceptance_from_real_vllm_0_20_1_counters(name: str, k: int) -> None:
    before = parse_spec_counters((RUN / f"metrics-{name}-before.txt").read_text())
    after = parse_spec_counters((RUN / f"metrics-{name}-after.txt").read_text())
    assert before.present
    assert after.present
    run = acceptance_from_vllm(before, after)
    assert len(run.per_position) == k
    assert run.per_position == sorted(run.per_position, reverse=True)  # later positions accept less
    assert run.mean_acceptance_length == pytest.approx(1 + run.accepted / run.drafts)
    assert (
        sum(after.accepted_per_pos.values()) - sum(before.accepted_per_pos.values()) == run.accepted
    )
    # The run's counters cover its cells (and their warm-ups): never less than the cells.
    cells = [c.acceptance for c in _results(name).cells if c.acceptance.drafts]
    assert sum(c.drafts for c in cells) <= run.drafts
    assert sum(c.accepted for c in cells) <= run.accepted
    lengths = [c.mean_acceptance_length for c in cells if c.mean_acceptance_length]
    assert min(lengths) <= run.mean_acceptance_length <= max(lengths) + 0.5


def test_plain_exports_no_speculative_counters() -> None:
    assert not parse_spec_counters((RUN / "metrics-plain-before.txt").read_text()).present


def test_roofline_against_the_catalogues_h200() -> None:
    model = find("h200")
    assert model is not None
    assert model.bandwidth_gb_s == H200_GB_S
    weights = _results("plain").plan["roofline"]["weights"]["bytes_per_token"]
    assert 2.0e9 < weights < 2.2e9  # ~1B bf16 parameters
    rows = {
        name: roofline_rows(_results(name), H200_GB_S, weights)
        for name in ("plain", "ngram", "draft")
    }
    for name, found in rows.items():
        assert {r.context_tokens for r in found} == {512, 8192}, name
        for row in found:
            assert 0 < row.percent_of_bound < 100
    # Speculation multiplies the bound by tau but reached a smaller share of it.
    assert rows["ngram"][0].bound_tok_s > rows["plain"][0].bound_tok_s
    assert rows["ngram"][0].percent_of_bound < rows["plain"][0].percent_of_bound


def test_the_report_renders_the_recorded_runs() -> None:
    for name in ("plain", "ngram", "draft"):
        results = _results(name)
        text = render_markdown(results, [])
        assert "% of bound" in text, name
        bytes_per_token = results.plan["roofline"]["weights"]["bytes_per_token"]
        for row in roofline_rows(results, H200_GB_S, bytes_per_token):
            assert f"| {row.context_tokens} | {row.achieved_tok_s:.1f} |" in text, name
            assert f"| {row.percent_of_bound:.1f} |" in text, name


def test_speculation_was_slower_than_plain_in_every_measured_cell() -> None:
    """The finding that makes "no speculation" a candidate everywhere: on this 1B model
    ngram (k=4) and draft_model (k=3) lost to plain at every concurrency and context;
    the report's speed-up rows say so per cell, and the rollout's plain gate refuses
    both, although each would pass against a previous speculative profile."""
    plain = _results("plain")
    for name in ("ngram", "draft"):
        rows = [r for r in speedup_rows(plain, _results(name)) if r["speedup"] is not None]
        assert len(rows) == 5, name  # 512 at C = 1..64, 8K at C=1 (the rest: see README)
        for row in rows:
            base = _cell(plain, row["concurrency"], row["context_tokens"])
            assert row["plain_output_tok_s"] == base.stats.output_tok_s
            assert row["speedup"] < 1, (name, row)
            assert row["note"] == "slower than no speculation"
        gate = plain_gate(plain, _results(name), throughput_drop=0.10)
        assert (gate.ok, gate.gate) == (False, "plain"), gate


@pytest.mark.parametrize("label", ["plain", "ngram"])
def test_p1_verdicts_follow_from_the_recorded_runs(label: str) -> None:
    data = json.loads((RUN / f"p1-{label}.json").read_text())
    assert data["protocol"]["repeats"] >= 3
    assert data["protocol"]["order"] == "ABBA per C"
    server = data["servers"][0]
    assert server["server"]["api_key_enforced"] is True
    for row in server["concurrency"]:
        for metric, m in row["metrics"].items():
            interval = fidelity.paired_ratio_interval(m["ours"], m["theirs"], 0.95)
            assert interval is not None
            assert interval.point == pytest.approx(m["ratio"]["point"]), metric
            assert fidelity.verdict(interval, 0.05) == m["verdict"], metric
    # Each client agreed with the server's own /metrics within 1 % on every measured run:
    # what moved between the clients' runs was the server (the referee's spread).
    for run in server["runs"]:
        if run["phase"] == "measured" and run["server_tpot_mean_ms"]:
            assert run["tpot_mean_ms"] == pytest.approx(run["server_tpot_mean_ms"], rel=0.01)


# The second run (plain only, after the fixes): the container's own record, the matrix.
RUN2 = RUN.parent / "h200-2026-12-03-run2"
STEPS2: dict[str, Any] = json.loads((RUN2 / "record.json").read_text())["steps"]


def test_the_container_was_made_from_the_hosts_gpu_facts() -> None:
    """The project's facts of the H200 host -> the passthrough lines lxc_gpu_passthrough
    writes (cgroup v2 there) -> a running LXC container in which nvidia-smi and torch
    see the card. The lines are recomputed here from the recorded facts."""
    ct = STEPS2["container"]
    assert ct["state"] == "RUNNING"
    facts, card = ct["gpu_facts"], ct["card"]
    assert facts["cgroup"]["version"] == 2
    planned = [d.as_dict() for d in lxc_gpu.plan_devices(facts, [card])]
    assert planned == ct["devices"]
    merged = lxc_gpu.merge(
        pve_conf.parse("arch: amd64\n"), lxc_gpu.plan_devices(facts, [card]), method="raw",
        cgroup_key=lxc_gpu.choose_cgroup_key(facts, "auto"),
        gpu_majors={int(v) for v in facts["char_majors"].values()},
        foreign_majors={int(m): n for m, n in ct["char_devices"].items()
                        if not n.startswith("nvidia")},
    )  # fmt: skip
    gpu_lines = [ln for ln in merged.after.splitlines() if ln.startswith("lxc.")]
    assert gpu_lines == [ln for ln in ct["conf"].splitlines() if ln.startswith("lxc.")]
    uvm = facts["uvm_major"]
    assert f"lxc.cgroup2.devices.allow: c {uvm}:0 rwm" in ct["conf"]  # 238 there, never a constant
    assert f"lxc.cgroup2.devices.allow = c {uvm}:0 rwm" in ct["lxc_config"]
    assert ct["nvidia_smi_in_ct"][0] == 0
    assert "NVIDIA H200" in ct["nvidia_smi_in_ct"][1]
    assert ct["torch_in_ct"][1].startswith("NVIDIA H200")


def test_every_cell_of_the_matrix_ran_after_the_transport_fix() -> None:
    results = load_results(RUN2 / "bench-plain.results.json")
    cells = {(c.concurrency, c.context_tokens): c for c in results.cells}
    assert set(cells) == {(c, n) for c in (1, 4, 16, 64) for n in (512, 8192)}
    for key, cell in cells.items():
        assert cell.status == "ok", key
        assert cell.stats.failed == 0, key
    # Longer contexts cost time to first token at every concurrency.
    for c in (1, 4, 16, 64):
        assert cells[(c, 8192)].stats.ttft_ms.p50 > cells[(c, 512)].stats.ttft_ms.p50


def test_inside_a_batch_the_same_plain_server_matched_the_second_time() -> None:
    """Run 1: plain's tokens inside a batch of 32 matched its own one-at-a-time tokens at
    0.365; run 2, same unit and load: 1.000. Which requests share a batch decides, so a
    loaded-batch check cannot tell a broken drafter from batch shapes on this model."""
    under = STEPS2["config-plain"]["gate"]["under_load"]
    assert under["match_rate"] == 1.0
    assert under["started"] == 32
    assert STEPS["config-plain"]["gate"]["under_load"]["match_rate"] < 0.9
