"""Write a `Report` out: Gradescope results.json, report.json, report.md and report.html.

Only the trusted parent calls this, after every sandbox is gone. Every JSON file is validated
against its schema before it is written. What students receive is written from
`visibility.student_view(report)` (results not shown at the grading time withheld, every total
the sum of what is shown); `write_outputs(..., students=False)` writes the staff's full copy.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from autograder.grading.results import Report, TestResult
from autograder.grading.visibility import release_of, student_view
from autograder.project import templates
from autograder.project.inert import clip
from autograder.project.schemas import validate
from autograder.questions.answers import NOT_ANSWERED

# Each written file (results.json, report.json, report.md, report.html), whatever the
# submission printed or provoked: past it, printed output and then messages are cut to fit.
MAX_FILE_BYTES = 384 << 10
# (characters of printed output per test, characters per message), tried in order until fit.
_SHRINK_STEPS = ((32 << 10, 4000), (8 << 10, 2000), (2 << 10, 1000), (512, 400), (0, 200))

PART_TITLES = {"multiple_choice": "Multiple choice", "coding": "Coding"}
_ENV = templates.environment(md=lambda text: md_escape(str(text)),
                             fence=lambda text: fence(str(text)))


def md_escape(text: str) -> str:
    """Student-influenced text as plain Markdown text: no headings, links, HTML or tables."""
    text = re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)
    return " ".join(line.strip() for line in text.splitlines())


def fence(text: str) -> str:
    """A code fence longer than any run of backticks inside `text`, so it cannot be closed."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def points(value: float) -> str:
    """Points as shown everywhere: at most two decimals, no trailing zeros (40.47, 70, 1.5)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


_ENV.filters["pts"] = points


def _not_implemented(t: TestResult) -> bool:
    # The cause, decided where the NotImplementedError was seen (never the message's wording).
    return t.status == "failed" and t.part == "coding" and t.cause == "not_implemented"


def shown_tests(report: Report) -> list[TestResult]:
    """The tests as students see them (results.json, report.md, report.html): GPU tests left
    out are dropped (one note says so), and the failures of a function that is not implemented
    yet are one entry for that function, worth their points together."""
    groups: dict[tuple[str, str], list[TestResult]] = {}
    for t in report.tests:
        if _not_implemented(t):
            groups.setdefault((t.item, t.visibility), []).append(t)
    shown, merged = [], set()
    for t in report.tests:
        if t.status == "excluded":
            continue
        key = (t.item, t.visibility)
        if not _not_implemented(t):
            shown.append(t)
        elif key not in merged:
            merged.add(key)
            group = groups[key]
            total = round(sum(round(g.max_score * 100) for g in group)) / 100
            every = "its test" if len(group) == 1 else f"all {len(group)} of its tests"
            if len(group) < sum(1 for x in report.tests if x.item == t.item
                                and x.status != "excluded"):
                every = f"{len(group)} of its tests" if len(group) > 1 else "one of its tests"
            shown.append(TestResult(
                name=f"{t.item}: not implemented yet", part=t.part, item=t.item, score=0.0,
                max_score=total, status="failed", cause="not_implemented",
                message=f"{t.item} is not implemented yet: it raised NotImplementedError in "
                        f"{every}; replace the "
                        f"`raise NotImplementedError` with your code (the docstring is the "
                        f"specification the tests check).",
                visibility=t.visibility))
    return shown


def gradescope_results(report: Report, students: bool = True) -> dict:
    """results.json: what students are shown of `report` (all of it with `students=False`)."""
    if students:
        report = student_view(report)
    tests = []
    for number, t in _numbered(shown_tests(report)):
        entry = {"name": t.name, "number": number, "score": t.score,
                 "max_score": t.max_score,
                 "output": _test_output(t), "visibility": t.visibility,
                 "tags": [t.part, t.item]}
        if t.status in ("passed", "failed"):  # pending, withheld: no verdict to show
            entry["status"] = t.status
        tests.append(entry)
    summary = []
    if report.graded_file:
        summary.append(f"Graded file: {report.graded_file.file}. "
                       f"{report.graded_file.why}".rstrip(". ") + ".")
    summary += [_part_line(report, p.name) for p in report.parts]
    counted = counted_note(report)
    if counted:
        summary.append(counted)
    if report.late:
        penalty = round(report.late.raw_score - report.score, 2)
        summary.append(f"Late: {report.late.message} Total {points(report.late.raw_score)}"
                       f" -> {points(report.score)}.")
        if penalty:  # an entry of its own, so that the tests still add up to the score
            tests.append({"name": "Late penalty", "number": "3.1", "score": -penalty,
                          "max_score": 0.0, "output": report.late.message,
                          "visibility": "visible", "tags": ["late"]})
    return {
        "score": report.score, "execution_time": report.execution_time,
        "output": "\n".join(summary + [f"Note: {w}" for w in report.warnings]),
        "output_format": "text", "test_output_format": "text",
        "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
    }


def _part_line(report: Report, part: str) -> str:
    """'Coding: 62.5 / 70', or what of the part is not shown yet."""
    row = part_row(report, part)
    if not row.held:
        return f"{row.title}: {row.score} / {row.out_of}"
    if row.score is None:
        return f"{row.title}: not shown yet ({row.held} points, not counted yet)"
    return (f"{row.title}: {row.score} / {row.shown} shown so far, "
            f"{row.held} more points not counted yet")


@dataclass(frozen=True)
class PartRow:
    """What a student is shown of one part's total, as text (points())."""

    title: str
    score: str | None  # None when none of its results is shown: a total of 0 would mislead
    out_of: str
    shown: str  # the points of the results shown
    held: str  # the points of those withheld; '' when none is


