"""The class overview, OUT/index.html: who needs a look, how each student did on each function,
what was hard, what went wrong and for whom.

`write_overview(rows, assignment, out)` reads the gradebook's latest run of each submission and
writes one self-contained static page (no script, no external address: it opens from the disk;
the page's Content-Security-Policy enforces it). In order:

1. who needs a look: every submission whose status (autograder.batch.submission_status) is not
`ok`
   (flagged, grader error, no module, not importable, timed out, crashed, blank), with the reason
   and a link to the report;
2. the numbers (submissions, graded, statuses, mean, median);
3. a student x function table, sorted by total: points per function, colour-coded;
4. pass rates: the score histogram, then per part one chart (coding: one bar per function;
   multiple choice: one bar per question) at most one screen tall, the per-test detail of each
   function folded (`<details>`) under it;
5. the common failure messages and the students behind each; a blank, module-less or
   unimportable submission counts once, with one message, not once per test;
6. late submissions;
7. similar code: the pairs of the similarity check (autograder.batch.similarity), each with a
   link to its side-by-side page.

A student's score override (gradebook adjustments) is marked beside the graded total: whose,
the score that every export gives them, and the reason (who and when on hover). The class's
numbers, the histogram and the order of the table count it (`score_in_force`).

Charts are PNG files drawn by matplotlib under OUT/overview/. Every text that reaches the page
goes through Jinja2's autoescape: names, folder names, reasons and failure messages can come
from students. The charts hold only trusted text (function names, question titles, numbers).
"""

from __future__ import annotations

import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from autograder.batch.records import Adjustment, GradedSubmission, LateStatus, report_folder
from autograder.batch.similarity import Similarity, SimilarPair
from autograder.batch.submission_status import NEEDS_A_LOOK, STATUSES, SubmissionStatus
from autograder.grading.report import PART_TITLES
from autograder.grading.results import Report
from autograder.project import templates
from autograder.project.assignment import Assignment
from autograder.project.inert import clip, inert

CHART_DIR = "overview"
SCORES_PNG = "scores.png"
FUNCTIONS_PNG = "functions.png"
QUESTIONS_PNG = "questions.png"
COMMON_FAILURES = 10
NAMED_STUDENTS = 5  # a failure message names this many students; more become a folded list
MESSAGE_CHARS = 300  # of one normalised failure message on the page
CHART_MAX_INCHES = 6.5  # a part's chart: at most one screen at 100 dpi, title and axis included
SUBMISSION_LEVEL = ("blank", "no_module", "not_importable")  # one failure, not one per test

_ENV = templates.environment(num=lambda value, digits=2: num(value, digits),
                             duration=lambda minutes: duration(minutes))


def num(value: float, digits: int = 2) -> str:
    """A number for people: rounded, no trailing zeros ('7.43', '10')."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return "0" if text in ("", "-0") else text


def duration(minutes: float) -> str:
    """'2 d 3 h 5 min', '45 min', '< 1 min'."""
    whole = int(minutes)
    if whole < 1:
        return "< 1 min"
    days, rest = divmod(whole, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "",
             f"{mins} min" if mins else ""]
    return " ".join(p for p in parts if p)


def shade(score: float, max_score: float) -> str:
    """The colour class of a cell: full, high, mid, low, zero (or none: nothing to score)."""
    if max_score <= 0:
        return "none"
    share = score / max_score
    if share >= 1 - 1e-9:
        return "full"
    return "high" if share >= 0.67 else "mid" if share >= 0.34 else "low" if share > 0 else "zero"


@dataclass
class ItemStat:
    """How the class did on one question or hidden test."""

    name: str
    part: str
    item: str  # the question id, or the function a hidden test checks
    passed: int = 0
    counted: int = 0  # graded submissions where it counted (passed or failed)

    @property
    def rate(self) -> float:
        return self.passed / self.counted if self.counted else 0.0


@dataclass
class FunctionStat:
    """How the class did on one function: its tests' pass rate and who passed them all."""

    name: str
    points: float
    tests: list[ItemStat] = field(default_factory=list)
    full: int = 0  # submissions that passed every test of it that counted
    graded: int = 0  # submissions where at least one of its tests counted
    maxima: Counter = field(default_factory=Counter)  # its points as graded (GPU policy)

    @property
    def shown_points(self) -> float:
        """Its points as most submissions were graded (reweighting may scale grading.yml's)."""
        return self.maxima.most_common(1)[0][0] if self.maxima else self.points

    @property
    def passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def counted(self) -> int:
        return sum(t.counted for t in self.tests)

    @property
    def rate(self) -> float:
        return self.passed / self.counted if self.counted else 0.0


