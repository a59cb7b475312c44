"""The documentation holds together: README.md stays short (<= 10 KB, issue 32) and every
relative link in README.md, CONTRIBUTING.md, docs/**/*.md and the READMEs beside the code
points at a file or folder that exists, and at a heading that exists when it names one in
a Markdown page."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
README_LIMIT = 10 * 1024

# [text](target) outside code; images too. A target is everything up to the closing
# parenthesis (the docs never put one inside a link target).
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def _pages() -> list[Path]:
    """The front pages, docs/, and the READMEs that stay beside their code (roles, the
    collections, the lab, the inventories)."""
    beside = [
        *(REPO / "roles").glob("*/README.md"),
        *(REPO / "collections").rglob("*.md"),
        *(REPO / "inventory").rglob("*.md"),
        *(REPO / "src").rglob("*.md"),
        *(REPO / "lab").rglob("*.md"),
    ]
    return [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted(beside),
    ]


def _prose_lines(text: str, *, drop_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed unless not
    ``drop_code`` (a heading's anchor keeps its code's text)."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, _INLINE_CODE.sub("", line) if drop_code else line))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """Each relative link target of a Markdown text with its line number."""
    found = []
    for number, line in _prose_lines(text):
        for target in _LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # a URL (https:, mailto:): not a file here
            found.append((number, target))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces
    to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (repeated ones numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(text, drop_code=False):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """What is wrong with each relative link of ``page`` (a page under ``root``), as
    ``page:line: target: why``."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for number, target in links(text):
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / unquote(path_part)).resolve() if path_part else page
        where = f"{page.relative_to(root)}:{number}: {target}"
        if root.resolve() not in dest.parents and dest != root.resolve():
            problems.append(f"{where}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif (
            fragment
            and dest.suffix == ".md"
            and dest.is_file()
            and fragment not in anchors(dest.read_text(encoding="utf-8"))
        ):
            problems.append(f"{where}: no heading #{fragment} in {dest.name}")
    return problems


def test_readme_is_at_most_10_kb() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= README_LIMIT, (
        f"README.md is {size} bytes, over {README_LIMIT}: move detail into docs/ and link it"
    )


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_code_fences_are_closed(page: Path) -> None:
    """An unclosed fence would turn the rest of the page into code (and hide its links)."""
    fences = [n for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
              if _FENCE.match(line)]  # fmt: skip
    assert len(fences) % 2 == 0, f"{page.name}: the fence on line {fences[-1]} is not closed"


def test_every_docs_page_is_reachable_from_the_index() -> None:
    index = REPO / "docs" / "index.md"
    reached = {
        (index.parent / t.partition("#")[0]).resolve()
        for _, t in links(index.read_text(encoding="utf-8"))
        if t.partition("#")[0]
    }
    orphans = [
        str(p.relative_to(REPO))
        for p in (REPO / "docs").rglob("*.md")
        if p != index and p.resolve() not in reached
    ]
    assert orphans == [], "docs/index.md links none of these pages"


def test_the_checker_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    """The checks above can fail: a missing file, a missing heading, code ignored."""
    text = (
        "# Title\n\n## The PVE API token\n\n## Rollout (`rollout.yml`)\n\n"
        "[ok](index.md) [file](no-such-page.md) [anchor](#the-pve-api-token)\n"
        "[bad anchor](#nope) `[in code](gone.md)`\n```\n[fenced](gone.md)\n```\n"
        "[url](https://example.org/x.md)\n"
    )
    assert [t for _, t in links(text)] == [
        "index.md", "no-such-page.md", "#the-pve-api-token", "#nope",
    ]  # fmt: skip
    assert anchors(text) == {"title", "the-pve-api-token", "rollout-rolloutyml"}
    assert slug("2. The PVE API token") == "2-the-pve-api-token"
    assert slug("Rollout (`playbooks/rollout.yml`)") == "rollout-playbooksrolloutyml"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Index\n", encoding="utf-8")
    probe = tmp_path / "docs" / "probe.md"
    probe.write_text(text + "[outside](../../etc/passwd)\n", encoding="utf-8")
    problems = broken_links(probe, root=tmp_path)
    assert len(problems) == 3, problems
    assert "no-such-page.md: no such file" in problems[0]
    assert "no heading #nope" in problems[1]
    assert "points outside the repository" in problems[2]
