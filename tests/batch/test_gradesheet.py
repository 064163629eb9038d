"""grades.csv, grades.xlsx and Canvas's import file, from real reports of a small toy class,
read back as a spreadsheet program reads them (the CSV's bytes: BOM and quoting; the workbook
with openpyxl)."""

from __future__ import annotations

import csv
import dataclasses
import random
from datetime import timedelta
from pathlib import Path

import pytest
from openpyxl import load_workbook
from toy_class import FORMULA_NAME, HOSTILE_NAME, LATE_PENALTY, toy_class

from autograder.batch.gradebook import Gradebook
from autograder.batch.gradesheet import (
    CANVAS_STUDENT,
    members,
    number,
    safe_text,
    write_canvas_csv,
    write_grades,
    write_grades_csv,
)
from autograder.batch.records import (
    ClassSubmission,
    GradedSubmission,
    GradeOutcome,
    Submitter,
)
from autograder.batch.submission_status import SubmissionStatus


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return toy_class(tmp_path_factory)


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")  # UTF-8, and says so to Excel
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def grades(graded, tmp_path_factory):
    """grades.csv with --detail (a column per hidden test)."""
    _, rows, assignment = graded
    path = tmp_path_factory.mktemp("sheet") / "grades.csv"
    assert write_grades_csv(rows, assignment, path, detail=True) == 6  # one of them a pair
    return read(path)


FIRST = ["sid", "name", "email", "status", "total", "raw_total", "max_score",
         "late_penalty_pct", "minutes_late", "part:multiple_choice", "part:coding", "fn:add",
         "fn:divide", "fn:scale", "Q1 sum_shape", "Q2 float_types"]
LAST = ["reason", "submission", "graded_at", "override"]


def test_columns_follow_the_bank_and_the_suite(grades, graded, tmp_path):
    header, _ = grades
    # The GPU test ran nowhere (no GPU here): no column for it.
    assert header == FIRST + [
        "test:add: adds two integers", "test:add: adds tensors without changing the inputs",
        "test:add: works in two processes", "test:divide: divides",
        "test:divide: raises ZeroDivisionError for a zero divisor",
        "test:scale: doubles a tensor"] + LAST
    _, rows, assignment = graded
    write_grades_csv(rows, assignment, tmp_path / "plain.csv")  # without --detail
    assert read(tmp_path / "plain.csv")[0] == FIRST + LAST


def test_each_student_has_a_status_and_its_reason(grades):
    _, lines = grades
    status = {line["sid"]: (line["status"], line["reason"]) for line in lines}
    assert status["s001"] == status["s002"] == status["s003"] == ("ok", "")
    assert status["s004"][0] == "timed_out" and "tests timed out" in status["s004"][1]
    assert status["s005"][0] == "grader_error"
    assert status["s005"][1].startswith("the grader failed: RuntimeError")
    assert status["s006"][0] == "blank"


def test_one_row_per_student_sorted_by_sid(grades):
    _, lines = grades
    assert [line["sid"] for line in lines] == ["s001", "s002", "s003", "s004", "s005", "s006"]
    by_sid = {line["sid"]: line for line in lines}
    # Both members of the group get the group's scores, item by item.
    pair = [{k: v for k, v in by_sid[sid].items() if k not in ("sid", "name", "email")}
            for sid in ("s002", "s003")]
    assert pair[0] == pair[1] and pair[0]["submission"] == "submission_102"
    assert by_sid["s003"]["name"] == HOSTILE_NAME  # text, kept as it is (no formula)


def test_scores_late_penalty_and_items(graded, grades):
    _, rows, _ = graded
    _, lines = grades
    by_sid = {line["sid"]: line for line in lines}
    alice, carol = by_sid["s001"], by_sid["s004"]
    assert (alice["status"], alice["total"], alice["raw_total"], alice["max_score"]) == \
        ("ok", "10", "10", "10")
    assert alice["late_penalty_pct"] == alice["minutes_late"] == "0"
    raw = next(r.raw_score for r in rows if r.submission.key == "submission_103")
    assert carol["raw_total"] == number(raw) and float(carol["raw_total"]) > 0
    assert float(carol["total"]) == pytest.approx(raw * (1 - LATE_PENALTY), abs=0.005)
    assert (carol["late_penalty_pct"], carol["minutes_late"]) == ("10", "90")
    # Carol's scale() hangs and she sent no answers file.
    assert carol["test:scale: doubles a tensor"] == "0"
    assert carol["Q1 sum_shape"] == carol["Q2 float_types"] == "0"
    # The group answered Q1 wrong and Q2 right; its divide() is wrong.
    bob = by_sid["s002"]
    assert (bob["Q1 sum_shape"], bob["Q2 float_types"], bob["test:divide: divides"]) == \
        ("0", "1", "0")
    for line in lines:
        if line["status"] == "grader_error":
            continue
        items = [v for k, v in line.items() if k.startswith(("Q", "test:")) and v]
        functions = [v for k, v in line.items() if k.startswith(("Q", "fn:")) and v]
        parts = [line["part:multiple_choice"], line["part:coding"]]
        for numbers in (items, functions, parts):
            assert sum(map(float, numbers)) == pytest.approx(float(line["raw_total"]), abs=0.02)
        assert all(len(v.partition(".")[2]) <= 2 for v in items + functions + parts)