def part_row(report: Report, part: str) -> PartRow:
    """One part's row, for results.json's summary and both pages' table."""
    mine = [t for t in report.tests if t.part == part and t.status != "excluded"]
    withheld = [t for t in mine if t.status == "withheld"]
    score = next(p.score for p in report.parts if p.name == part)
    most = next(p.max_score for p in report.parts if p.name == part)
    held = round(sum(t.max_score for t in withheld), 2)
    return PartRow(PART_TITLES[part],
                   None if withheld and len(withheld) == len(mine) else points(score),
                   points(most), points(round(most - held, 2)),
                   points(held) if withheld else "")


def counted_note(report: Report) -> str | None:
    """What the score of a student view counts, when some results are withheld from it."""
    held = [t for t in report.tests if t.status == "withheld"]
    if not held:
        return None
    points_held = points(round(sum(t.max_score for t in held), 2))
    if all(t.visibility == "after_due_date" for t in held):
        when = f"shown, and counted, {release_of(report).when()}, once your submission is " \
               f"graded again"
    else:
        when = "not counted in the score shown to you"
    mc_only = all(t.part == "multiple_choice" for t in held) and not any(
        t.score for t in report.tests if t.part == "multiple_choice")
    if mc_only:  # grading.yml's default before the due date
        return (f"This score counts the coding part only: right or wrong of the multiple-choice "
                f"answers ({points_held} points) is {when}.")
    return (f"This score counts only the results shown now: {len(held)} result(s) worth "
            f"{points_held} points are {when}.")


def _numbered(tests: list[TestResult]):
    counters: dict[str, int] = {}
    for t in tests:
        part_number = 1 if t.part == "multiple_choice" else 2
        counters[t.part] = counters.get(t.part, 0) + 1
        yield f"{part_number}.{counters[t.part]}", t


def _test_output(t: TestResult) -> str:
    lines = [t.message] if t.message else []
    lines += t.feedback
    if t.output:
        lines += ["", "Your code printed:", t.output]
    return "\n".join(lines)


@dataclass
class _FunctionRow:
    name: str
    score: float | None  # None: some of its results are not shown yet
    max_score: float
    tests: int


@dataclass
class _PartView:
    name: str
    failed: list[TestResult]
    passed: list[TestResult]
    withheld: int
    common: str = ""  # one message shared by every failed item (say, no answers file)
    pending: list[TestResult] = field(default_factory=list)  # 0 until a regrade on a GPU
    after_due: int = 0  # of `withheld`: shown after the due date
    functions: list[_FunctionRow] = field(default_factory=list)
    # Questions left out, listed on one line rather than one box each (out of `failed`).
    unanswered: list[TestResult] = field(default_factory=list)
    withheld_points: float = 0.0

    @property
    def unanswered_line(self) -> str:
        """'Not answered (3 questions, 4.5 points): q03, q07, q11', and why when it is more than
        a question left out ('... (no answers file found ...)'): the line stands for the
        questions' own messages, which must reach the student."""
        ids = ", ".join(t.item for t in self.unanswered)
        worth = points(sum(t.max_score for t in self.unanswered))
        count = len(self.unanswered)
        why = sorted({t.message for t in self.unanswered} - {NOT_ANSWERED})
        return (f"Not answered ({count} question{'s' * (count != 1)}, {worth} "
                f"point{'s' * (worth != '1')}): {ids}" + "".join(f" ({w})" for w in why))


