"""Issue 47 on the H100 with SGLang 0.5.11: the operator's methods (NEXTN, STANDALONE,
NGRAM, DFLASH, EAGLE3) on the oracle models, the sweep and the rollout deciding there,
read back by the project's code.

``tests/fixtures/gpu-serving/h100-sglang-oracle-2026-12-06/`` is what
``scripts/device/serve-gpu-device.py --engine sglang --campaign oracle`` brought back
(``--configs plain,mtp-3,ngram,draft-3,plain-llama,dflash,eagle3,noisy-1,...,noisy-4``):
every server ran from the unit the ``inference_service`` role rendered for SGLang
0.5.11, in the specops-made LXC container, seven and then five sharing the card
(docs/evidence/proven-on-gpu.md, "SGLang 0.5.11 on the oracles"). Figures are what the
card measured: the tests check what the project reads and decides from them, never a
speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specops.infra.plugins.module_utils.speculative.translate import (
    SGLANG_ALGORITHM,
)
from plugins.scripts import REPO

from specops.bench.results import Results, load_results
from specops.tune.config import load_config_file
from specops.tune.sweep import report_sweep

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h100-sglang-oracle-2026-12-06"
REC: dict[str, Any] = json.loads((RUN / "record.json").read_text())
CONFIGS = ("plain", "mtp-3", "ngram", "draft-3", "plain-llama", "dflash", "eagle3",
           *(f"noisy-{k}" for k in range(1, 5)))  # fmt: skip
LLAMA = ("plain-llama", "dflash", "eagle3")
# The MiMo-shaped build's noise, calibrated through its MTP layer before any engine ran.
CALIBRATED = REC["steps"]["oracle-build"]["mimo"]["record"]["calibration"]["per_position"]


def _results(name: str, run: str = "run2") -> Results:
    return load_results(RUN / f"bench-{name}-{run}.results.json")


def _generated(name: str) -> list[int]:
    return [int(i) for i in json.loads((RUN / f"generate-{name}.json").read_text())["output_ids"]]


def test_the_card_and_the_engine() -> None:
    machine = REC["steps"]["machine"]
    assert machine["nvidia_smi"].startswith("NVIDIA H100 80GB HBM3")
    assert REC["steps"]["unpack"]["import"].startswith("0.5.11 ")
    assert tuple(REC["configs"]) == CONFIGS
    assert REC["errors"] == []


@pytest.mark.parametrize("name", CONFIGS)
def test_every_method_started_from_its_unit_and_served_the_targets_own_output(name: str) -> None:
    """Each rendered command line met SGLang 0.5.11 (NEXTN on MiMo with its own folder as
    the draft path, STANDALONE, NGRAM, DFLASH, EAGLE3), and each speculative server's
    greedy output is its target's plain server's: the output gate's six prompts alone
    and inside a batch of 32 (SGLang's OpenAI API returns no token ids: compared on
    text), and SGLang's native /generate token for token."""
    step = REC["steps"][f"oracle-{name}"]
    assert step["ready"]["ok"] is True
    argv = step["start"]["argv"]
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    method = step["profile"].get("method")
    if method in (None, "none"):
        assert "--speculative-algorithm" not in argv
    else:
        assert argv[argv.index("--speculative-algorithm") + 1] == SGLANG_ALGORITHM[method]
    gate = step["gate"]
    assert gate["ok"] is True
    if not name.startswith("plain"):
        assert (gate["compared_on"], gate["match_rate"]) == ("text units", 1.0)
        assert gate["under_load"]["match_rate"] == 1.0
    plain = "plain-llama" if name in LLAMA else "plain"
    assert _generated(name) == _generated(plain)
    assert [b["rc"] for b in step["bench"]] == [0, 0]


def test_mimo_nextn_is_given_its_own_folder_as_draft_path() -> None:
    """SGLang 0.5.11 defaults the NEXTN draft path to the model only for its listed
    architectures; the translator gave MiMo's own folder, and the server ran with it
    (its /get_server_info: EAGLE, as SGLang rewrites NEXTN)."""
    argv = REC["steps"]["oracle-mtp-3"]["start"]["argv"]
    model = argv[argv.index("--model-path") + 1]
    assert argv[argv.index("--speculative-draft-model-path") + 1] == model
    info = json.loads((RUN / "server-info-mtp-3.json").read_text())
    assert (info["speculative_algorithm"], info["speculative_draft_model_path"]) == (
        "EAGLE",
        model,
    )