def test_grader_failure_is_an_error_row_with_blanks(grades):
    _, lines = grades
    dave = next(line for line in lines if line["sid"] == "s005")
    assert dave["status"] == "grader_error"
    assert dave["total"] == dave["raw_total"] == dave["part:coding"] == dave["Q1 sum_shape"] == ""
    assert (dave["late_penalty_pct"], dave["minutes_late"]) == ("10", "30")
    assert dave["graded_at"] == "2025-03-02T10:00:00+00:00"


def test_text_that_would_be_a_formula_is_quoted(grades):
    _, lines = grades
    formula = next(line for line in lines if line["sid"] == "s006")
    assert formula["name"] == "'" + FORMULA_NAME
    assert [safe_text(t) for t in ("-1", "+x", "@SUM(A1)", "\tx", "Ann", "")] == \
        ["'-1", "'+x", "'@SUM(A1)", "'\\tx", "Ann", ""]  # the tab shown, not raw


def test_control_characters_in_names_are_shown_as_escapes(graded, tmp_path):
    # A folder export's student folder may be named "ev<ESC>[31mil<newline>name": the sheet a
    # TA opens shows it escaped, on one line, never as raw terminal codes.
    _, rows, assignment = graded
    hostile = Submitter(name="ev\x1b[31mil\nname", sid="s\x07id")
    first = dataclasses.replace(rows[0], submission=dataclasses.replace(
        rows[0].submission, submitters=[hostile]))
    path = tmp_path / "grades.csv"
    write_grades_csv([first, *rows[1:]], assignment, path)
    text = path.read_text(encoding="utf-8")
    assert "\x1b" not in text and "\x07" not in text
    _, lines = read(path)
    assert len(lines) == 6
    assert any(line["name"].startswith("ev") and "31mil" in line["name"] for line in lines)


