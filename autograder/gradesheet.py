"""A class's grades as CSV: `grades.csv` for the TA and a scores file for Gradescope's import.

Both are written from the gradebook's latest run of each submission (`GradedSubmission`), one row
per student: a group submission gives each member the group's scores.

- `write_grades_csv`: everything a TA checks by hand: identity, totals (after and before the late
  penalty), the penalty, each part, each question (in the question bank's order) and each hidden
  test (grouped by function, in grading.yml's order, then in the suite's order), the status and
  when it was graded. Item columns hold the points scored before any late penalty; a blank cell is
  an item that did not count (a GPU test left out on a grader without one) or a submission the
  grader failed on.
- `write_gradescope_scores_csv`: what Gradescope's "Import scores" (an assignment's uploaded
  scores) takes: a header row, students matched by `Email` (or `SID`), and the score in
  `Total Score`, with the column names of Gradescope's own grade export. Grader failures are left
  out (a blank is not a zero; the TA regrades them), and so is any student it cannot match.

Cells are text a spreadsheet may open: a text cell that would start a formula (`=`, `+`, `-`,
`@`, a tab or a carriage return) gets a leading `'`, since names and folder names can come from
students.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from .assignment import Assignment
from .batch_records import GradedSubmission, Submitter
from .results import PARTS

IDENTITY = ["sid", "name", "email", "submission"]
TOTALS = ["status", "total", "raw_total", "max_score", "late_penalty_pct", "minutes_late"]
TRAILER = ["graded_at", "error"]
GRADESCOPE_COLUMNS = ["Name", "SID", "Email", "Total Score"]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def number(value: float) -> str:
    """A score as spreadsheets read it: at most 4 decimals, no trailing zeros ('8.5714', '10')."""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def safe_text(value: str) -> str:
    """A text cell that a spreadsheet will not run as a formula."""
    value = str(value)
    return "'" + value if value.startswith(_FORMULA_START) else value


def members(rows: list[GradedSubmission]) -> Iterator[tuple[GradedSubmission, Submitter]]:
    """Each student of each submission; a submission without submitters stands for its key."""
    for row in rows:
        submitters = row.submission.submitters or [Submitter(name="", sid=row.submission.key)]
        for submitter in submitters:
            yield row, submitter


def question_columns(assignment: Assignment) -> list[tuple[str, str]]:
    """(column, question id) for every question, in the bank's order."""
    return [(q.title, q.id) for q in assignment.bank.questions]


def test_columns(rows: list[GradedSubmission], assignment: Assignment) -> list[str]:
    """The hidden tests' names found in the reports: grouped by the function they check, in
    grading.yml's order (unknown functions last), then in the order the suite ran them."""
    seen: dict[str, str] = {}  # name -> function, in order of first appearance
    for row in sorted(rows, key=lambda r: r.submission.key):
        for test in (row.report or {}).get("tests", []):
            if test["part"] == "coding":
                seen.setdefault(test["name"], test["item"])
    functions = list(assignment.config.functions)
    rank = {name: i for i, name in enumerate(functions)}
    order = {name: i for i, name in enumerate(seen)}
    return sorted(seen, key=lambda n: (rank.get(seen[n], len(functions)), order[n]))


def grades_header(rows: list[GradedSubmission], assignment: Assignment) -> list[str]:
    return (IDENTITY + TOTALS + [f"part:{p}" for p in PARTS]
            + [title for title, _ in question_columns(assignment)]
            + [f"test:{name}" for name in test_columns(rows, assignment)] + TRAILER)


def _item_cells(report: dict | None, assignment: Assignment, tests: list[str]) -> list[str]:
    if report is None:
        return [""] * (len(PARTS) + len(assignment.bank.questions) + len(tests))
    parts = {p["name"]: p["score"] for p in report["parts"]}
    questions = {t["item"]: t for t in report["tests"] if t["part"] == "multiple_choice"}
    coding = {t["name"]: t for t in report["tests"] if t["part"] == "coding"}

    def cell(test: dict | None) -> str:
        return "" if test is None or test["status"] == "excluded" else number(test["score"])

    return ([number(parts[p]) if p in parts else "" for p in PARTS]
            + [cell(questions.get(qid)) for _, qid in question_columns(assignment)]
            + [cell(coding.get(name)) for name in tests])


def write_grades_csv(rows: list[GradedSubmission], assignment: Assignment, path: Path) -> int:
    """Write grades.csv, one row per student, sorted by sid; returns the number of rows."""
    tests = test_columns(rows, assignment)
    header = grades_header(rows, assignment)
    lines = []
    for row, student in members(rows):
        graded = row.report is not None and row.error is None
        late = row.late
        lines.append(
            [safe_text(student.sid), safe_text(student.name), safe_text(student.email),
             safe_text(row.submission.key), "graded" if graded else "error",
             number(row.score) if graded else "", number(row.raw_score) if graded else "",
             number(row.max_score) if graded else "",
             number(late.penalty * 100) if late else "0",
             number(late.minutes_late) if late else "0"]
            + _item_cells(row.report if graded else None, assignment, tests)
            + [row.graded_at, safe_text(row.error or "")])
    lines.sort(key=lambda line: (line[0], line[3]))
    _write(path, header, lines)
    return len(lines)


def write_gradescope_scores_csv(rows: list[GradedSubmission], path: Path) -> list[str]:
    """Write the scores file for Gradescope's "Import scores": Name, SID, Email, Total Score
    (after the late penalty), one row per student. Returns notes for the TA: who was left out
    and why. A student in several submissions gets the score of the latest one."""
    notes: list[str] = []
    chosen: dict[str, tuple[GradedSubmission, Submitter]] = {}
    for row, student in members(rows):
        who = student.email or student.sid
        if row.report is None or row.error is not None:
            notes.append(f"{who or row.submission.key}: left out, the grader failed on "
                         f"{row.submission.key} ({row.error or 'no report'})")
            continue
        if not row.submission.submitters or not who:
            notes.append(f"{row.submission.key}: left out, no email or SID to match on "
                         "Gradescope")
            continue
        identity = (f"email:{student.email}" if student.email else f"sid:{student.sid}").lower()
        if identity in chosen:
            other = chosen[identity][0]
            newer = max((other, row), key=_recency)
            notes.append(f"{who}: in {other.submission.key} and {row.submission.key}; "
                         f"the score of {newer.submission.key} (the latest) is used")
            if newer is other:
                continue
        chosen[identity] = (row, student)
    lines = [[safe_text(s.name), safe_text(s.sid), safe_text(s.email), number(r.score)]
             for r, s in chosen.values()]
    lines.sort(key=lambda line: (line[1], line[2]))
    _write(path, GRADESCOPE_COLUMNS, lines)
    return notes


def _recency(row: GradedSubmission) -> tuple[datetime, str]:
    created = row.submission.created_at or _EARLIEST
    if created.tzinfo is None:  # not expected, but naive and aware times cannot be compared
        created = created.replace(tzinfo=timezone.utc)
    return (created, row.graded_at)


def _write(path: Path, header: list[str], lines: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(lines)
    tmp.replace(path)
