"""The class overview, OUT/index.html: how the class did, what was hard, what went wrong.

`write_overview(rows, assignment, out)` reads the gradebook's latest run of each submission and
writes one self-contained page (no script, no external address: it opens from the disk) with two
charts drawn by matplotlib as PNG files under OUT/overview/. Every text that reaches the page
goes through Jinja2's autoescape: names, folder names and failure messages can come from
students. The charts hold only trusted text (test names, question titles, numbers).
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

import jinja2

from .assignment import Assignment
from .batch_records import GradedSubmission, LateStatus, report_folder
from .report import PART_TITLES

CHART_DIR = "overview"
SCORES_PNG = "scores.png"
PASS_RATES_PNG = "pass_rates.png"
HARDEST_QUESTIONS = 5
HARDEST_TESTS = 10
COMMON_FAILURES = 10
MESSAGE_CHARS = 300  # of one normalised failure message on the page
TIMEOUT_WORDS = ("timed out", "time limit")

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("autograder", "templates"),
    # Templates are named *.html.j2: escaping must follow that suffix, not ".html".
    autoescape=jinja2.select_autoescape(["html", "html.j2"]), trim_blocks=True,
    lstrip_blocks=True, undefined=jinja2.StrictUndefined)
_ENV.filters["num"] = lambda value, digits=2: num(value, digits)
_ENV.filters["duration"] = lambda minutes: duration(minutes)


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
class FailureMessage:
    text: str  # normalised
    count: int = 0  # failed items that gave it
    submissions: set[str] = field(default_factory=set)
    tests: Counter = field(default_factory=Counter)


@dataclass
class Line:
    """One submission of the class, as the overview shows it."""

    row: GradedSubmission
    students: list[tuple[str, str]]  # (name, sid)
    graded: bool
    link: str | None  # reports/<sid>/report.html, relative, when that file exists
    problem: str = ""  # the grader's failure, or which tests timed out

    @property
    def key(self) -> str:
        return self.row.submission.key

    @property
    def late(self) -> LateStatus | None:
        late = self.row.late
        return late if late is not None and (late.minutes_late > 0 or late.penalty > 0) else None


@dataclass
class Summary:
    submissions: int
    students: int
    graded: int
    errors: int
    timeouts: int
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
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def timed_out(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in TIMEOUT_WORDS)


def report_link(out: Path, sid: str) -> str | None:
    """reports/<folder>/report.html (the folder autograder.batch writes) when it exists."""
    if not sid:
        return None
    folder = report_folder(sid)
    if not (out / "reports" / folder / "report.html").is_file():
        return None
    return f"reports/{quote(folder, safe='')}/report.html"


def _is_graded(row: GradedSubmission) -> bool:
    return row.report is not None and row.error is None


def _line(row: GradedSubmission, out: Path) -> Line:
    students = [(s.name, s.sid) for s in row.submission.submitters] or [("", row.submission.key)]
    line = Line(row, students, _is_graded(row), report_link(out, row.submission.sid))
    if not line.graded:
        line.problem = row.error or "the grader wrote no report"
        return line
    slow = [t for t in row.report["tests"] if timed_out(t["message"])]
    notes = [w for w in row.report.get("warnings", []) if timed_out(w)]
    if slow:
        names = ", ".join(t["name"] for t in slow[:3])
        more = f" and {len(slow) - 3} more" if len(slow) > 3 else ""
        line.problem = f"timed out in {names}{more}: {slow[0]['message']}"
    elif notes:
        line.problem = notes[0]
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
        for test in row.report["tests"]:
            stat = stats.setdefault((test["part"], test["name"]),
                                    ItemStat(test["name"], test["part"], test["item"]))
            if test["status"] in ("passed", "failed"):
                stat.counted += 1
                stat.passed += test["status"] == "passed"
    functions = {name: i for i, name in enumerate(assignment.config.functions)}
    order = {key: i for i, key in enumerate(stats)}
    coding = sorted((s for s in stats.values() if s.part == "coding"),
                    key=lambda s: (functions.get(s.item, len(functions)),
                                   order[(s.part, s.name)]))
    return [s for s in stats.values() if s.part != "coding"] + coding


def hardest(stats: list[ItemStat], part: str, limit: int) -> list[ItemStat]:
    """The items of `part` that not everyone passed, lowest pass rate first."""
    candidates = [s for s in stats if s.part == part and s.counted and s.passed < s.counted]
    return sorted(candidates, key=lambda s: (s.rate, s.name))[:limit]


def common_failures(rows: list[GradedSubmission], limit: int = COMMON_FAILURES,
                    ) -> list[FailureMessage]:
    messages: dict[str, FailureMessage] = {}
    for row in rows:
        if not _is_graded(row):
            continue
        for test in row.report["tests"]:
            if test["status"] != "failed" or not test["message"].strip():
                continue
            text = normalise(test["message"])
            entry = messages.setdefault(text, FailureMessage(text))
            entry.count += 1
            entry.submissions.add(row.submission.key)
            entry.tests[test["name"]] += 1
    ranked = sorted(messages.values(), key=lambda m: (-len(m.submissions), -m.count, m.text))
    return ranked[:limit]


def summary(lines: list[Line]) -> Summary:
    graded = [line.row for line in lines if line.graded]
    scores = [row.score for row in graded]
    maxima = {row.max_score for row in graded}
    return Summary(
        submissions=len(lines), students=sum(len(line.students) for line in lines),
        graded=len(graded), errors=sum(not line.graded for line in lines),
        timeouts=sum(line.graded and bool(line.problem) for line in lines),
        late=sum(line.late is not None for line in lines),
        max_score=maxima.pop() if len(maxima) == 1 else None,
        mean=statistics.fmean(scores) if scores else None,
        median=statistics.median(scores) if scores else None,
        lowest=min(scores, default=None), highest=max(scores, default=None),
        full_marks=sum(row.score >= row.max_score - 1e-9 for row in graded))


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
        values = [row.score for row in graded]
    else:  # differing maxima: compare percentages
        top, unit = 100.0, "% of the maximum"
        values = [100 * row.score / row.max_score if row.max_score else 0.0 for row in graded]
    figure = _figure(8, 3.6)
    axes = figure.add_subplot()
    edges = [top * i / 10 for i in range(11)]
    axes.hist(values, bins=edges, color="#4c78a8", edgecolor="white")
    mean, median = statistics.fmean(values), statistics.median(values)
    axes.axvline(mean, color="#e45756", linewidth=2, label=f"mean {num(mean)}")
    axes.axvline(median, color="#54a24b", linewidth=2, linestyle="--",
                 label=f"median {num(median)}")
    axes.set_xlim(0, top)
    axes.set_xlabel(f"score after late penalty ({unit}, out of {num(top)})")
    axes.set_ylabel("submissions")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    axes.grid(axis="y", alpha=0.3)
    axes.set_title(f"Scores of {len(values)} graded submission(s)")
    _save(figure, path)
    return (f"Histogram of the scores of {len(values)} graded submissions, in ten bins from 0 to "
            f"{num(top)} {unit}; mean {num(mean)}, median {num(median)}.")


def pass_rate_chart(stats: list[ItemStat], path: Path) -> str:
    """Draw one bar per question and hidden test: the share of graded submissions passing it."""
    shown = [s for s in stats if s.counted]
    figure = _figure(10, 0.8 + 0.32 * len(shown))
    axes = figure.add_subplot()
    labels = [s.name if len(s.name) <= 60 else s.name[:59] + "…" for s in shown]
    rates = [100 * s.rate for s in shown]
    colours = ["#f58518" if s.part == "multiple_choice" else "#4c78a8" for s in shown]
    positions = range(len(shown))
    axes.barh(positions, rates, color=colours)
    for y, (rate, stat) in enumerate(zip(rates, shown, strict=True)):
        axes.text(min(rate + 1, 88), y, f"{num(rate, 0)}% ({stat.passed}/{stat.counted})",
                  va="center", fontsize=8)
    axes.set_yticks(list(positions), labels, fontsize=8)
    axes.set_ylim(len(shown) - 0.5, -0.5)  # first item on top, no margin (5% of 80 bars is 4)
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of graded submissions passing (orange: questions, blue: hidden tests)")
    axes.grid(axis="x", alpha=0.3)
    axes.set_title("Pass rate of every question and hidden test")
    _save(figure, path)
    lowest = min(shown, key=lambda s: s.rate)
    return (f"Bar chart of the pass rate of {len(shown)} questions and hidden tests; the lowest "
            f"is {lowest.name} at {num(100 * lowest.rate, 0)}%.")


# ----------------------------------------------------------------------------- the page


def write_overview(rows: list[GradedSubmission], assignment: Assignment, out: Path) -> Path:
    """Write OUT/index.html and its charts under OUT/overview/; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    charts = out / CHART_DIR
    charts.mkdir(exist_ok=True)
    lines = sorted((_line(row, out) for row in rows),
                   key=lambda line: ([n.casefold() for n, _ in line.students], line.key))
    stats = item_stats(rows, assignment)
    numbers = summary(lines)
    images = []
    for name, draw, data, ready in (
            (SCORES_PNG, score_histogram, rows, numbers.graded > 0),
            (PASS_RATES_PNG, pass_rate_chart, stats, any(s.counted for s in stats))):
        path = charts / name
        if ready:
            images.append({"src": f"{CHART_DIR}/{name}", "alt": draw(data, path),
                           "id": name.removesuffix(".png")})
        else:
            path.unlink(missing_ok=True)  # no stale chart from an earlier run
    context = {
        "title": assignment.config.title, "assignment": assignment.name, "s": numbers,
        "images": images, "stats": stats, "part_titles": PART_TITLES,
        "hardest_questions": hardest(stats, "multiple_choice", HARDEST_QUESTIONS),
        "hardest_tests": hardest(stats, "coding", HARDEST_TESTS),
        "failures": common_failures(rows),
        "problems": [line for line in lines if line.problem],
        "late": [line for line in lines if line.late is not None],
        "lines": lines,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    page = out / "index.html"
    tmp = out / ".index.html.tmp"
    tmp.write_text(_ENV.get_template("overview.html.j2").render(context), encoding="utf-8")
    os.replace(tmp, page)
    return page
