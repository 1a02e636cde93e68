"""The README and docs/ agree with the tree: every relative link leads to a file and, when
it names a heading (`file.md#anchor`), to the heading as GitHub renders its anchor; every
repository path they name in code (`tests/...`, `core/ports.py`) exists.

The README is short and points into docs/, and docs/extending.md names the files to touch: a
section moved or renamed, or a file moved, would otherwise leave a reader on a dead
pointer, found by no other test."""

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


# Where a path in code spans starts: the repository's folders, and the library's own
# (`core/ports.py` is layers/sg_reconciler/core/ports.py).
_TOP = frozenset(
    [
        "tests",
        "layers",
        "functions",
        "tools",
        "statemachine",
        "events",
        "examples",
        "benchmarks",
        "docs",
        "powertools",
    ]
)
_LIBRARY = ("core", "app", "adapters", "trigger")
# A folder (`docs/`) or a file with an extension (`core/ports.py`); `pacing.ReadPacer` is a name.
_PATH = re.compile(r"`((?:[\w.-]+/)+(?:[\w.-]*\.[a-z0-9]+)?)(?:::\w+)?`")


def named_paths(text: str) -> list[str]:
    """The repository paths a text names in code spans (`tests/x/test_y.py`, `docs/`), as
    paths from the root; templates (`<step>`) and globs are not paths."""
    found = []
    for path in _PATH.findall(text):
        top = path.split("/", 1)[0]
        if top in _LIBRARY:
            found.append(f"layers/sg_reconciler/{path}")
        elif top in _TOP:
            found.append(path)
    return found


def missing_paths(document: Path, root: Path = ROOT) -> list[str]:
    """The paths a document names that the tree does not hold."""
    return [p for p in named_paths(document.read_text()) if not (root / p).exists()]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_the_docs_name_is_in_the_tree(document: Path) -> None:
    assert missing_paths(document) == []


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


def test_a_path_the_tree_lacks_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_here.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text(
        "`tests/test_here.py::test_x` `tests/` `core/gone.py` `docs/gone.md` "
        "`app/steps/<step>.py` `events/*.json` `adapters/pacing.ReadPacer` `not/a/top.py`\n"
    )
    assert missing_paths(page, tmp_path) == ["layers/sg_reconciler/core/gone.py", "docs/gone.md"]


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