def test_the_token_cap_is_the_pool_the_server_reported() -> None:
    """Several SGLang servers on one card: the unit's --max-total-tokens capped the KV
    pool SGLang sized from the memory free at its start (the NEXTN server's own report,
    started beside six others; the fixture keeps that one server's info)."""
    info = json.loads((RUN / "server-info-mtp-3.json").read_text())
    argv = REC["steps"]["oracle-mtp-3"]["start"]["argv"]
    assert info["max_total_num_tokens"] == int(argv[argv.index("--max-total-tokens") + 1])


@pytest.mark.parametrize("name", ["mtp-3", "draft-3", "ngram"])
def test_a_perfect_oracle_accepts_every_draft(name: str) -> None:
    """By construction the MTP layer, the draft model, or the prompt's repeats (NGRAM over
    the oracle's cycle) propose the target's next tokens: SGLang's own meta_info says 3
    of 3 accepted, 4 tokens per step, in every cell."""
    for cell in _results(name).cells:
        acc = cell.acceptance
        assert acc.source == "sglang-meta_info"
        assert (acc.drafts or 0) > 0
        assert acc.mean_acceptance_length == pytest.approx(4.0, abs=1e-9)
        assert acc.per_position == pytest.approx([1.0, 1.0, 1.0])


@pytest.mark.parametrize("k", range(1, 5))
def test_the_noisy_mtp_accepts_what_its_calibration_said(k: int) -> None:
    """The noisy target's acceptance, calibrated before any engine ran, is what SGLang's
    NEXTN measured at every depth: within 0.05 at each position, pooled over the cells
    (the same build gave vLLM 0.20.1 the same rates)."""
    cells = _results(f"noisy-{k}").cells
    drafts = sum(c.acceptance.drafts or 0 for c in cells)
    pooled = [sum((c.acceptance.per_position or [0.0] * k)[i] * (c.acceptance.drafts or 0)
                  for c in cells) / drafts for i in range(k)]  # fmt: skip
    assert pooled == pytest.approx(CALIBRATED[:k], abs=0.05)
    assert pooled == sorted(pooled, reverse=True)


@pytest.mark.parametrize("name", ["dflash", "eagle3"])
def test_random_drafters_load_and_count_but_accept_nothing(name: str) -> None:
    """The DFlash and EAGLE3 drafters of the Llama build are random: SGLang loaded them
    from the role's unit, drafted, counted, and accepted (almost) nothing, while its
    output stayed the target's (above)."""
    for cell in _results(name).cells:
        assert (cell.acceptance.drafts or 0) > 0
        assert cell.acceptance.mean_acceptance_length == pytest.approx(1.0, abs=0.01)


def test_the_sweep_keeps_no_speculation_for_throughput_at_c16() -> None:
    """The sweep (mode model, objective: output tok/s at C=16) over the noisy NEXTN depth:
    no depth beats no speculation there, so it picks none, which the grid of the same
    servers (their own two runs each) agrees with."""
    step = REC["steps"]["oracle-sweep"]
    grid = step["referee"]["grid"]
    assert step["referee"]["best"] == "plain"
    assert all(grid[n]["mean"] < grid["plain"]["mean"] for n in grid if n != "plain")
    assert step["pick_share_of_grid_best"] == 1.0


