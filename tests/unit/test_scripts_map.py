"""CONTRIBUTING.md's "The scripts" lists every file of scripts/, and only files that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_map_lists_every_script_and_nothing_else() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## The scripts", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(scripts/[^`\s]+)`", section))
    present = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "scripts").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sorted(present - listed) == [], "files of scripts/ missing from CONTRIBUTING.md"
    assert sorted(listed - present) == [], "CONTRIBUTING.md names files scripts/ lacks"
