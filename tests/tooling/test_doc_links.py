"""Every relative link of the README and docs/ leads somewhere: the file exists and, when the
link names a heading (`file.md#anchor`), the heading does, as GitHub renders its anchor.

The README is short and points into docs/; a section moved or renamed there would otherwise
leave a reader on a dead link, found by no other test."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_INLINE_CODE.sub("", line))
    return lines


def links(text: str) -> list[str]:
    """The relative link targets of a Markdown text (no scheme, no mail)."""
    found = [m for line in _prose(text) for m in _LINK.findall(line)]
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = slug(match[1])
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def broken(document: Path, root: Path = ROOT) -> list[str]:
    """The links of a document that lead nowhere, each with why (paths shown from root)."""
    problems = []
    for target in links(document.read_text()):
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            problems.append(f"{target}: no file {file.relative_to(root)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {file.relative_to(root)}")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(document: Path) -> None:
    assert broken(document) == []


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {
        (ROOT / t.partition("#")[0]).resolve() for t in links((ROOT / "README.md").read_text())
    }
    unlinked = [p.name for p in DOCUMENTS[1:] if p.resolve() not in linked]
    assert unlinked == []


def test_the_readme_opens_with_the_two_commands() -> None:
    opening = (ROOT / "README.md").read_text().split("```")[1]
    assert "make demo" in opening and "make test" in opening


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text(
        "# Other page\n\n## A `code` heading, twice\n\n## A `code` heading, twice\n"
    )
    page = tmp_path.resolve() / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#a-code-heading-twice-1) [ok](#page) [web](https://example.com)\n"
        "`[in code](gone.md)`\n\n```\n[fenced](gone.md)\n```\n"
        "[gone](gone.md) [no heading](other.md#missing) [self](#nowhere)\n"
    )
    assert broken(page, tmp_path.resolve()) == [
        "gone.md: no file gone.md",
        "other.md#missing: no heading #missing in other.md",
        "#nowhere: no heading #nowhere in page.md",
    ]