def _unanswered(t: TestResult) -> bool:
    # The cause, set where the answer was read; the message is for people and may be reworded.
    return t.part == "multiple_choice" and t.status == "failed" and t.cause == "not_answered"


def _part_views(report: Report) -> list[_PartView]:
    """Each part of a student view (student_view) as the pages show it."""
    everything = shown_tests(report)
    views = []
    for part in report.parts:
        tests = [t for t in everything if t.part == part.name]
        held = [t for t in tests if t.status == "withheld"]
        failed = [t for t in tests if t.status == "failed"]
        view = _PartView(part.name, failed, [t for t in tests if t.status == "passed"],
                         len(held), pending=[t for t in tests if t.status == "pending"],
                         after_due=sum(t.visibility == "after_due_date" for t in held),
                         withheld_points=round(sum(t.max_score for t in held), 2))
        messages = {t.message for t in failed}
        if len(failed) == len(tests) > 3 and len(messages) == 1 and not any(t.feedback
                                                                        for t in failed):
            view.common, view.failed = f"All {len(failed)}: {messages.pop()}", []
        view.unanswered = [t for t in view.failed if _unanswered(t)]
        view.failed = [t for t in view.failed if not _unanswered(t)]
        for f in report.functions:
            if f.part != part.name:
                continue
            hidden = any(t.status == "withheld" for t in report.tests
                         if t.item == f.name and t.part == f.part)
            view.functions.append(_FunctionRow(f.name, None if hidden else f.score,
                                               f.max_score, f.tests))
        views.append(view)
    return views


# The files write_outputs writes: every one of them is for the student (each follows the
# visibility of its tests); autograder.batch.feedback releases exactly these.
REPORT_FILES = ("results.json", "report.json", "report.md", "report.html")


def write_outputs(report: Report, out: Path, schemas: Path, students: bool = True) -> Report:
    """Write the four files; JSON is validated first (against the schemas of the folder
    `schemas`, the project's), and each file is replaced atomically.
    They hold what students may see of `report` (student_view); with `students=False`, all of
    it (the staff's copy).

    Returns the report as written: the same, or with printed output and messages cut so that
    no file exceeds MAX_FILE_BYTES (callers keep that one, e.g. for the gradebook), in full.
    """
    out.mkdir(parents=True, exist_ok=True)
    written, files = report, _render(report, schemas, students)
    for output_limit, message_limit in _SHRINK_STEPS:
        if max(len(text.encode("utf-8")) for text in files.values()) <= MAX_FILE_BYTES:
            break
        written = _shrunk(report, output_limit, message_limit)
        files = _render(written, schemas, students)
    for name, text in files.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
    return written


def _render(report: Report, schemas: Path, students: bool = True) -> dict[str, str]:
    if students:
        report = student_view(report)
    results, data = gradescope_results(report, students=False), report.to_json()
    validate(results, "gradescope_results.schema.json", "results.json", schemas)
    validate(data, "report.schema.json", "report.json", schemas)
    context = {"r": report, "parts": _part_views(report), "part_titles": PART_TITLES,
               "counted": counted_note(report), "when": release_of(report).when(),
               "part_rows": [part_row(report, p.name) for p in report.parts]}
    return {
        "results.json": json.dumps(results, indent=2),
        "report.json": json.dumps(data, indent=2),
        "report.md": _ENV.get_template("report.md.j2").render(context),
        "report.html": _ENV.get_template("report.html.j2").render(context),
    }


def _shrunk(report: Report, output_limit: int, message_limit: int) -> Report:
    def fit(t: TestResult) -> TestResult:
        output = t.output
        if len(output) > output_limit:
            output = output[:output_limit] + "\n[output cut to keep the report small]"
        return replace(t, output=output, message=clip(t.message, message_limit),
                       feedback=[clip(line, message_limit) for line in t.feedback])

    return replace(report, tests=[fit(t) for t in report.tests],
                   warnings=[clip(w, message_limit) for w in report.warnings])
