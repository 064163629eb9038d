"""A class's grades as spreadsheets: `grades.csv` and `grades.xlsx` for the TA, and
`canvas_grades.csv` for Canvas's gradebook import.

All are written from the gradebook's latest run of each submission (`GradedSubmission`), one row
per student: a group submission gives each member the group's scores. How the files are written
so that a spreadsheet opens them right (a BOM, quoting, ids as text) is
autograder.batch.spreadsheets.

- `write_grades`: what a TA sorts and filters in a spreadsheet, as CSV and as a workbook: sid,
  name, email, the submission's status (see autograder.batch.submission_status: ok, blank,
  no_module, not_importable, timed_out, crashed, grader_error, flagged), the totals (`total`:
  the student's score override when there is one, else after the late penalty; `raw_total`
  before it, as graded), the penalty and whole minutes late, each part, each function (coding
  points per function, in grading.yml's order), each question (in the question bank's order);
  with `detail`, each hidden test too (grouped by function, then in the suite's order; a test no
  submission ran, such as a GPU test on graders without one, gets no column). Then the status's
  reason, the submission, when it was graded, and the override in force (its score, reason, who
  and when). Points have at most 2 decimals; a blank cell is an item that did not count or a
  submission the grader failed on.
- `write_canvas_csv`: Canvas's gradebook import (the columns of Canvas's own gradebook export,
  read by its importer, instructure/canvas-lms lib/gradebook_importer.rb): `Student`, `ID`,
  `SIS User ID`, `SIS Login ID`, `Section`, then one column for the assignment, named as in
  Canvas (`Title`, or `Title (id)` with the id from the assignment's address: Canvas matches a
  column by its id, then by its title exactly, and otherwise creates a new assignment); a
  `Points Possible` row; one row per student with the score after the late penalty (or the
  student's override: a TA's decision, so it is imported whatever the status). Canvas
  matches a student by `ID` (Canvas's own id, which a Gradescope export does not have: left
  blank), then `SIS User ID` (the sid), then `SIS Login ID` (the email here), then the name.
  Left out, with a note for the TA: a submission the grader failed on (a blank would clear a
  grade Canvas holds), a flagged one (its score is not a grade until a TA has looked: no score
  reaches Canvas unmarked, and a file with a row left out changes nothing in Canvas for that
  student; grades.csv says why), and a student with neither sid nor email.

There is no file for Gradescope's own "Import scores": no page of Gradescope's documentation
that says which columns it takes was found, so its format could not be verified; on Gradescope
the autograder's results.json sets the score anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from autograder.batch.records import GradedSubmission, Submitter
from autograder.batch.spreadsheets import Cell, Table, csv_text, decimal, write_csv, write_xlsx
from autograder.grading.results import PARTS, Report, TestResult
from autograder.project.assignment import Assignment

GRADES_CSV = "grades.csv"
GRADES_XLSX = "grades.xlsx"
CANVAS_CSV = "canvas_grades.csv"
IDENTITY = ["sid", "name", "email"]
TOTALS = ["status", "total", "raw_total", "max_score", "late_penalty_pct", "minutes_late"]
TRAILER = ["reason", "submission", "graded_at", "override"]
CANVAS_STUDENT = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
# Not imported to Canvas until a TA has decided (grades.csv says why).
HELD_BACK = ("flagged",)
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def number(value: float, digits: int = 2) -> str:
    """A score as spreadsheets read it: at most 2 decimals, no trailing zeros ('8.57', '10')."""
    return str(decimal(value, digits))


def safe_text(value: str) -> str:
    """A text cell that a spreadsheet will not run as a formula, on one line, with control
    characters shown as escapes (a folder name can hold an ESC or a newline)."""
    return csv_text(value)


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
        for test in row.report.tests if row.report is not None else []:
            if test.part == "coding" and test.item not in functions:
                functions.append(test.item)
    return functions


def test_columns(rows: list[GradedSubmission], assignment: Assignment) -> list[str]:
    """The hidden tests' names found in the reports, but those no submission ran (excluded
    everywhere): grouped by the function they check, in grading.yml's order (unknown
    functions last), then in the order the suite ran them."""
    seen: dict[str, str] = {}  # name -> function, in order of first appearance
    ran: set[str] = set()
    for row in sorted(rows, key=lambda r: r.submission.key):
        for test in row.report.tests if row.report is not None else []:
            if test.part == "coding":
                seen.setdefault(test.name, test.item)
                if test.status != "excluded":
                    ran.add(test.name)
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


def _item_cells(report: Report | None, assignment: Assignment, functions: list[str],
                tests: list[str]) -> list[Cell]:
    if report is None:
        return [None] * (len(PARTS) + len(functions) + len(assignment.bank.questions)
                         + len(tests))
    parts = {p.name: p.score for p in report.parts}
    questions = {t.item: t for t in report.tests if t.part == "multiple_choice"}
    coding = {t.name: t for t in report.tests if t.part == "coding"}
    by_function: dict[str, float] = {}
    for test in report.tests:  # (every test, even of reports whose test names repeat)
        if test.part == "coding" and test.status != "excluded":
            by_function[test.item] = by_function.get(test.item, 0.0) + test.score

    def cell(test: TestResult | None) -> Cell:
        return None if test is None or test.status == "excluded" else decimal(test.score)

    return ([decimal(parts[p]) if p in parts else None for p in PARTS]
            + [decimal(by_function[f]) if f in by_function else None for f in functions]
            + [cell(questions.get(qid)) for _, qid in question_columns(assignment)]
            + [cell(coding.get(name)) for name in tests])


def _graded(row: GradedSubmission) -> bool:
    return row.report is not None and row.error is None


def grades_table(rows: list[GradedSubmission], assignment: Assignment,
                 detail: bool = False) -> Table:
    """grades.csv's rows, one per student, sorted by sid (then by when it was graded)."""
    tests = test_columns(rows, assignment) if detail else []
    functions = function_columns(rows, assignment)
    lines: list[list[Cell]] = []
    for row, student in members(rows):
        graded = _graded(row)
        late = row.late
        status = row.status
        final = row.final_score(student.sid)
        override = row.overrides.get(student.sid)
        lines.append(
            [student.sid, student.name, student.email, status.status,
             decimal(final) if final is not None else None,
             decimal(row.raw_score) if graded else None,
             decimal(row.max_score) if graded else None,
             decimal(late.penalty * 100) if late else Decimal(0),
             decimal(late.minutes_late, 0) if late else Decimal(0)]
            + _item_cells(row.report if graded else None, assignment, functions, tests)
            + [status.detail, row.submission.key, row.graded_at,
               override.describe() if override else None])
    header = grades_header(rows, assignment, detail)
    submission = header.index("submission")
    lines.sort(key=lambda line: (str(line[0]), str(line[submission])))
    return Table(header, lines, sheet=assignment.name)


