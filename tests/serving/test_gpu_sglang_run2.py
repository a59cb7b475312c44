"""SGLang 0.5.11 on the H200, second run: specops bench, the roofline, P1 against
``sglang.bench_serving`` and the sweep over ``num_steps``, read back by the project's code.

``tests/fixtures/gpu-serving/h200-sglang-2026-12-03-run2/`` is what
``scripts/device/serve-gpu-device.py --engine sglang --configs plain,ngram`` brought back
(docs/evidence/gpu-sglang.md): the units the ``inference_service`` role rendered (the API key now
reaches SGLang through ``--config`` from the unit's runtime directory), the run's record,
specops bench's results on the plain and the NGRAM server, P1's ABBA runs (specops bench
and ``sglang.bench_serving`` on the same plain server), and the sweep's ledger (grid over
``num_steps`` 1..5 of a draft model, no speculation beside it), measured by
``specops.tune.sweep.run_sweep`` through the device's applier. The API key was scrubbed
from every file. Figures here are what the machine measured: the tests check how the
project reads them, never a speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plugins.scripts import REPO

from specops.bench.fidelity import paired_ratio_interval
from specops.bench.report import write_report
from specops.bench.results import load_results
from specops.bench.runner import sglang_identity
from specops.tune.config import load_config_file
from specops.tune.sweep import report_sweep
from specops_lab import unit_exec

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"
RECORD: dict[str, Any] = json.loads((RUN / "record.json").read_text())
STEPS: dict[str, Any] = RECORD["steps"]
SCRUBBED = "<api-key: scrubbed>"


def _json(name: str) -> Any:
    return json.loads((RUN / name).read_text())


@pytest.mark.parametrize("name", ["plain", "ngram"])
def test_the_key_reaches_sglang_through_its_config_file_not_its_command_line(name: str) -> None:
    unit = unit_exec.parse_unit((RUN / "units" / f"{name}.service").read_text())
    started = STEPS[f"config-{name}"]["start"]
    env = {**dict.fromkeys(started["environment_keys"], ""), "SPECOPS_API_KEY": SCRUBBED}
    assert unit.argv(env) == started["argv"]
    assert "--api-key" not in started["argv"]
    assert SCRUBBED not in " ".join(started["argv"])
    assert started["argv"][-2:] == ["--config", "/run/specops-r1b/secrets.yaml"]
    assert unit.runtime_directory_mode == 0o700
    # The server took the key from the file (it answers it back in /get_server_info,
    # scrubbed before it came back) and every request with it was served.
    assert _json(f"server-info-{name}.json")["api_key"] == SCRUBBED
    assert STEPS[f"config-{name}"]["ready"]["ok"] is True
    assert STEPS[f"config-{name}"]["sglang"]["health_generate"]["status"] == 200


def test_sglang_lists_every_speculative_argument_but_speculates_only_with_an_algorithm() -> None:
    plain = _json("server-info-plain.json")
    assert plain["speculative_algorithm"] is None
    assert plain["speculative_ngram_capacity"] == 10000000  # set whether or not it speculates
    assert sglang_identity(plain, "http://x", "r1b", None).speculative is None
    ngram = sglang_identity(_json("server-info-ngram.json"), "http://x", "r1b", None)
    assert ngram.speculative is not None
    assert ngram.speculative["speculative_algorithm"] == "NGRAM"
    assert ngram.speculative["speculative_num_draft_tokens"] == 4
    assert None not in ngram.speculative.values()
    # The device's bench ran before this reading: its plain results said "speculative",
    # which made the sweep measure no speculation again (a restart) instead of reusing them.
    assert STEPS["sweep"]["starts"][0]["unit"] == "plain"
    assert load_results(RUN / "bench-plain" / "results.json").server.speculative is not None


def test_specops_bench_reads_acceptance_from_sglangs_own_fields() -> None:
    ngram = load_results(RUN / "bench-ngram" / "results.json")
    assert [c.concurrency for c in ngram.cells] == [1, 4, 16]
    for cell in ngram.cells:
        acc = cell.acceptance
        assert acc.source == "sglang-meta_info"
        assert cell.stats.failed == 0
        tokens = cell.stats.total_output_tokens
        # SGLang's accept length: completion tokens over verify steps (spec_verify_ct)
        assert acc.mean_acceptance_length == pytest.approx(tokens / acc.drafts)
        # each verify step gives one token plus the drafts it accepted (the histogram);
        # what is left is the token each request's prefill made (one at most per request)
        assert 0 <= tokens - acc.drafts - acc.accepted <= cell.stats.completed
        assert acc.per_position
        assert acc.per_position == sorted(acc.per_position, reverse=True)
        assert 0 < acc.per_position[0] < 1
    # the draft model (STANDALONE, 3 steps): one of the sweep's runs
    draft = load_results(RUN / "sweep" / "runs" / "num_steps=3" / "r1.json")
    assert draft.server.speculative is not None
    assert draft.server.speculative["speculative_algorithm"] == "STANDALONE"
    assert draft.server.speculative["speculative_num_steps"] == 3
    for cell in draft.cells:
        assert cell.acceptance.source == "sglang-meta_info"
        assert cell.acceptance.mean_acceptance_length == pytest.approx(
            cell.stats.total_output_tokens / cell.acceptance.drafts
        )
        assert len(cell.acceptance.per_position) <= 3
    plain = load_results(RUN / "bench-plain" / "results.json")
    assert all(c.acceptance.accepted == 0 for c in plain.cells)
    assert all(c.stats.failed == 0 for c in plain.cells)


def test_the_report_has_the_h200_roofline(tmp_path: Path) -> None:
    results = load_results(RUN / "bench-plain" / "results.json")
    report = write_report(results, tmp_path).read_text()
    assert "Roofline" in report
    assert "H200" in report
    assert "No roofline" not in report
    print(report[report.index("Roofline") - 3 :][:1500])


def _p1(c: int) -> tuple[list[float], list[float]]:
    """ABBA at concurrency c: pairs (ours run 0, theirs run 1), (ours run 3, theirs run 2)."""
    ours = [
        load_results(RUN / "p1" / f"p1-plain-c{c}-{k}-ours.json").cells[0].stats.output_tok_s
        for k in (0, 3)
    ]
    theirs = []
    for k in (1, 2):
        last = (RUN / "p1" / f"p1-plain-c{c}-{k}-theirs.jsonl").read_text().splitlines()[-1]
        theirs.append(float(json.loads(last)["output_throughput"]))
    return ours, theirs


@pytest.mark.parametrize("c", [1, 4])
def test_p1_pairs_specops_bench_with_sglang_bench_serving_on_the_same_cells(c: int) -> None:
    for k in (0, 3):
        cell = load_results(RUN / "p1" / f"p1-plain-c{c}-{k}-ours.json").cells[0]
        assert (cell.concurrency, cell.context_tokens, cell.stats.completed) == (c, 512, 8)
        assert cell.stats.total_output_tokens == 8 * 128
    for k in (1, 2):
        last = json.loads(
            (RUN / "p1" / f"p1-plain-c{c}-{k}-theirs.jsonl").read_text().splitlines()[-1]
        )
        assert (last["max_concurrency"], last["completed"]) == (c, 8)
        assert last["total_output_tokens"] == 8 * 128
        assert last["total_input_tokens"] == 8 * 512
    ours, theirs = _p1(c)
    interval = paired_ratio_interval(ours, theirs)
    assert interval is not None
    assert interval.pairs == 2
    print(f"P1 C={c}: ours {ours} theirs {theirs} -> ours/theirs {interval.point:.3f}"
          f" [{interval.low:.3f}, {interval.high:.3f}]")  # fmt: skip


def test_the_sweep_over_num_steps_is_read_back_from_its_ledger(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.jsonl").write_bytes((RUN / "sweep" / "sweep.jsonl").read_bytes())
    cfg = load_config_file(RUN / "sweep-config.yml")
    result = report_sweep(cfg, out)
    outcome = result.outcome
    assert outcome.pick is not None
    assert outcome.pick.candidate.key == "none"
    assert outcome.plain_verdict is not None
    assert outcome.plain_verdict.startswith("pick none: no speculation has the best median")
    keys = {f"num_steps={k}" for k in range(1, 6)}
    assert keys | {"none"} == set(outcome.standings)
    for key in keys:
        st = outcome.standings[key]
        assert st.usable
        assert len(st.runs) == 2
    assert result.restarts_total == 6  # no speculation again (see above) and five steps
    assert result.left_on == {"method": "none"}
    # the same lines the device's sweep wrote, one per run, and the final one
    progress = (RUN / "sweep" / "progress.log").read_text().splitlines()
    assert len(progress) == 12
    board = (out / "leaderboard.md").read_text()
    assert "**Pick: none (no speculation)**" in board
    print(board[: board.index("## Decisions")])