def test_the_file_does_not_depend_on_the_order_of_rows(graded, tmp_path):
    _, rows, assignment = graded
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    write_grades_csv(rows, assignment, tmp_path / "a.csv")
    write_grades_csv(shuffled[::-1], assignment, tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_numbers():
    assert [number(x) for x in (10.0, 0.0, 8.571428, 1.5, 2.00004, 1e-9, 1.0938)] == \
        ["10", "0", "8.57", "1.5", "2", "0", "1.09"]
    assert [number(x, 0) for x in (1343.397, 89.5, 0.2)] == ["1343", "90", "0"]


# ----------------------------------------------------------------------------- spreadsheets

BJORN = Submitter("Björn Ødegård-Núñez, \"Bo\"", "03078615", "bjorn@example.edu")


def _with_bjorn(rows: list[GradedSubmission]) -> list[GradedSubmission]:
    """Alice's submission handed in by a student whose name and SID a spreadsheet mangles."""
    alice = next(r for r in rows if r.submission.key == "submission_101")
    return [*rows, dataclasses.replace(alice, submission=ClassSubmission(
        "submission_107", Path("x"), [BJORN]))]


def test_the_csv_quotes_text_and_keeps_names_and_sids(graded, tmp_path):
    _, rows, assignment = graded
    path = tmp_path / "grades.csv"
    write_grades_csv(_with_bjorn(rows), assignment, path)
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")  # the BOM: Excel then reads UTF-8, not ANSI
    line = next(text for text in raw.decode("utf-8-sig").splitlines() if "03078615" in text)
    # Text quoted (LibreOffice's "Format quoted field as text" keeps it text), numbers bare.
    assert line.startswith('"03078615","Björn Ødegård-Núñez, ""Bo""","bjorn@example.edu",'
                           '"ok",10,10,10,0,0,')
    _, lines = read(path)
    bjorn = next(row for row in lines if row["sid"] == "03078615")
    assert bjorn["name"] == BJORN.name and bjorn["total"] == "10"


def test_the_workbook_keeps_sids_as_text_and_numbers_as_numbers(graded, tmp_path):
    _, rows, assignment = graded
    assert write_grades(_with_bjorn(rows), assignment, tmp_path, detail=True) == 7
    sheet = load_workbook(tmp_path / "grades.xlsx").active
    header = [c.value for c in sheet[1]]
    _, lines = read(tmp_path / "grades.csv")
    assert header == list(lines[0])  # the same columns as grades.csv
    cells = {row[0].value: row for row in sheet.iter_rows(min_row=2)}
    assert set(cells) == {line["sid"] for line in lines}
    bjorn = cells["03078615"]  # text, leading zero kept, never a number
    assert bjorn[0].data_type == "s" and bjorn[0].number_format == "@"
    assert bjorn[1].value == BJORN.name
    at = {name: i for i, name in enumerate(header)}
    assert bjorn[at["total"]].value == 10 and bjorn[at["total"]].data_type == "n"
    carol = cells["s004"]
    assert carol[at["minutes_late"]].value == 90 and isinstance(
        carol[at["total"]].value, float)
    # A name that is a formula in a CSV is a string cell here, shown as typed, never run.
    formula = cells["s006"][1]
    assert formula.value == FORMULA_NAME and formula.data_type == "s"
    dave = cells["s005"]  # the grader failed: blank cells, not zeros
    assert dave[at["total"]].value is None and dave[at["status"]].value == "grader_error"


def _in_a_gradebook(rows: list[GradedSubmission], path: Path) -> list[GradedSubmission]:
    """`rows` recorded in a real gradebook at `path`, read back as a batch reads them when it
    writes the class outputs."""
    with Gradebook(path) as book:
        for row in rows:
            book.record(row.submission, "toy", GradeOutcome(row.submission.key, row.report,
                                                            row.error, row.seconds),
                        "files", "grader", "assignment", row.late)
        return book.latest()


def test_a_spreadsheet_round_trip_keeps_sids_and_names(graded, tmp_path):
    """A TA opens grades.xlsx, changes a score, saves; the workbook reopens with every SID
    (leading zeros kept, still text) and name as the gradebook has them, and the sheet saved
    as CSV UTF-8, as a spreadsheet program writes it, reads back the same."""
    _, rows, assignment = graded
    stored = _in_a_gradebook(_with_bjorn(rows), tmp_path / "gradebook.sqlite")
    students = {student.sid: student.name for _, student in members(stored)}
    assert students["03078615"] == BJORN.name and len(students) == 7
    write_grades(stored, assignment, tmp_path, detail=True)
    path = tmp_path / "grades.xlsx"
    before = [[c.value for c in row] for row in load_workbook(path).active.iter_rows()]

    book = load_workbook(path)
    sheet = book.active
    at = {cell.value: cell.column for cell in sheet[1]}
    bjorn_row = next(r for r in range(2, sheet.max_row + 1)
                     if sheet.cell(r, 1).value == "03078615")
    sheet.cell(bjorn_row, at["total"]).value = 9.5  # a regrade, typed in by hand
    book.save(path)

    sheet = load_workbook(path).active
    after = [[c.value for c in row] for row in sheet.iter_rows()]
    edited = (bjorn_row - 1, at["total"] - 1)
    assert after[edited[0]][edited[1]] == 9.5 and before[edited[0]][edited[1]] == 10
    after[edited[0]][edited[1]] = before[edited[0]][edited[1]]
    assert after == before  # nothing else changed
    cells = list(sheet.iter_rows(min_row=2))
    assert all(row[0].data_type == "s" and row[0].number_format == "@" for row in cells)
    # "03078615", "Björn Ødegård-Núñez", the formula name as typed: text, as in the gradebook.
    assert {row[0].value: row[1].value for row in cells} == students

    # Saved back as CSV UTF-8 (a BOM, quotes only where needed), then read as a spreadsheet
    # program reads it: the SIDs, names and the edited score come back.
    saved = tmp_path / "grades.csv"
    with saved.open("w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle).writerows(
            [["" if v is None else v for v in row] for row in sheet.iter_rows(values_only=True)])
    header, lines = read(saved)
    assert header == before[0]
    assert {line["sid"]: line["name"] for line in lines} == students
    assert next(line for line in lines if line["sid"] == "03078615")["total"] == "9.5"


# ----------------------------------------------------------------------------- Canvas


def _canvas(rows, assignment, path: Path, column: str | None = None):
    notes = write_canvas_csv(rows, assignment, path, column)
    header, lines = read(path)
    return header, lines, notes


def test_canvas_import_has_canvas_columns_and_every_gradable_student(graded, tmp_path):
    _, rows, assignment = graded
    header, lines, notes = _canvas(_with_bjorn(rows), assignment, tmp_path / "canvas.csv")
    # What Canvas's importer reads (lib/gradebook_importer.rb): Student, ID, SIS User ID,
    # SIS Login ID, Section, then the assignments; a "Points Possible" row first.
    assert header == CANVAS_STUDENT + ["Toy assignment"] == [
        "Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Toy assignment"]
    assert lines[0]["Student"] == "Points Possible" and lines[0]["Toy assignment"] == "10"
    students = {line["SIS User ID"]: line for line in lines[1:]}
    # Dave's grading failed: left out (a blank cell would clear a grade in Canvas).
    assert sorted(students) == ["03078615", "s001", "s002", "s003", "s004", "s006"]
    assert len(notes) == 1 and notes[0].startswith("s005: left out, the grader failed")
    final = {r.submission.key: r.score for r in rows}
    assert students["s004"]["Toy assignment"] == number(final["submission_103"])  # late
    assert students["s002"]["Toy assignment"] == students["s003"]["Toy assignment"]  # a pair
    assert students["03078615"]["Student"] == BJORN.name
    assert students["03078615"]["SIS Login ID"] == BJORN.email
    assert all(line["ID"] == "" and line["Section"] == "" for line in lines)
    raw = (tmp_path / "canvas.csv").read_text(encoding="utf-8-sig")
    assert '"03078615"' in raw


def test_canvas_column_names_the_canvas_assignment(graded, tmp_path):
    _, rows, assignment = graded
    header, _, _ = _canvas(rows, assignment, tmp_path / "canvas.csv", "Toy assignment (4711)")
    assert header[-1] == "Toy assignment (4711)"


def test_a_flagged_student_never_reaches_canvas_without_a_marker(graded, tmp_path):
    """A flagged submission's score (10/10 here) is not a grade until a TA has looked: its
    students are left out of the import, which leaves their Canvas grade as it is, and the
    note says why; grades.csv keeps the score with its status and reason."""
    _, rows, assignment = graded
    alice = next(r for r in rows if r.submission.key == "submission_101")
    why = "tried to write outside its sandbox: opened /etc/evil for writing"
    flagged = dataclasses.replace(alice, status=SubmissionStatus("flagged", why, [why]))
    others = [r for r in rows if r is not alice]
    _, lines, notes = _canvas([flagged, *others], assignment, tmp_path / "canvas.csv")
    assert "s001" not in {line["SIS User ID"] for line in lines}
    assert any(note.startswith("s001: left out, submission_101 is flagged") and why in note
               for note in notes)
    write_grades_csv([flagged, *others], assignment, tmp_path / "grades.csv")
    alice_row = next(line for line in read(tmp_path / "grades.csv")[1] if line["sid"] == "s001")
    assert (alice_row["status"], alice_row["total"], alice_row["reason"]) == ("flagged", "10",
                                                                             why)


def test_canvas_a_student_in_two_submissions_gets_the_latest(graded, tmp_path):
    _, rows, assignment = graded
    alice = next(r for r in rows if r.submission.key == "submission_101")
    newer = dataclasses.replace(
        alice, score=4.0, raw_score=4.0,
        submission=dataclasses.replace(alice.submission, key="submission_201",
                                       created_at=alice.submission.created_at
                                       + timedelta(hours=1)))
    nobody = GradedSubmission(ClassSubmission("loose_folder", Path("x"), []), 1, alice.report,
                              1.0, 1.0, 10.0, None, None, alice.graded_at, 1.0)
    for order in ([alice, newer, nobody], [nobody, newer, alice]):
        _, lines, notes = _canvas(order, assignment, tmp_path / "canvas.csv")
        assert [(line["SIS User ID"], line["Toy assignment"]) for line in lines[1:]] == \
            [("s001", "4")]
        assert any("submission_201 (the latest) is used" in note for note in notes)
        assert any(note.startswith("loose_folder: left out, no SID or email") for note in notes)
