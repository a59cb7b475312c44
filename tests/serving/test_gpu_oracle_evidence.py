"""Issue 47 on the H100: the operator's methods on vLLM 0.20.1 with oracle models (whose
acceptance is known by construction), the sweep and the rollout deciding there, read
back by the project's code.

``tests/fixtures/gpu-serving/h100-oracle-2026-12-06/`` is what
``scripts/device/serve-gpu-device.py --campaign oracle`` brought back from its first run (all
thirteen configs; its sweep stopped on a missing import, fixed since), ``...-run2/`` the
second (``--configs plain,noisy-1,noisy-2,noisy-3,noisy-4``: the sweep and both
rollouts). Every server ran from the unit the ``inference_service`` role rendered, in
the specops-made LXC container, several sharing the card (docs/evidence/proven-on-gpu.md,
"Oracle models on the H100"). Figures are what the card measured: the tests check what
the project reads and decides from them, never a speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plugins.scripts import REPO

from specops.bench.results import Results, load_results
from specops.tune.config import load_config_file
from specops.tune.sweep import report_sweep

FIX = REPO / "tests" / "fixtures" / "gpu-serving"
RUN1 = FIX / "h100-oracle-2026-12-06"
RUN2 = FIX / "h100-oracle-2026-12-06-run2"
REC1: dict[str, Any] = json.loads((RUN1 / "record.json").read_text())
REC2: dict[str, Any] = json.loads((RUN2 / "record.json").read_text())
CONFIGS = ("plain", "mtp-3", "ngram", "draft-3", "plain-llama", "dflash", "eagle3",
           *(f"noisy-{k}" for k in range(1, 7)))  # fmt: skip
# The MiMo-shaped build's noise, calibrated through its MTP layer before any engine ran
# (the build's record): acceptance at draft positions 1..5.
CALIBRATED = REC1["steps"]["oracle-build"]["mimo"]["record"]["calibration"]["per_position"]


def _results(name: str, run: str = "run2") -> Results:
    return load_results(RUN1 / f"bench-{name}-{run}.results.json")


def test_the_card_and_the_engine() -> None:
    machine = REC1["steps"]["machine"]
    assert machine["nvidia_smi"].startswith("NVIDIA H100 80GB HBM3")
    assert "0.20.1" in REC1["steps"]["unpack"]["import"]
    assert tuple(REC1["configs"]) == CONFIGS
    assert REC2["errors"] == []


@pytest.mark.parametrize("name", CONFIGS)
def test_every_method_started_from_its_unit_and_served_the_targets_own_tokens(name: str) -> None:
    """Each rendered command line met vLLM 0.20.1 (MTP, draft model, n-gram, DFlash,
    EAGLE3), and each speculative server's greedy output is the plain server's, token
    for token, alone and inside a batch of 32."""
    step = REC1["steps"][f"oracle-{name}"]
    assert step["ready"]["ok"] is True
    argv = step["start"]["argv"]
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    method = step["profile"].get("method")
    if method in (None, "none"):
        assert "--speculative-config" not in argv
    else:
        config = json.loads(argv[argv.index("--speculative-config") + 1])
        assert config["method"] == method
    gate = step["gate"]
    assert gate["ok"] is True
    assert gate["chain_share"] == 1.0  # every output token is the oracle's next token
    if not name.startswith("plain"):
        assert (gate["compared_on"], gate["match_rate"]) == ("token ids", 1.0)
    assert [b["rc"] for b in step["bench"]] == [0, 0]


def test_dflash_renders_its_block_as_speculative_tokens() -> None:
    argv = REC1["steps"]["oracle-dflash"]["start"]["argv"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": "/srv/models/oracle/llama/dflash",
                      "num_speculative_tokens": 15}  # fmt: skip


@pytest.mark.parametrize("name", ["mtp-3", "draft-3", "ngram"])
def test_a_perfect_oracle_accepts_every_draft(name: str) -> None:
    """By construction the drafter (MTP layer, draft model) or the prompt's repeats
    (n-gram over the oracle's cycle) always propose the target's next tokens: the
    engine's own counters say 3 of 3 accepted, 4 tokens per step, in every cell."""
    for cell in _results(name).cells:
        acc = cell.acceptance
        assert (acc.drafts or 0) > 0
        assert acc.mean_acceptance_length == pytest.approx(4.0, abs=1e-9)
        assert acc.per_position == pytest.approx([1.0, 1.0, 1.0])


@pytest.mark.parametrize("k", range(1, 7))
def test_the_noisy_mtp_accepts_what_its_calibration_said(k: int) -> None:
    """The noisy target's acceptance, calibrated on the build machine's torch before
    any engine ran, is what vLLM's counters measured at every depth: within 0.05 at
    each position, pooled over the cells."""
    cells = _results(f"noisy-{k}").cells
    drafts = sum(c.acceptance.drafts or 0 for c in cells)
    pooled = [sum((c.acceptance.per_position or [0.0] * k)[i] * (c.acceptance.drafts or 0)
                  for c in cells) / drafts for i in range(k)]  # fmt: skip
    expected = CALIBRATED[:k]
    if k > len(CALIBRATED):
        expected = [*CALIBRATED, *pooled[len(CALIBRATED) :]]  # beyond the calibrated five
    assert pooled == pytest.approx(expected, abs=0.05)
    assert pooled == sorted(pooled, reverse=True)


@pytest.mark.parametrize("name", ["dflash", "eagle3"])
def test_random_drafters_load_and_count_but_accept_nothing(name: str) -> None:
    """The DFlash and EAGLE3 drafters of the Llama build are random (no acceptance is
    claimed): the engine loaded them, drafted, counted, and accepted (almost) nothing,
    while its output stayed the target's (the gate above)."""
    for cell in _results(name).cells:
        assert (cell.acceptance.drafts or 0) > 0
        assert cell.acceptance.mean_acceptance_length == pytest.approx(1.0, abs=0.01)


def test_the_sweep_keeps_no_speculation_where_the_noisy_mtp_loses() -> None:
    """The sweep (mode model, objective: output tok/s at C=16) over the noisy MTP depth,
    read back from its ledger by specops.tune.sweep: no depth beats no speculation, so
    it picks none, which the grid of the same servers (their own two runs each) agrees
    with."""
    step = REC2["steps"]["oracle-sweep"]
    grid = step["referee"]["grid"]
    assert step["referee"]["best"] == "plain"
    assert all(grid[n]["mean"] < grid["plain"]["mean"] for n in grid if n != "plain")
    assert step["pick_share_of_grid_best"] == 1.0


def test_the_sweep_is_read_back_from_its_ledger(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.jsonl").write_bytes((RUN2 / "sweep.jsonl").read_bytes())
    result = report_sweep(load_config_file(RUN2 / "oracle-sweep-config.yml"), out)
    outcome = result.outcome
    assert outcome.pick is not None
    assert outcome.pick.candidate.key == "none"
    assert outcome.plain_verdict is not None
    assert outcome.plain_verdict.startswith("pick none: no speculation has the best median")
    measured = {k for k, st in outcome.standings.items() if st.runs}
    assert measured == {"none", "num_steps=1", "num_steps=2", "num_steps=4"}  # 3 pruned
    assert result.restarts_total == 3


def test_the_rollout_refuses_a_depth_that_loses_and_puts_the_previous_server_back() -> None:
    step = REC2["steps"]["oracle-rollout-worse"]
    record = step["record"]
    assert (step["current"], step["candidate"]) == ("plain", "noisy-3")
    assert record["outcome"] == "restored"
    assert record["failed_gate"] == "smoke-benchmark"
    assert record["message"].startswith("throughput regression past 5%")
    assert record["profile"] == {"method": "mtp", "num_steps": 3}
    assert record["previous_profile"] == {"method": "none"}
    assert step["node_serves"] == "plain"


def test_the_same_server_measured_twice_by_the_smoke_plan() -> None:
    """The 'better' case met the sweep's pick, none: the node's baseline and its smoke
    are two measurements of one server, and the gate passes them (what it measured
    between them is the smoke plan's noise, docs/evidence/proven-on-gpu.md)."""
    step = REC2["steps"]["oracle-rollout-better"]
    assert (step["current"], step["candidate"], step["node_serves"]) == ("plain",) * 3
    assert step["record"]["outcome"] == "changed"
    assert step["smoke"]["ok"] is True
