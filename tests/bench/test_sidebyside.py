"""Runs side by side (``specops bench compare RUN...``) on the H200's recorded SGLang
runs of one plan (512 in / 128 out, C = 1, 4, 16): no speculation (the baseline), the
draft model at 3 steps (a sweep candidate's runs directory) and NGRAM."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from plugins.scripts import REPO

from specops import cli
from specops.bench.report import write_report
from specops.bench.results import load_results
from specops.bench.sidebyside import delta_rows, load_run_set
from specops.errors import ValidationError

RUN = REPO / "tests" / "fixtures" / "gpu-serving" / "h200-sglang-2026-12-03-run2"
PLAIN = str(RUN / "bench-plain" / "results.json")
DRAFT = str(RUN / "sweep" / "runs" / "num_steps=3")  # a sweep candidate's runs
NGRAM = str(RUN / "bench-ngram")  # a run directory
OFF = ["--throughput-drop", "off", "--latency-rise", "off", "--acceptance-drop", "off"]


def test_any_number_of_runs_side_by_side_with_intervals(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    assert cli.main(["bench", "compare", PLAIN, DRAFT, NGRAM, "--out", str(out), *OFF]) == 0
    text = capsys.readouterr().out
    assert "num_steps=3 vs bench-plain (baseline):" in text
    assert "bench-ngram vs bench-plain (baseline):" in text
    assert "0 regression(s)" in text
    for name in ("compare.md", "compare.csv", "throughput.png", "tpot.png", "acceptance.png"):
        assert (out / name).stat().st_size > 0
    rows = list(csv.DictReader(io.StringIO((out / "compare.csv").read_text())))
    assert [(r["run"], r["concurrency"]) for r in rows] == [
        ("num_steps=3", "1"), ("num_steps=3", "4"), ("num_steps=3", "16"),
        ("bench-ngram", "1"), ("bench-ngram", "4"), ("bench-ngram", "16"),
    ]  # fmt: skip
    plain = load_results(PLAIN).cells
    draft = load_results(Path(DRAFT) / "r1.json").cells
    for row, p, d in zip(rows[:3], plain, draft, strict=True):
        assert float(row["output_ratio"]) == pytest.approx(
            d.stats.output_tok_s / p.stats.output_tok_s
        )
        assert float(row["output_ratio_high"]) < 1.0
        assert row["verdict"] == "slower beyond noise"
    report = (out / "compare.md").read_text()
    assert "| num_steps=3 | 1 | 512 | 229.1 [" in report
    assert "![throughput.png](throughput.png)" in report


def test_the_gate_is_the_rollouts_comparison(capsys) -> None:
    # default thresholds: the draft model's -62 % at C=1 is a regression
    assert cli.main(["bench", "compare", PLAIN, DRAFT, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == ["bench-plain", "num_steps=3"]
    assert data["regressions"] >= 3
    assert {d["verdict"] for d in data["deltas"]} == {"slower beyond noise"}
    assert data["deltas"][0]["output_ratio"]["low"] < data["deltas"][0]["output_ratio"]["value"]


def test_a_run_set_names_what_is_wrong(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValidationError, match=r"^RUN\[2\]: .*: no such file or directory"):
        load_run_set(str(tmp_path / "nope"), "RUN[2]")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValidationError, match=r"no results\.json and no results files"):
        load_run_set(str(tmp_path / "empty"), "RUN[2]")
    assert cli.main(["bench", "compare", PLAIN]) == 2
    assert "RUN: give at least two runs" in capsys.readouterr().err
    # the same run twice: labels kept apart, every ratio 1 with no spread
    same = load_run_set(PLAIN, "baseline")
    assert all(r["output_ratio"].value == 1.0 for r in delta_rows(same, same))


def test_the_report_says_where_speculation_stops_paying(tmp_path: Path) -> None:
    report = write_report(
        load_results(Path(DRAFT) / "r1.json"), tmp_path, plain=load_results(PLAIN)
    )
    text = report.read_text()
    assert "Where speculation stops paying" in text
    assert "512 in: slower than the baseline at every C" in text
    rows = list(csv.DictReader(io.StringIO((tmp_path / "speedup.csv").read_text())))
    assert all(float(r["speedup_high"]) < 1.0 for r in rows)
