"""A class's grades as CSV: `grades.csv` for the TA and a scores file for Gradescope's import.

Both are written from the gradebook's latest run of each submission (`GradedSubmission`), one row
per student: a group submission gives each member the group's scores.

- `write_grades_csv`: what a TA sorts and filters in a spreadsheet: sid, name, email, the
  submission's status (see autograder.grading.submission_status: ok, blank, no_module,
  not_importable,
  timed_out, crashed, grader_error, flagged), the totals (`total`: the student's score override
  when there is one, else after the late penalty; `raw_total` before it, as graded), the
  penalty and whole minutes late, each part, each function (coding points per function, in
  grading.yml's order), each question (in the question bank's order); with `detail`, each hidden
  test too (grouped by function, then in the suite's order; a test no submission ran, such as a
  GPU test on graders without one, gets no column). Then the status's reason, the submission,
  when it was graded, and the override in force (its score, reason, who and when). Points
  have at most 2 decimals; a blank cell is an item that did not count or a submission the
  grader failed on.
- `write_gradescope_scores_csv`: what Gradescope's "Import scores" (an assignment's uploaded
  scores) takes: a header row, students matched by `Email` (or `SID`), and the score in
  `Total Score` (the override when there is one), with the column names of Gradescope's own
  grade export. Grader failures without an override are left out (a blank is not a zero; the TA
  regrades them), and so is any student it cannot match.

Cells are text a spreadsheet may open: a text cell that would start a formula (`=`, `+`, `-`,
`@`, a tab or a carriage return) gets a leading `'`, since names, folder names and reasons can
come from students.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from autograder.batch.records import GradedSubmission, Submitter
from autograder.grading.results import PARTS
from autograder.project.assignment import Assignment
from autograder.project.inert import inert

IDENTITY = ["sid", "name", "email"]
TOTALS = ["status", "total", "raw_total", "max_score", "late_penalty_pct", "minutes_late"]
TRAILER = ["reason", "submission", "graded_at", "override"]
GRADESCOPE_COLUMNS = ["Name", "SID", "Email", "Total Score"]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def number(value: float, digits: int = 2) -> str:
    """A score as spreadsheets read it: at most 2 decimals, no trailing zeros ('8.57', '10')."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return "0" if text in ("", "-0") else text


def safe_text(value: str) -> str:
    """A text cell that a spreadsheet will not run as a formula, on one line, with control
    characters shown as escapes (a folder name can hold an ESC or a newline)."""
    value = str(value)
    return inert("'" + value if value.startswith(_FORMULA_START) else value, single_line=True)


def members(rows: list[GradedSubmission]) -> Iterator[tuple[GradedSubmission, Submitter]]:
    """Each student of each submission; a submission without submitters stands for its key."""
    for row in rows:
        submitters = row.submission.submitters or [Submitter(name="", sid=row.submission.key)]
        for submitter in submitters:
            yield row, submitter


def question_columns(assignment: Assignment) -> list[tuple[str, str]]:
    """(column, question id) for every question, in the bank's order."""
    return [(q.title, q.id) for q in assignment.bank.questions]


def function_columns(rows: list[GradedSubmission], assignment: Assignment) -> list[str]:
    """The functions of grading.yml, in its order, then any other a report names."""
    functions = list(assignment.config.functions)
    for row in rows:
        for test in (row.report or {}).get("tests", []):
            if test["part"] == "coding" and test["item"] not in functions:
                functions.append(test["item"])
    return functions


def test_columns(rows: list[GradedSubmission], assignment: Assignment) -> list[str]:
    """The hidden tests' names found in the reports, but those no submission ran (excluded
    everywhere): grouped by the function they check, in grading.yml's order (unknown
    functions last), then in the order the suite ran them."""
    seen: dict[str, str] = {}  # name -> function, in order of first appearance
    ran: set[str] = set()
    for row in sorted(rows, key=lambda r: r.submission.key):
        for test in (row.report or {}).get("tests", []):
            if test["part"] == "coding":
                seen.setdefault(test["name"], test["item"])
                if test["status"] != "excluded":
                    ran.add(test["name"])
    seen = {name: function for name, function in seen.items() if name in ran}
    functions = list(assignment.config.functions)
    rank = {name: i for i, name in enumerate(functions)}
    order = {name: i for i, name in enumerate(seen)}
    return sorted(seen, key=lambda n: (rank.get(seen[n], len(functions)), order[n]))


def grades_header(rows: list[GradedSubmission], assignment: Assignment,
                  detail: bool = False) -> list[str]:
    tests = test_columns(rows, assignment) if detail else []
    return (IDENTITY + TOTALS + [f"part:{p}" for p in PARTS]
            + [f"fn:{f}" for f in function_columns(rows, assignment)]
            + [title for title, _ in question_columns(assignment)]
            + [f"test:{name}" for name in tests] + TRAILER)


def _item_cells(report: dict | None, assignment: Assignment, functions: list[str],
                tests: list[str]) -> list[str]:
    if report is None:
        return [""] * (len(PARTS) + len(functions) + len(assignment.bank.questions) + len(tests))
    parts = {p["name"]: p["score"] for p in report["parts"]}
    questions = {t["item"]: t for t in report["tests"] if t["part"] == "multiple_choice"}
    coding = {t["name"]: t for t in report["tests"] if t["part"] == "coding"}
    by_function: dict[str, float] = {}
    for test in coding.values():
        if test["status"] != "excluded":
            by_function[test["item"]] = by_function.get(test["item"], 0.0) + test["score"]

    def cell(test: dict | None) -> str:
        return "" if test is None or test["status"] == "excluded" else number(test["score"])

    return ([number(parts[p]) if p in parts else "" for p in PARTS]
            + [number(by_function[f]) if f in by_function else "" for f in functions]
            + [cell(questions.get(qid)) for _, qid in question_columns(assignment)]
            + [cell(coding.get(name)) for name in tests])


def write_grades_csv(rows: list[GradedSubmission], assignment: Assignment, path: Path,
                     detail: bool = False) -> int:
    """Write grades.csv, one row per student, sorted by sid; returns the number of rows.
    With `detail`, a column per hidden test as well."""
    tests = test_columns(rows, assignment) if detail else []
    functions = function_columns(rows, assignment)
    header = grades_header(rows, assignment, detail)
    lines = []
    for row, student in members(rows):
        graded = row.graded
        late = row.late
        status = row.status
        final = row.final_score(student.sid)
        override = row.overrides.get(student.sid)
        lines.append(
            [safe_text(student.sid), safe_text(student.name), safe_text(student.email),
             status.status,
             number(final) if final is not None else "",
             number(row.raw_score) if graded else "",
             number(row.max_score) if graded else "",
             number(late.penalty * 100) if late else "0",
             number(late.minutes_late, 0) if late else "0"]
            + _item_cells(row.report if graded else None, assignment, functions, tests)
            + [safe_text(status.detail), safe_text(row.submission.key), row.graded_at,
               safe_text(override.describe()) if override else ""])
    submission = header.index("submission")
    lines.sort(key=lambda line: (line[0], line[submission]))
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
        if row.final_score(student.sid) is None:
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
    lines = [[safe_text(s.name), safe_text(s.sid), safe_text(s.email),
              number(r.final_score(s.sid), 4)] for r, s in chosen.values()]
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