@dataclass
class Line:
    """One submission of the class, as the overview shows it."""

    row: GradedSubmission
    students: list[tuple[str, str]]  # (name, sid)
    graded: bool
    # Each student's reports/<sid>/report.html, relative, when that file exists (the batch
    # writes one folder per group member), in the order of `students`.
    links: list[str | None]
    status: SubmissionStatus
    functions: dict[str, tuple[float, float]] = field(default_factory=dict)  # (score, max)
    questions: tuple[float, float] = (0.0, 0.0)

    @property
    def overrides(self) -> list[tuple[str, Adjustment]]:
        """(name or sid, override) for each of its students whose score is overridden."""
        named = {sid: name or sid for name, sid in self.students}
        return [(named.get(inert(sid, True), inert(sid, True)), o)
                for sid, o in self.row.overrides.items()]

    @property
    def key(self) -> str:
        return self.row.submission.key

    @property
    def link(self) -> str | None:
        """The first report of the submission (where one link stands for all its students)."""
        return next((link for link in self.links if link), None)

    @property
    def members(self) -> list[tuple[str, str, str | None]]:
        """(name, sid, report link) of each student."""
        return [(name, sid, link) for (name, sid), link in zip(self.students, self.links,
                                                               strict=True)]

    @property
    def label(self) -> str:
        """The students' names (or sids) for a list of people."""
        return ", ".join(name or sid for name, sid in self.students)

    @property
    def late(self) -> LateStatus | None:
        late = self.row.late
        return late if late is not None and (late.minutes_late > 0 or late.penalty > 0) else None


@dataclass
class SimilarLine:
    """One pair of the similarity check, as the overview lists it."""

    pair: SimilarPair
    left: str  # the students of pair.a (names, else sids), or its key
    right: str

    @property
    def page(self) -> str:
        return self.pair.page


def similar_lines(similar: Similarity | None, lines: list[Line]) -> list[SimilarLine]:
    if similar is None:
        return []
    labels = {line.key: line.label for line in lines}
    return [SimilarLine(p, labels.get(p.a, inert(p.a, True)), labels.get(p.b, inert(p.b, True)))
            for p in similar.pairs]


@dataclass
class FailureMessage:
    text: str  # normalised
    count: int = 0  # failed items that gave it
    lines: list[Line] = field(default_factory=list)  # the submissions behind it, once each
    tests: Counter = field(default_factory=Counter)

    @property
    def submissions(self) -> set[str]:
        return {line.key for line in self.lines}


@dataclass
class Summary:
    submissions: int
    students: int
    graded: int
    errors: int
    timeouts: int
    flagged: int
    needs_a_look: int
    late: int
    max_score: float | None
    mean: float | None
    median: float | None
    lowest: float | None
    highest: float | None
    full_marks: int