def test_the_sweep_is_read_back_from_its_ledger_with_the_load_it_was_chosen_for(
    tmp_path: Path,
) -> None:
    """Read back by specops.tune.sweep: pick none for C=16, depth 2 left unmeasured by
    the model; and the leaderboard the sweep wrote on the device (its cells' runs stayed
    there) names per cell the profile to roll out for that load: the noisy depth 3 at
    C=1 and 4 (where it beats none beyond noise), none from C=16."""
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.jsonl").write_bytes((RUN / "sweep.jsonl").read_bytes())
    result = report_sweep(load_config_file(RUN / "oracle-sweep-config.yml"), out)
    outcome = result.outcome
    assert outcome.pick is not None
    assert outcome.pick.candidate.key == "none"
    measured = {k for k, st in outcome.standings.items() if st.runs}
    assert measured == {"none", "num_steps=1", "num_steps=3", "num_steps=4"}
    assert result.restarts_total == 3
    text = (RUN / "leaderboard.md").read_text()
    assert "| 1 | 512 | num_steps=3 |" in text
    assert "| 16 | 512 | none |" in text


def test_the_rollout_accepts_the_pick_and_refuses_the_worst_depth() -> None:
    """The rollout's node logic on the real servers: a node on the grid's worst profile
    (noisy depth 1) given the sweep's pick is accepted; the node on the pick given the
    worst is refused by the smoke benchmark and the previous server serves again."""
    better = REC["steps"]["oracle-rollout-better"]
    assert (better["current"], better["candidate"]) == ("noisy-1", "plain")
    assert better["record"]["outcome"] == "changed"
    assert better["smoke"]["ok"] is True
    assert better["node_serves"] == "plain"
    worse = REC["steps"]["oracle-rollout-worse"]
    assert (worse["current"], worse["candidate"]) == ("plain", "noisy-1")
    record = worse["record"]
    assert record["outcome"] == "restored"
    assert record["failed_gate"] == "smoke-benchmark"
    assert record["message"].startswith("throughput regression past 5%")
    assert record["profile"] == {"method": "mtp", "num_steps": 1}
    assert worse["node_serves"] == "plain"


RUN2 = REPO / "tests" / "fixtures" / "gpu-serving" / "h100-sglang-oracle-2026-12-06-run2"
REC2: dict[str, Any] = json.loads((RUN2 / "record.json").read_text())


def test_for_one_request_at_a_time_the_sweep_picks_speculation_the_grid_agrees(
    tmp_path: Path,
) -> None:
    """Run 2 (``--objective latency``: one request's decode speed at C=1, configs plain
    and noisy 1-4): the sweep picks NEXTN depth 4, beyond noise over none, and the grid
    of the same servers has the same best (the pick's share of it 1.0)."""
    assert REC2["errors"] == []
    step = REC2["steps"]["oracle-sweep"]
    assert step["referee"]["objective"] == {"kind": "latency", "concurrency": 1, "context": 512}
    assert step["referee"]["best"] == "noisy-4"
    assert step["pick_share_of_grid_best"] == 1.0
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.jsonl").write_bytes((RUN2 / "sweep.jsonl").read_bytes())
    result = report_sweep(load_config_file(RUN2 / "oracle-sweep-config.yml"), out)
    assert result.outcome.pick is not None
    assert result.outcome.pick.candidate.key == "num_steps=4"
    assert result.outcome.plain_verdict is not None
    assert result.outcome.plain_verdict.startswith("num_steps=4 beats no speculation beyond noise")


def test_run2_rollouts_refused_the_worst_and_judged_the_pick_on_the_mean() -> None:
    """The worst depth over the pick is refused and the pick serves again. The pick over
    the worst was refused too, by gate plain on the mean over C=1 and C=16: the finding
    that made gate plain judge on the objective the profile was chosen for
    (tests/tune/test_rollout_objective.py replays it)."""
    worse = REC2["steps"]["oracle-rollout-worse"]
    assert (worse["current"], worse["candidate"], worse["node_serves"]) == (
        "noisy-4", "noisy-1", "noisy-4",
    )  # fmt: skip
    assert worse["record"]["outcome"] == "restored"
    assert worse["record"]["failed_gate"] == "smoke-benchmark"
    better = REC2["steps"]["oracle-rollout-better"]
    assert (better["current"], better["candidate"]) == ("noisy-1", "noisy-4")
    assert better["record"]["failed_gate"] == "smoke-benchmark"
    assert better["smoke"]["gate"] == "plain"
    assert better["smoke"]["message"].startswith("slower than no speculation beyond 5%")
