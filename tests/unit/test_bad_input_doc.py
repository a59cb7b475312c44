"""docs/bad-input.md's counts are what scripts/checks/count-bad-inputs.py reads from the tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugins.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


def test_the_doc_table_is_the_scripts_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_script("checks/count-bad-inputs.py").main(["--markdown"]) == 0
    table = capsys.readouterr().out.strip()
    doc = (REPO / "docs" / "bad-input.md").read_text(encoding="utf-8")
    begin, end = "<!-- count-bad-inputs: begin -->\n", "\n<!-- count-bad-inputs: end -->"
    assert doc[doc.index(begin) + len(begin) : doc.index(end)] == table
    assert int(table.rsplit("\n", 1)[1].split()[0]) >= 190
