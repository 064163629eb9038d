"""The documentation holds together: README.md stays a short entry page, and every relative
link of README.md and docs/*.md reaches an existing file and, for `#anchor`, an existing heading
(anchors made as GitHub makes them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base, n = slug(match.group(2)), 0
            name = base
            while name in found:  # GitHub numbers repeated headings: x, x-1, x-2
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            found.append((number, match.group(1)))
    return found


def test_the_readme_is_a_short_entry_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, "README.md: at most 150 lines; the rest goes in docs/"
    # The two set-up commands, as CI (.ci/run) and a fresh machine use them.
    assert "make demo" in text and "make test" in text
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in text, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not goal.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
            broken.append(f"{where} (no such heading in {goal.relative_to(ROOT)})")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_pages_document_the_present_not_their_history(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    history = re.findall(r"(?i)\b(?:before|since|issue) #\d+", text)
    assert not history, f"{page.relative_to(ROOT)}: {history}"


def test_the_slugs_are_githubs() -> None:
    assert slug("Batch grading (`autograder batch`)") == "batch-grading-autograder-batch"
    assert slug("4. Hidden tests: how they reach student code") == \
        "4-hidden-tests-how-they-reach-student-code"
    assert slug("Isolation modes, and when grading refuses") == \
        "isolation-modes-and-when-grading-refuses"
