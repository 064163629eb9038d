"""The documentation holds together: README.md stays a short entry page; every relative link of
README.md and docs/*.md reaches an existing file and, for `#anchor`, an existing heading (anchors
made as GitHub makes them); the pages describe what is, not how it came to be; every script,
test file and test they cite exists, with the options cited; and every measured figure of
docs/measuring.md names the command that measured it and the machine."""

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


# Phrases that tell the project's history instead of what is: issue numbers, the sessions and
# stops of its making, what the code used to do, figures "measured again" or from a "previous VM".
HISTORY = re.compile(
    r"(?i)\bissues? #?\d+"
    r"|(?<![\w&/])#\d+\b"
    r"|\b(?:before|since|after) #\d+"
    r"|\b(?:last|previous|this|next) session\b"
    r"|\bstop \d+\b"
    r"|\b(?:it|this|that|they|we|which|grading|the grader) used to\b"
    r"|\b(?:previous|earlier|older|last) (?:VM|virtual machine|machine measured)\b"
    r"|\bmeasured (?:again|before|after)\b"
    r"|\bnow fixed\b"
    r"|\b(?:before|after) (?:the|this) (?:fix|change)\b")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def prose(text: str) -> str:
    """The page's prose: fenced blocks, code spans and link targets left out (an example
    command's `--reason "regrade request #12"` or a link's `#5-points` is no history)."""
    lines = "\n".join(line for _, line in prose_lines(text))
    return LINK_TARGET.sub("]()", CODE_SPAN.sub("``", lines))


