"""Speed-up over no speculation per cell, on the H200's recorded figures.

On one H200 (vLLM 0.20.1, 1B model) ngram k=4 and a draft model k=3 ran 2.2-3.7x
slower than no speculation: the report puts each speculative cell beside the plain
cell of the same concurrency and context, by key.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from plugins.h200 import measure, recorded

from specops.bench.compare import SPEEDUP_COLUMNS, speedup_rows
from specops.bench.report import render_markdown, write_report
from specops.bench.results import Results
from specops.cli import main


@pytest.fixture
def template(synthetic) -> Results:
    return measure(synthetic)


def test_speedup_per_cell_shows_the_h200_loss(template: Results) -> None:
    plain, draft = recorded(template, "none"), recorded(template, "draft_model")
    rows = {(r["concurrency"], r["context_tokens"]): r for r in speedup_rows(plain, draft)}
    assert set(rows) == {(1, 512), (4, 512), (16, 512)}
    c1 = rows[(1, 512)]
    assert c1["output_tok_s"] == pytest.approx(135.95, abs=0.01)
    assert c1["plain_output_tok_s"] == pytest.approx(507.17, abs=0.01)
    assert c1["speedup"] == pytest.approx(135.95 / 507.17, rel=1e-3)  # 0.27: 3.7x slower
    assert c1["tpot_speedup"] == pytest.approx(1.831 / 7.118, rel=1e-3)
    assert c1["mean_acceptance_length"] == pytest.approx(1.089, abs=1e-3)
    assert all(r["note"] == "slower than no speculation" for r in rows.values())
    assert {c.key for c in SPEEDUP_COLUMNS} == set(c1)  # every column has its key


def test_cells_are_matched_by_key_not_position(template: Results) -> None:
    plain, ngram = recorded(template, "none"), recorded(template, "ngram", scale=2.5)
    plain.cells.reverse()  # another order
    del plain.cells[0]  # the C=16 cell: not in the plain baseline
    rows = {r["concurrency"]: r for r in speedup_rows(plain, ngram)}
    assert rows[1]["speedup"] == pytest.approx(234.06 * 2.5 / 507.17, rel=1e-3)  # 1.15x
    assert rows[1]["note"] == ""
    assert rows[16]["plain_output_tok_s"] is None
    assert rows[16]["speedup"] is None
    assert rows[16]["note"] == "not in the plain baseline"


def test_report_and_csv_show_the_speedup(template: Results, tmp_path: Path) -> None:
    plain, ngram = recorded(template, "none"), recorded(template, "ngram")
    assert "Speed-up over no speculation" not in render_markdown(ngram, [])
    md = render_markdown(ngram, [], plain=plain)
    section = md.split("## Speed-up over no speculation", 1)[1].split("\n## ", 1)[0]
    assert f"plain baseline `{plain.run_id}`" in section
    assert "| C | context | out tok/s | plain out tok/s | x plain |" in section
    assert "| 1 | 512 | 234.1 | 507.2 | 0.46 |" in section
    plain_path = plain.save(tmp_path / "plain" / "results.json")
    spec_path = ngram.save(tmp_path / "ngram" / "results.json")
    assert main(["bench", "report", str(spec_path), "--plain", str(plain_path)]) == 0
    table = list(csv.DictReader(io.StringIO((tmp_path / "ngram" / "speedup.csv").read_text())))
    assert list(table[0]) == [c.key for c in SPEEDUP_COLUMNS]
    assert [round(float(r["speedup"]), 2) for r in table] == [0.46, 0.47, 0.47]
    assert "## Speed-up over no speculation" in (tmp_path / "ngram" / "report.md").read_text()
    # without --plain: no speed-up file or table
    write_report(ngram, tmp_path / "alone")
    assert not (tmp_path / "alone" / "speedup.csv").exists()
