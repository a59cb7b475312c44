"""The recorded flag lists and the texts that speak of them agree.

Every version the translator knows (``known_versions``) is a file in
``module_utils/engine/flag_lists/`` whose own ``engine`` and ``version`` say the same
as its name, with flags in it; and no text of the repository (code, roles, inventories,
docs) says that a version the translator knows has no recorded list. The second half
failed on ``engine_flags.py``, which named vLLM 0.20.1 "a release without a recorded
list" after its list was recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible_collections.specops.infra.plugins.module_utils.speculative import engines

REPO = Path(__file__).resolve().parents[2]
ENGINES = ("vllm", "sglang")
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".j2", ".txt", ".sh"}
# A claim that something has no recorded flag list ...
ABSENT = re.compile(
    r"(?:no|without an?|lacks? an?|missing)\s+(?:recorded|extracted)\s+(?:flag\s+)?list"
    r"|has\s+no\s+flag\s+list",
    re.IGNORECASE,
)
# ... and an engine version named within the same sentence.
VERSION = re.compile(r"\b(vllm|sglang)\s+v?(\d+\.\d+(?:\.\d+)?)\b", re.IGNORECASE)


# Where a text about flag lists can be (code, roles, inventories, docs, scripts).
SCANNED = ("collections", "src", "lab/src", "roles", "playbooks", "inventory", "docs",
           "templates", "scripts", "ee", "README.md", "CONTRIBUTING.md")  # fmt: skip


def _texts() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        root = REPO / name
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        found += [
            p
            for p in paths
            if p.suffix in TEXT_SUFFIXES and p.is_file() and "__pycache__" not in p.parts
        ]
    return found


def _sentences(text: str) -> list[tuple[int, str]]:
    """(line number, sentence) for each sentence, across line breaks and comment marks."""
    out: list[tuple[int, str]] = []
    start_line, buf = 1, []
    for n, line in enumerate(text.splitlines(), 1):
        body = line.strip().lstrip("#/*-").strip()
        if not body:
            if buf:
                out.append((start_line, " ".join(buf)))
            start_line, buf = n + 1, []
            continue
        if not buf:
            start_line = n
        buf.append(body)
        if body.endswith((".", ":", ";")):
            out.append((start_line, " ".join(buf)))
            start_line, buf = n + 1, []
    if buf:
        out.append((start_line, " ".join(buf)))
    return out


def absent_claims_about_known_versions(paths: list[Path]) -> list[str]:
    known = {(e, v) for e in ENGINES for v in engines.known_versions(e)}
    wrong = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for line, sentence in _sentences(text):
            for claim in ABSENT.finditer(sentence):
                # The version the claim is about: named after it, or just before it.
                window = sentence[max(0, claim.start() - 80) : claim.end() + 80]
                for m in VERSION.finditer(window):
                    engine, version = m.group(1).lower(), m.group(2)
                    if (engine, version) in known:
                        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                        wrong.append(f"{rel}:{line}: {engine} {version} has a list: ...{window}...")
    return wrong


@pytest.mark.parametrize("engine", ENGINES)
def test_every_known_version_is_a_recorded_list_that_says_so(engine: str) -> None:
    versions = engines.known_versions(engine)
    assert versions, f"no recorded flag list of {engine} in {engines.FLAG_LISTS}"
    for version in versions:
        path = engines.FLAG_LISTS / f"{engine}-{version}-flags.json"
        assert path.is_file(), path
        data = json.loads(path.read_text(encoding="utf-8"))
        assert (data["engine"], data["version"]) == (engine, version), path
        assert data["flags"], f"{path}: no flags"


def test_no_text_says_a_known_version_has_no_recorded_list() -> None:
    wrong = absent_claims_about_known_versions(_texts())
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_such_a_text(tmp_path: Path) -> None:
    """The control: the sentence engine_flags.py had is found, a true one is not."""
    newest = engines.known_versions("vllm")[-1]
    stale = tmp_path / "stale.py"
    stale.write_text(
        f'"""An engine built from a pull-request ref, or a release without a recorded\n'
        f'list (vLLM {newest}), is checked against what that build accepts."""\n'
    )
    true = tmp_path / "true.md"
    true.write_text("vLLM 0.19.0 has no recorded flag list: extract it.\n")
    assert len(absent_claims_about_known_versions([stale])) == 1
    assert absent_claims_about_known_versions([true]) == []