def normalise(message: str) -> str:
    """A failure message with what varies between submissions taken out: paths, addresses
    and numbers become placeholders, white space is collapsed, the text is cut."""
    text = " ".join(message.split())
    text = re.sub(r"(?:/[\w.@+-]+){2,}/?", "<path>", text)
    text = re.sub(r"\b0x[0-9a-fA-F]+\b", "0x#", text)
    text = re.sub(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?\b", "#", text)
    return clip(text, MESSAGE_CHARS)


def report_link(out: Path, sid: str) -> str | None:
    """reports/<folder>/report.html (the folder autograder.batch.driver writes) when it exists."""
    if not sid:
        return None
    folder = report_folder(sid)
    if not (out / "reports" / folder / "report.html").is_file():
        return None
    return f"reports/{quote(folder, safe='')}/report.html"


def _is_graded(row: GradedSubmission) -> bool:
    return row.report is not None and row.error is None


def _line(row: GradedSubmission, out: Path, functions: list[str]) -> Line:
    submitters = row.submission.submitters
    students = [(inert(s.name, True), inert(s.sid, True)) for s in submitters] \
        or [("", inert(row.submission.key, True))]
    links = [report_link(out, s.sid) for s in submitters] or [report_link(out, row.submission.key)]
    line = Line(row, students, _is_graded(row), links, row.status)
    if not line.graded:
        return line
    scores = {name: [0.0, 0.0] for name in functions}
    mc = [0.0, 0.0]
    for test in row.report.tests:
        if test.status == "excluded":
            continue
        target = mc if test.part == "multiple_choice" else scores.setdefault(
            test.item, [0.0, 0.0])
        target[0] += test.score
        target[1] += test.max_score
    line.functions = {name: (a, b) for name, (a, b) in scores.items()}
    line.questions = (mc[0], mc[1])
    return line


def item_stats(rows: list[GradedSubmission], assignment: Assignment) -> list[ItemStat]:
    """Every question (bank order) and hidden test (suite order) with its pass rate; items
    left out (GPU tests on a grader without one) or pending do not count."""
    stats: dict[tuple[str, str], ItemStat] = {
        ("multiple_choice", q.title): ItemStat(q.title, "multiple_choice", q.id)
        for q in assignment.bank.questions}
    for row in sorted(rows, key=lambda r: r.submission.key):
        if not _is_graded(row):
            continue
        for test in row.report.tests:
            stat = stats.setdefault((test.part, test.name),
                                    ItemStat(test.name, test.part, test.item))
            if test.status in ("passed", "failed"):
                stat.counted += 1
                stat.passed += test.status == "passed"
    functions = {name: i for i, name in enumerate(assignment.config.functions)}
    order = {key: i for i, key in enumerate(stats)}
    coding = sorted((s for s in stats.values() if s.part == "coding"),
                    key=lambda s: (functions.get(s.item, len(functions)),
                                   order[(s.part, s.name)]))
    return [s for s in stats.values() if s.part != "coding"] + coding


def function_stats(rows: list[GradedSubmission], stats: list[ItemStat],
                   assignment: Assignment) -> list[FunctionStat]:
    """One entry per function (grading.yml's order, then others), its tests in suite order."""
    found = {name: FunctionStat(name, points)
             for name, points in assignment.config.functions.items()}
    for stat in stats:
        if stat.part == "coding":
            found.setdefault(stat.item, FunctionStat(stat.item, 0.0)).tests.append(stat)
    for row in rows:
        if not _is_graded(row):
            continue
        outcomes: dict[str, list[bool]] = {}
        maxima: dict[str, float] = {}
        for test in row.report.tests:
            if test.part == "coding" and test.status in ("passed", "failed"):
                outcomes.setdefault(test.item, []).append(test.status == "passed")
            if test.part == "coding" and test.status != "excluded":
                maxima[test.item] = maxima.get(test.item, 0.0) + test.max_score
        for name, passed in outcomes.items():
            found[name].graded += 1
            found[name].full += all(passed)
        for name, most in maxima.items():
            found[name].maxima[round(most, 2)] += 1
    return list(found.values())


def common_failures(lines: list[Line], limit: int = COMMON_FAILURES) -> list[FailureMessage]:
    """The most common failure messages of graded submissions, by how many submissions gave
    them. A blank, module-less or unimportable submission gives one message (its status's
    reason), not one per test; any message counts once per submission in the ranking."""
    messages: dict[str, FailureMessage] = {}

    def add(line: Line, text: str, test: str) -> None:
        entry = messages.setdefault(text, FailureMessage(text))
        entry.count += 1
        entry.tests[test] += 1
        if all(seen is not line for seen in entry.lines):
            entry.lines.append(line)

    for line in lines:
        if not line.graded:
            continue
        status = line.status
        whole = status.status in SUBMISSION_LEVEL or (
            status.status == "flagged" and _module_problem(line.row.report))
        for test in line.row.report.tests:
            if test.status != "failed" or not test.message.strip():
                continue
            if whole and test.part == "coding":
                continue
            add(line, normalise(test.message), test.name)
        if whole:
            add(line, normalise(_whole_message(line)), "every coding test")
    ranked = sorted(messages.values(),
                    key=lambda m: (-len(m.lines), -m.count, m.text))
    return ranked[:limit]


def _module_problem(report: Report) -> bool:
    return any(t.part == "coding" and t.cause == "import_failed" for t in report.tests)


def _whole_message(line: Line) -> str:
    status = line.status
    if status.status == "blank":
        return "blank: the template unchanged (NotImplementedError or missing functions)"
    if status.status == "no_module":
        return f"no module: {status.detail}"
    first = next((t.message for t in line.row.report.tests if t.part == "coding"
                  and t.cause == "import_failed"), "")
    return first or f"not importable: {status.detail}"


def summary(lines: list[Line]) -> Summary:
    graded = [line.row for line in lines if line.graded]
    scores = [row.score_in_force for row in graded]  # a TA's override counts
    maxima = {row.max_score for row in graded}
    return Summary(
        submissions=len(lines), students=sum(len(line.students) for line in lines),
        graded=len(graded), errors=sum(not line.graded for line in lines),
        timeouts=sum(line.status.timed_out > 0 for line in lines),
        flagged=sum(line.status.status == "flagged" for line in lines),
        needs_a_look=sum(line.status.needs_a_look for line in lines),
        late=sum(line.late is not None for line in lines),
        max_score=maxima.pop() if len(maxima) == 1 else None,
        mean=statistics.fmean(scores) if scores else None,
        median=statistics.median(scores) if scores else None,
        lowest=min(scores, default=None), highest=max(scores, default=None),
        full_marks=sum(row.score_in_force >= row.max_score - 1e-9 for row in graded))


def needs_a_look(lines: list[Line]) -> list[Line]:
    """The submissions whose status is not ok: the most serious first, then by name."""
    rank = {status: i for i, status in enumerate(STATUSES)}
    return sorted((line for line in lines if line.status.status in NEEDS_A_LOOK),
                  key=lambda line: (rank[line.status.status], line.label.casefold(), line.key))


# ----------------------------------------------------------------------------- charts


def _figure(width: float, height: float):
    # A bare Figure on the Agg canvas: no pyplot, no global backend, safe in any process.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    figure.savefig(tmp, format="png", metadata={"Software": None})
    os.replace(tmp, path)


def score_histogram(rows: list[GradedSubmission], path: Path) -> str:
    """Draw the histogram of the final scores; returns its alt text."""
    from matplotlib.ticker import MaxNLocator

    graded = [row for row in rows if _is_graded(row)]
    maxima = {row.max_score for row in graded}
    if len(maxima) == 1 and maxima != {0}:
        top, unit = maxima.pop(), "points"
        values = [row.score_in_force for row in graded]
    else:  # differing maxima: compare percentages
        top, unit = 100.0, "% of the maximum"
        values = [100 * row.score_in_force / row.max_score if row.max_score else 0.0
                  for row in graded]
    figure = _figure(8, 3)
    axes = figure.add_subplot()
    edges = [top * i / 10 for i in range(11)]
    axes.hist(values, bins=edges, color="#4c78a8", edgecolor="white")
    mean, median = statistics.fmean(values), statistics.median(values)
    axes.axvline(mean, color="#e45756", linewidth=2, label=f"mean {num(mean)}")
    axes.axvline(median, color="#54a24b", linewidth=2, linestyle="--",
                 label=f"median {num(median)}")
    axes.set_xlim(0, top)
    axes.set_xlabel(f"score after late penalty and overrides ({unit}, out of {num(top)})")
    axes.set_ylabel("submissions")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    axes.grid(axis="y", alpha=0.3)
    axes.set_title(f"Scores of {len(values)} graded submission(s)")
    _save(figure, path)
    return (f"Histogram of the scores of {len(values)} graded submissions, in ten bins from 0 to "
            f"{num(top)} {unit}; mean {num(mean)}, median {num(median)}.")


def rate_chart(bars: list[tuple[str, float, str]], title: str, xlabel: str, colour: str,
               path: Path) -> None:
    """Horizontal bars (label, rate 0..1, note), first on top, never taller than
    CHART_MAX_INCHES: many bars get thinner rows and a smaller font."""
    row = min(0.32, (CHART_MAX_INCHES - 0.9) / max(len(bars), 1))
    font = 8 if row >= 0.22 else 6
    figure = _figure(9, 0.9 + row * len(bars))
    axes = figure.add_subplot()
    labels = [name if len(name) <= 50 else name[:49] + "…" for name, _, _ in bars]
    rates = [100 * rate for _, rate, _ in bars]
    positions = range(len(bars))
    axes.barh(positions, rates, color=colour)
    for y, (rate, (_, _, note)) in enumerate(zip(rates, bars, strict=True)):
        axes.text(rate + 1, y, note, va="center", fontsize=font)
    axes.set_yticks(list(positions), labels, fontsize=font)
    axes.set_ylim(len(bars) - 0.5, -0.5)  # first on top, no margin
    axes.set_xlim(0, 145)  # room for the notes right of a full bar
    axes.set_xticks(range(0, 101, 20))
    axes.set_xlabel(xlabel, fontsize=8)
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(title, fontsize=10)
    _save(figure, path)


def function_chart(functions: list[FunctionStat], path: Path) -> str:
    shown = [f for f in functions if f.counted]
    rate_chart([(f.name, f.rate, f"{num(100 * f.rate, 0)}% of tests; {f.full}/{f.graded} "
                 "passed all") for f in shown],
               "Coding: pass rate of each function's hidden tests",
               "% of the function's tests passed, over graded submissions", "#4c78a8", path)
    lowest = min(shown, key=lambda f: f.rate)
    return (f"Bar chart of the pass rate of the hidden tests of {len(shown)} functions; the "
            f"lowest is {lowest.name} at {num(100 * lowest.rate, 0)}%.")


def question_chart(questions: list[ItemStat], path: Path) -> str:
    shown = [q for q in questions if q.counted]
    rate_chart([(q.name, q.rate, f"{num(100 * q.rate, 0)}% ({q.passed}/{q.counted})")
                for q in shown],
               "Multiple choice: share of correct answers per question",
               "% of graded submissions answering correctly", "#f58518", path)
    lowest = min(shown, key=lambda q: q.rate)
    return (f"Bar chart of the correct rate of {len(shown)} questions; the lowest is "
            f"{lowest.name} at {num(100 * lowest.rate, 0)}%.")


# ----------------------------------------------------------------------------- the page


def write_overview(rows: list[GradedSubmission], assignment: Assignment, out: Path,
                   similar: Similarity | None = None) -> Path:
    """Write OUT/index.html and its charts under OUT/overview/; returns the page's path.
    `similar`: the class's similarity check (None: not run, or turned off)."""
    out.mkdir(parents=True, exist_ok=True)
    charts = out / CHART_DIR
    charts.mkdir(exist_ok=True)
    stats = item_stats(rows, assignment)
    functions = function_stats(rows, stats, assignment)
    names = [f.name for f in functions]
    lines = sorted((_line(row, out, names) for row in rows),
                   key=lambda line: ([n.casefold() for n, _ in line.students], line.key))
    by_total = sorted(lines, key=lambda line: (not line.graded, -line.row.score_in_force,
                                               line.label.casefold(), line.key))
    numbers = summary(lines)
    questions = [s for s in stats if s.part == "multiple_choice"]
    images = {}
    for name, draw, data, ready in (
            (SCORES_PNG, score_histogram, rows, numbers.graded > 0),
            (FUNCTIONS_PNG, function_chart, functions, any(f.counted for f in functions)),
            (QUESTIONS_PNG, question_chart, questions, any(q.counted for q in questions))):
        path = charts / name
        if ready:
            images[name.removesuffix(".png")] = {"src": f"{CHART_DIR}/{name}",
                                                 "alt": draw(data, path)}
        else:
            path.unlink(missing_ok=True)  # no stale chart from an earlier run
    context = {
        "title": assignment.config.title, "assignment": assignment.name, "s": numbers,
        "images": images, "functions": functions, "questions": questions,
        "part_titles": PART_TITLES, "mc_points": assignment.config.multiple_choice.points,
        "failures": common_failures(lines), "named": NAMED_STUDENTS,
        "look": needs_a_look(lines),
        "late": [line for line in lines if line.late is not None],
        "lines": by_total, "shade": shade,
        "similar": similar, "similar_lines": similar_lines(similar, lines),
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    page = out / "index.html"
    tmp = out / ".index.html.tmp"
    tmp.write_text(_ENV.get_template("overview.html.j2").render(context), encoding="utf-8")
    os.replace(tmp, page)
    return page