def write_grades(rows: list[GradedSubmission], assignment: Assignment, out: Path,
                 detail: bool = False) -> int:
    """Write OUT/grades.csv and OUT/grades.xlsx, one row per student, sorted by sid; returns
    the number of rows. With `detail`, a column per hidden test as well."""
    table = grades_table(rows, assignment, detail)
    write_csv(table, out / GRADES_CSV)
    write_xlsx(table, out / GRADES_XLSX)
    return len(table.rows)


def write_grades_csv(rows: list[GradedSubmission], assignment: Assignment, path: Path,
                     detail: bool = False) -> int:
    """grades.csv alone, at `path`; returns the number of rows."""
    table = grades_table(rows, assignment, detail)
    write_csv(table, path)
    return len(table.rows)


def canvas_column(assignment: Assignment, canvas_id: str | None = None) -> str:
    """The assignment's column as Canvas names it: its title, and the id when given."""
    title = assignment.config.title
    return f"{title} ({canvas_id})" if canvas_id else title


def canvas_table(rows: list[GradedSubmission], assignment: Assignment,
                 column: str | None = None) -> tuple[Table, list[str]]:
    """Canvas's import rows (see the module's docstring) and notes for the TA on who was left
    out and why. A student in several submissions gets the score of the latest one."""
    notes: list[str] = []
    chosen: dict[str, tuple[GradedSubmission, Submitter]] = {}
    for row, student in members(rows):
        who = student.sid or student.email or row.submission.key
        overridden = student.sid in row.overrides
        if not _graded(row) and not overridden:
            notes.append(f"{who}: left out, the grader failed on {row.submission.key} "
                         f"({row.error or 'no report'}); regrade it, then import again")
            continue
        if row.status.status in HELD_BACK and not overridden:
            notes.append(f"{who}: left out, {row.submission.key} is {row.status.status} "
                         f"({row.status.detail}); enter a grade in Canvas once a TA has "
                         "looked")
            continue
        if not row.submission.submitters or not (student.sid or student.email):
            notes.append(f"{row.submission.key}: left out, no SID or email to match in "
                         "Canvas")
            continue
        identity = (f"sid:{student.sid}" if student.sid else f"email:{student.email}").lower()
        if identity in chosen:
            other = chosen[identity][0]
            newer = max((other, row), key=_recency)
            notes.append(f"{who}: in {other.submission.key} and {row.submission.key}; "
                         f"the score of {newer.submission.key} (the latest) is used")
            if newer is other:
                continue
        chosen[identity] = (row, student)
    config = assignment.config
    points = decimal(config.multiple_choice.points + config.coding.points)
    lines: list[list[Cell]] = [[s.name, "", s.sid, s.email, "", decimal(r.final_score(s.sid))]
                               for r, s in chosen.values()]
    lines.sort(key=lambda line: (str(line[2]), str(line[3])))
    table = Table([*CANVAS_STUDENT, column or canvas_column(assignment)],
                  [[CANVAS_POINTS_ROW, "", "", "", "", points], *lines], sheet="canvas")
    return table, notes


def write_canvas_csv(rows: list[GradedSubmission], assignment: Assignment, path: Path,
                     column: str | None = None) -> list[str]:
    """Write Canvas's gradebook import file; returns the notes on students left out."""
    table, notes = canvas_table(rows, assignment, column)
    write_csv(table, path)
    return notes


def _recency(row: GradedSubmission) -> tuple[datetime, str]:
    created = row.submission.created_at or _EARLIEST
    if created.tzinfo is None:  # not expected, but naive and aware times cannot be compared
        created = created.replace(tzinfo=timezone.utc)
    return (created, row.graded_at)
