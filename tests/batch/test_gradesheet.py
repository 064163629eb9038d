"""grades.csv and Gradescope's scores file, from real reports of a small toy class."""

from __future__ import annotations

import csv
import dataclasses
import random
from datetime import timedelta
from pathlib import Path

import pytest
from toy_class import FORMULA_NAME, HOSTILE_NAME, LATE_PENALTY, toy_class

from autograder.batch.gradesheet import (
    GRADESCOPE_COLUMNS,
    number,
    safe_text,
    write_grades_csv,
    write_gradescope_scores_csv,
)
from autograder.batch.records import ClassSubmission, GradedSubmission, Submitter


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return toy_class(tmp_path_factory)


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as handle:
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


# ----------------------------------------------------------------------------- Gradescope


def test_gradescope_scores_file(graded, tmp_path):
    _, rows, _ = graded
    path = tmp_path / "gradescope.csv"
    notes = write_gradescope_scores_csv(rows, path)
    header, lines = read(path)
    assert header == GRADESCOPE_COLUMNS == ["Name", "SID", "Email", "Total Score"]
    # Dave's submission failed in the grader: left out (a blank is not a zero), with a note.
    assert [line["SID"] for line in lines] == ["s001", "s002", "s003", "s004", "s006"]
    assert len(notes) == 1 and notes[0].startswith("dave@example.edu: left out, the grader")
    scores = {line["SID"]: line["Total Score"] for line in lines}
    final = {r.submission.key: r.score for r in rows}
    assert scores["s001"] == "10"
    assert float(scores["s004"]) == pytest.approx(final["submission_103"], abs=1e-4)
    assert scores["s002"] == scores["s003"] == number(final["submission_102"], 4)
    assert next(line for line in lines if line["SID"] == "s006")["Email"] == ""  # SID only
    assert all(float(score) >= 0 for score in scores.values())


def test_gradescope_a_student_in_two_submissions_gets_the_latest(graded, tmp_path):
    _, rows, _ = graded
    alice = next(r for r in rows if r.submission.key == "submission_101")
    newer = dataclasses.replace(
        alice, score=4.0, raw_score=4.0,
        submission=dataclasses.replace(alice.submission, key="submission_201",
                                       created_at=alice.submission.created_at
                                       + timedelta(hours=1)))
    nobody = GradedSubmission(ClassSubmission("loose_folder", Path("x"), []), 1, alice.report,
                              1.0, 1.0, 10.0, None, None, alice.graded_at, 1.0)
    for order in ([alice, newer, nobody], [nobody, newer, alice]):
        notes = write_gradescope_scores_csv(order, tmp_path / "gs.csv")
        _, lines = read(tmp_path / "gs.csv")
        assert [(line["SID"], line["Total Score"]) for line in lines] == [("s001", "4")]
        assert any("submission_201 (the latest) is used" in note for note in notes)
        assert any(note.startswith("loose_folder: left out, no email or SID") for note in notes)


def test_gradescope_matches_email_case_insensitively(graded, tmp_path):
    _, rows, _ = graded
    alice = next(r for r in rows if r.submission.key == "submission_101")
    shouting = dataclasses.replace(alice, submission=dataclasses.replace(
        alice.submission, key="submission_301",
        submitters=[Submitter("Alice Martin", "s001", "ALICE@example.edu")]))
    notes = write_gradescope_scores_csv([alice, shouting], tmp_path / "gs.csv")
    assert len(read(tmp_path / "gs.csv")[1]) == 1 and len(notes) == 1