def history(text: str) -> list[str]:
    return [match.group(0) for match in HISTORY.finditer(prose(text))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_pages_document_the_present_not_their_history(page: Path) -> None:
    found = history(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: {found}"


def test_history_is_recognised() -> None:
    told = ["Fixed in issue 27.", "Since #28 the report is a record.", "As of the last session,",
            "found at stop 3", "It used to retry.", "grading used to be slow",
            "on the previous VM it took 7 s", "measured again once ranks were kept",
            "a bug, now fixed"]
    for sentence in told:
        assert history(sentence), sentence
    present = ["`--reason \"regrade request #12\"`",
               "[points](AUTHORING.md#5-points-and-visibility)",
               "```sh\nautograder override --reason 'see #12'\n```", "the store is used to meet",
               "3 days late", "a session of the grader", "a folder an earlier release made",
               "the last run of each student"]
    for sentence in present:
        assert not history(sentence), sentence


def test_the_slugs_are_githubs() -> None:
    assert slug("Batch grading (`autograder batch`)") == "batch-grading-autograder-batch"
    assert slug("4. Hidden tests: how they reach student code") == \
        "4-hidden-tests-how-they-reach-student-code"
    assert slug("Isolation modes, and when grading refuses") == \
        "isolation-modes-and-when-grading-refuses"


# What the pages cite: scripts and benchmarks (with their options), test files, and tests.
CITED_PATH = re.compile(r"(?<![\w./-])((?:bench|scripts|tests)/[\w./-]*[\w/])(::\w+)?")
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
TEST_NAME = re.compile(r"^test_\w+$")


def commands(text: str) -> list[str]:
    """What a page cites as code: each code span (which may run over a line break) and each
    line of a fenced block, comments cut off, whitespace made single."""
    found, block, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced:
            found.append(re.split(r"\s#\s", line)[0])
        else:
            block.append(line)
    found += re.findall(r"`([^`]+)`", "\n".join(block))
    return [" ".join(code.split()) for code in found]


def citations(text: str) -> list[tuple[str, str | None, list[str]]]:
    """(path, test function or None, options after the path in the same command) of every
    bench/, scripts/ or tests/ path a page cites as code."""
    found = []
    for code in commands(text):
        for match in CITED_PATH.finditer(code):
            rest = re.split(r"[|;>&]", code[match.end():])[0]
            options = OPTION.findall(rest) if match.group(1).endswith((".py", ".sh")) else []
            test = match.group(2)[2:] if match.group(2) else None
            found.append((match.group(1), test, options))
    return found


def cited_problems(text: str, root: Path = ROOT) -> list[str]:
    problems = []
    for path, test, options in citations(text):
        file = root / path
        if not file.exists():
            problems.append(f"{path}: no such file")
            continue
        source = file.read_text(encoding="utf-8") if file.is_file() else ""
        if test and f"def {test}(" not in source:
            problems.append(f"{path}::{test}: no such test")
        for option in options:
            if not re.search(rf"[\"']{re.escape(option)}[\"']|^\s*{re.escape(option)}[|)]",
                             source, re.MULTILINE):
                problems.append(f"{path} {option}: the script has no such option")
    return problems


def defined_tests(root: Path = ROOT) -> set[str]:
    names: set[str] = set()
    for folder in ("tests", "assignments"):
        for file in (root / folder).rglob("test_*.py"):
            names.update(re.findall(r"^\s*def (test_\w+)\(", file.read_text(encoding="utf-8"),
                                    re.MULTILINE))
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cited_scripts_tests_and_options_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    problems = cited_problems(text)
    tests = defined_tests()
    problems += [f"{name}: no such test" for name in commands(text)
                 if TEST_NAME.match(name) and name not in tests]
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)


def test_a_wrong_citation_is_found() -> None:
    assert not cited_problems("`bench/batch_vs_loop.py --copies 4\n--rounds 2 --assignment x`")
    assert not cited_problems("```sh\n.venv/bin/python scripts/soak_reference.py -a ddp_training"
                              " --runs 100 --minutes 10   # time-boxed\n```")
    assert cited_problems("`bench/batch_vs_loop.py --copys 4`") == [
        "bench/batch_vs_loop.py --copys: the script has no such option"]
    assert cited_problems("`scripts/no_such_script.py`") == [
        "scripts/no_such_script.py: no such file"]
    assert cited_problems("```sh\npython bench/gone.py --runs 3\n```") == [
        "bench/gone.py: no such file"]
    assert cited_problems("`pytest tests/test_docs.py::test_nothing_of_the_kind`") == [
        "tests/test_docs.py::test_nothing_of_the_kind: no such test"]
    assert not cited_problems("`pytest tests/test_docs.py::test_a_wrong_citation_is_found`")
    assert "test_a_wrong_citation_is_found" in defined_tests()


# docs/measuring.md: each section that holds a measured figure names, in it, the command that
# measured it and the machine it ran on.
FIGURE = re.compile(r"\b\d[\d.,]*\s?(?:s|ms|min|MB|MiB|GiB|CPU-s|x)\b")
COMMAND = re.compile(r"`(?:[A-Z_]+=\S+ )*(?:time )?(?:bash )?(?:\.venv/bin/)?(?:python (?:-m )?)?"
                     r"(?:bench/|scripts/|pytest |make |\.ci/run|autograder )")
MACHINE = re.compile(r"2-core VM|\bH200\b")


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each `## ` section."""
    parts = re.split(r"^## (.*)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def unattributed(text: str) -> list[str]:
    problems = []
    for heading, body in sections(text):
        if heading == "The scripts" or not FIGURE.search(prose(body)):
            continue
        if not any(COMMAND.match(f"`{code}") for code in commands(body)):
            problems.append(f"{heading}: measured figures, but no command that measures them")
        if not MACHINE.search(" ".join(body.split())):
            problems.append(f"{heading}: measured figures, but not the machine")
    return problems


def test_every_measured_figure_names_its_command_and_machine() -> None:
    problems = unattributed((ROOT / "docs" / "measuring.md").read_text(encoding="utf-8"))
    assert not problems, "docs/measuring.md: " + "; ".join(problems)


def test_a_figure_without_its_command_or_machine_is_found() -> None:
    good = "## Speed\n\n`bench/ray_vs_local.py --rounds 3` on the 2-core VM: **1.6 s**.\n"
    assert unattributed(good) == []
    assert unattributed("## Speed\n\nOn the 2-core VM a grading takes 5.3 s.\n") == [
        "Speed: measured figures, but no command that measures them"]
    assert unattributed("## Speed\n\n`bench/ray_vs_local.py` gives 1.04x.\n") == [
        "Speed: measured figures, but not the machine"]
