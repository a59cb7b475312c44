"""The leaderboard that decides, on the H200's recorded sweep (SGLang 0.5.11, grid over a
draft model's ``num_steps`` 1..5 beside no speculation, 2 runs each,
``tests/fixtures/gpu-serving/h200-sglang-2026-12-03-run2/sweep``).

The device brought back the ledger and one run's results (``num_steps=3``'s second), so
the candidate table has every candidate's scores and warm-up check, and the cell table
that run's cells. Where a test needs no speculation's cells it names what stands in for
them: the plain config's bench run of the same plan on the same server, minutes before
the sweep (``bench-plain/results.json``; its plan is the sweep's, field for field).
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from plugins.scripts import REPO

from specops.bench.results import load_results
from specops.tune.config import load_config_file
from specops.tune.ledger import RunRecord
from specops.tune.objective import Objective
from specops.tune.score import Scoring
from specops.tune.search import Measurement
from specops.tune.sweep import report_sweep
from specops.tune.warmup import warmup_check

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"


def _sweep(tmp_path: Path, *, plain_cells: bool = False) -> Path:
    out = tmp_path / "sweep"
    shutil.copytree(RUN / "sweep", out)
    if plain_cells:
        for r in (0, 1):
            (out / "runs" / "none").mkdir(parents=True, exist_ok=True)
            shutil.copy(RUN / "bench-plain" / "results.json", out / "runs" / "none" / f"r{r}.json")
    return out


def test_the_recorded_sweep_flags_every_warm_up_affected_candidate(tmp_path: Path) -> None:
    out = _sweep(tmp_path)
    result = report_sweep(load_config_file(RUN / "sweep-config.yml"), out)
    board = (out / "leaderboard.md").read_text()
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    by_key = {r["candidate"]: r for r in rows}
    # first run after each restart over the next: 0.59, 0.50, 0.51, 0.57, 0.56 (the draft
    # model), 0.98 for no speculation (within the 2 % band)
    ratios = {k: round(float(r["first_second"]), 2) for k, r in by_key.items()}
    assert ratios == {"none": 0.98, "num_steps=1": 0.59, "num_steps=2": 0.5,
                      "num_steps=3": 0.51, "num_steps=4": 0.57, "num_steps=5": 0.56}  # fmt: skip
    assert by_key["none"]["warmup"].startswith("0.98 (within noise")
    for k in range(1, 6):
        assert "warm-up affected" in by_key[f"num_steps={k}"]["warmup"]
        assert by_key[f"num_steps={k}"]["restarts"] == "1"
    assert "**Warm-up decided runs:** num_steps=1, num_steps=2, num_steps=3, num_steps=4," in board
    # ranked by the warm runs, num_steps=3 leads the drafts (1373.8 tok/s), where the
    # medians (cold and warm mixed) put it at 1039.9
    assert "none 3228.4, num_steps=3 1373.8, num_steps=5 1214.4" in board
    assert result.outcome.pick is not None
    assert result.outcome.pick.candidate.key == "none"
    # the one run whose results came back: its cells with intervals, p90 of 8 marked
    cells = list(csv.DictReader(io.StringIO((out / "leaderboard-cells.csv").read_text())))
    assert [(c["candidate"], c["concurrency"]) for c in cells] == [
        ("num_steps=3", "1"), ("num_steps=3", "4"), ("num_steps=3", "16")]  # fmt: skip
    c1 = cells[0]
    assert (
        float(c1["output_tok_s_low"]) < float(c1["output_tok_s"]) < float(c1["output_tok_s_high"])
    )
    assert (c1["tpot_ms_p90"], c1["tpot_ms_p90_short"]) == ("", "8 req < 10 for p90")
    assert c1["per_position"] == "0.0515;0.0362;0.0263"
    assert "| num_steps=3 | 1 | 512 | 1 | 8 | 229.1 [" in board
    assert "(8 req < 10 for p90)" in board
    # what the device did not bring back is said, not guessed
    assert "none: runs/none/r0.json, runs/none/r1.json" in board
    assert "Not decided here: no speculation's cells are not in this directory" in board


def test_with_no_speculations_cells_it_says_where_speculation_stops_paying(
    tmp_path: Path,
) -> None:
    out = _sweep(tmp_path, plain_cells=True)
    report_sweep(load_config_file(RUN / "sweep-config.yml"), out)
    board = (out / "leaderboard.md").read_text()
    rows = {
        r["candidate"]: r
        for r in csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text()))
    }
    # the random-weight drafter (acceptance 1.1) loses at every C, beyond noise
    assert rows["num_steps=3"]["stops_paying"] == "512 in: slower than the baseline at every C"
    cells = {(c["candidate"], c["concurrency"]): c for c in csv.DictReader(
        io.StringIO((out / "leaderboard-cells.csv").read_text()))}  # fmt: skip
    x1 = cells[("num_steps=3", "1")]
    assert float(x1["speedup_high"]) < 1.0
    plain_c1 = load_results(RUN / "bench-plain" / "results.json").cells[0].stats.output_tok_s
    draft_c1 = load_results(out / "runs" / "num_steps=3" / "r1.json").cells[0].stats.output_tok_s
    assert float(x1["speedup"]) == pytest.approx(draft_c1 / plain_c1)
    assert "| 1 | 512 | none |" in board
    assert "| 16 | 512 | none |" in board
    snippet = (out / "chosen-profile.yml").read_text()
    assert "# Chosen for: mean output tok/s over the plan's cells." in snippet


def _record(repeat: int, value: float, restarted: bool, results: str | None = None) -> RunRecord:
    restart = {"restarted": True} if restarted else None
    return RunRecord("none", repeat, Measurement(value, value), results, restart)


def test_the_band_comes_from_the_runs_requests_when_they_are_at_hand() -> None:
    """Two runs of the plain H200 server at C=1 (P1's ours, runs 0 and 3)."""
    a = load_results(RUN / "p1" / "p1-plain-c1-0-ours.json")
    b = load_results(RUN / "p1" / "p1-plain-c1-3-ours.json")
    files = {"a": a, "b": b}
    obj = Objective()
    runs = [
        _record(0, obj.value(a)[0] or 0, True, "a"),
        _record(1, obj.value(b)[0] or 0, False, "b"),
    ]
    check = warmup_check("none", runs, lambda r: files.get(r.results or ""), obj, Scoring())
    assert check is not None
    assert check.basis.startswith("the runs' requests (bootstrap")
    assert not check.flagged, check.text
    # without the requests, the band is min_gain alone
    bare = warmup_check("none", runs, lambda r: None, obj, Scoring(min_gain=0.001))
    assert bare is not None
    assert bare.band == 0.001
    assert bare.flagged
    # a second run after another restart is no check of warm-up
    assert (
        warmup_check("none", [runs[0], _record(1, 1.0, True)], lambda r: None, obj, Scoring())
        is None
    )
