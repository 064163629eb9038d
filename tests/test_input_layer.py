"""The input layer on issue 18's hostile inputs, called directly (no grading): every one ends in
a specific message, never an exception; text is made inert; lists, reports, gradebook rows and
worker answers stay bounded; the limited child process reports what went wrong."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from hostile_inputs import (
    INJECTION,
    RAW_CONTROLS,
    encrypted,
    huge_int_notebook,
    magic_flood_notebook,
    nested_lambdas_notebook,
    write,
    zip_bytes,
)
from repo_project import REPO
from report_records import AN_ENVIRONMENT, a_report, a_test

from autograder.batch.gradebook import MAX_REPORT_CHARS, Gradebook
from autograder.batch.local_workers import LineReader, LineTooLong
from autograder.batch.records import ClassSubmission, GradeOutcome
from autograder.grading.grade import _submission_files
from autograder.grading.report import MAX_FILE_BYTES, write_outputs
from autograder.grading.results import TestResult as Result
from autograder.grading.results import build_report
from autograder.inputs.archives import ArchiveError, extract_zip
from autograder.inputs.notebook import NotebookError, extract_module
from autograder.project.assignment import load_assignment
from autograder.project.inert import bounded, inert, label
from autograder.project.paths import Project
from autograder.project.schemas import validate
from autograder.questions.answers import grade_answers, load_answers
from autograder.sandbox.untrusted_parse import ChildFailed, Limits, run_limited

ROOT = Path(__file__).resolve().parents[1]
TOY_CONFIG = ROOT / "tests" / "fixtures" / "toy" / "grading.yml"
GOOD = (ROOT / "tests" / "fixtures" / "toy" / "submissions" / "good" / "toy.py").read_text()


@pytest.fixture(scope="module")
def toy():
    return load_assignment("toy", Project.of_config(TOY_CONFIG))


# ----------------------------------------------------------------------------- answers files


@pytest.mark.parametrize("name,text", [
    ("answers.yml", "sum_shape: " + "1" * 5000 + "\n"),
    ("answers.json", '{"sum_shape": ' + "1" * 5000 + "}"),
])
def test_an_answers_file_with_a_5000_digit_number_gets_a_message(tmp_path, toy, name, text):
    graded = grade_answers(toy.bank, write(tmp_path / name, text))  # raised ValueError before
    q1 = next(r for r in graded.results if r.id == "sum_shape")
    assert q1.status == "invalid" and q1.score == 0
    assert "too long" in q1.message or "5000 digits" in q1.message, q1.message
    if name.endswith(".yml"):
        assert "line 1" in q1.message  # the place, where the parser knows it


def test_answers_values_that_are_not_letters_still_get_their_own_message(tmp_path, toy):
    text = ("sum_shape: 2024-01-01\nfloat_types: !!binary aGVsbG8=\n"
            "unknown_1: 0x" + "f" * 5000 + "\n")
    answers, errors = load_answers(write(tmp_path / "answers.yml", text))
    assert not errors
    graded = grade_answers(toy.bank, tmp_path / "answers.yml")
    messages = {r.id: r.message for r in graded.results}
    assert "date" in messages["sum_shape"], messages
    assert "bytes" in messages["float_types"], messages
    assert any("unknown question id" in w for w in graded.warnings)


def test_a_long_select_all_list_is_refused_at_once(tmp_path, toy):
    path = write(tmp_path / "answers.yml", "float_types: [" + ", ".join(["A"] * 60000) + "]\n")
    started = time.monotonic()
    graded = grade_answers(toy.bank, path)
    assert time.monotonic() - started < 10
    q2 = next(r for r in graded.results if r.id == "float_types")
    assert q2.status == "invalid" and "60000 letters" in q2.message


# ----------------------------------------------------------------------------- zips


def _extract_problem(tmp_path: Path, data: bytes) -> str:
    archive = write(tmp_path / "upload.zip", data)
    with pytest.raises(ArchiveError) as caught:
        extract_zip(archive, tmp_path / "out")
    return str(caught.value)


def test_an_encrypted_zip_is_refused_with_a_reason(tmp_path):
    data = encrypted(zip_bytes([("toy.py", GOOD)]))  # RuntimeError before
    assert "encrypted" in _extract_problem(tmp_path, data)


def test_a_zip_with_a_file_and_a_folder_of_one_name_is_refused(tmp_path):
    data = zip_bytes([("notes/a.txt", "x"), ("notes", "y"), ("toy.py", GOOD)])
    problem = _extract_problem(tmp_path, data)  # IsADirectoryError before
    assert "a file and a folder of the same name" in problem and "'notes'" in problem


def test_a_zip_entry_with_a_300_character_name_is_refused(tmp_path):
    problem = _extract_problem(tmp_path, zip_bytes([("a" * 300 + ".py", "x")]))
    assert "over 255 bytes" in problem


def test_a_zip_entry_named_with_escapes_is_quoted_inert(tmp_path):
    problem = _extract_problem(tmp_path, zip_bytes([("../" + INJECTION, "x")]))
    assert not any(c in problem for c in RAW_CONTROLS), problem


@pytest.mark.parametrize("build", [
    lambda: encrypted(zip_bytes([("toy.py", GOOD)])),
    lambda: zip_bytes([("notes/a.txt", "x"), ("notes", "y")]),
    lambda: zip_bytes([("a" * 300, "x")]),
    lambda: zip_bytes([("toy.py", GOOD)])[:-30],  # truncated
    lambda: b"PK\x03\x04" + os.urandom(200),
])
def test_every_broken_zip_becomes_a_coding_problem_not_an_exception(tmp_path, build):
    archive = write(tmp_path / "upload.zip", build())
    files = _submission_files(archive, tmp_path / "upload", "toy")
    assert files.module is None and files.module_problem
    assert files.module_problem.startswith("upload.zip: ")


# ----------------------------------------------------------------------------- notebooks


def test_a_notebook_holding_a_huge_number_gets_a_message(tmp_path):
    path = write(tmp_path / "toy.ipynb", huge_int_notebook(GOOD))
    with pytest.raises(NotebookError, match="number too long"):  # ValueError before
        extract_module(path, "toy")


def test_a_notebook_of_5000_nested_lambdas_is_compiled_only_in_the_child(tmp_path):
    # compile() in the trusted parent raised MemoryError: now the child's check gives up and
    # the module goes on to the sandbox, whose import reports the error to the student.
    path = write(tmp_path / "toy.ipynb", nested_lambdas_notebook())
    extracted = extract_module(path, "toy")
    assert "lambda: lambda:" in extracted.source


def test_a_flood_of_magics_gives_a_few_short_notes_quickly(tmp_path):
    path = write(tmp_path / "toy.ipynb", magic_flood_notebook())
    assert 290_000 < path.stat().st_size < 320_000  # issue 18's 302 KB notebook
    started = time.monotonic()
    extracted = extract_module(path, "toy")
    assert time.monotonic() - started < 10
    assert len(extracted.warnings) <= 11 and extracted.warnings[-1] == "... and 99990 more"
    assert max(len(w) for w in extracted.warnings) < 400


def test_a_notebook_label_with_escapes_is_inert_and_on_one_line(tmp_path):
    from hostile_inputs import notebook_json, solution_cell

    path = write(tmp_path / "toy.ipynb", notebook_json([solution_cell(
        "%matplotlib inline\n" + GOOD, grade_id="add\nimport os" + INJECTION)]))
    extracted = extract_module(path, "toy")
    for text in [extracted.source, *extracted.warnings]:
        assert not any(c in text for c in RAW_CONTROLS), text
    assert "\nimport os" not in extracted.source  # the label cannot add a line of code


# ----------------------------------------------------------------------------- inert text


def test_inert_escapes_every_control_and_bidi_character_visibly():
    text = inert("ok\n\t" + INJECTION + "\ud800\x00\x7f\u2028")
    assert not any(c in text for c in (*RAW_CONTROLS, "\ud800", "\x00", "\x7f", "\u2028"))
    assert text.startswith("ok\n\t") and "\\x1b[2J" in text and "\\u202e" in text
    assert inert(text) == text  # idempotent
    assert label("a\nb\tc") == "a\\nb\\tc"
    assert len(label("x" * 1000)) == 80


def test_bounded_keeps_the_first_lines_and_counts_the_rest():
    lines = bounded(f"warning {i} \x1b[2J" + "x" * 5000 for i in range(100_000))
    assert len(lines) == 41 and lines[-1] == "... and 99960 more"
    assert all(len(line) < 700 and "\x1b" not in line for line in lines)
    assert bounded(lines) == lines  # applying it again changes nothing


# ----------------------------------------------------------------------------- reports


def test_reports_stay_under_their_cap_whatever_the_submission_printed(tmp_path, toy):
    tests = [Result(f"add: test {i}", "coding", "add", 0.0, 1.0, "failed", "wrong_result",
                        "m" * 50_000 + INJECTION, "visible", output=("p" * 99 + "\n") * 10_000,
                        feedback=["f" * 10_000] * 100) for i in range(8)]
    warnings = [f"note {i}: " + "w" * 10_000 + INJECTION for i in range(100_000)]
    report = build_report(toy.config, "sub" + INJECTION, tests, warnings, AN_ENVIRONMENT, 1.0)
    written = write_outputs(report, tmp_path, REPO.schemas)
    for name in ("results.json", "report.json", "report.md", "report.html"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert len(text.encode()) <= MAX_FILE_BYTES, (name, len(text))
        assert not any(c in text for c in RAW_CONTROLS), name
    results = json.loads((tmp_path / "results.json").read_text())
    validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    assert not any(c in json.dumps(results, ensure_ascii=False) for c in RAW_CONTROLS)
    assert "[output cut to keep the report small]" in written.tests[0].output
    assert written.warnings[-1] == "... and 99960 more"


def test_a_gradebook_row_is_bounded(tmp_path, toy):
    huge = a_report(a_test("add", "failed", message="m" * 100_000, output="o" * 1_000_000),
                    warnings=["w" * 1000] * 5000)
    with Gradebook(tmp_path / "gradebook.sqlite") as book:
        book.record(ClassSubmission("s1", tmp_path, []), "toy",
                    GradeOutcome("s1", huge, None, 1.0), "hash", "g", "a", None)
        book.record(ClassSubmission("s2", tmp_path, []), "toy",
                    GradeOutcome("s2", None, "boom\x1b[2J" + "e" * 100_000, 1.0), "h", "g", "a",
                    None)
        stored = book.db.execute("SELECT length(report), length(error) FROM runs").fetchall()
        message = book.db.execute("SELECT length(message) FROM outcomes").fetchone()[0]
        error = book.db.execute("SELECT error FROM runs WHERE submission_key='s2'").fetchone()[0]
    assert stored[0][0] <= MAX_REPORT_CHARS and stored[1][1] <= 4100 and message <= 4100
    assert "\x1b" not in error


# ----------------------------------------------------------------------------- worker answers


def test_reading_worker_answers_is_linear_and_capped():
    reader = LineReader(limit=80 << 20)
    chunk = b"x" * (1 << 16)
    started = time.monotonic()
    for _ in range(1024):  # 64 MiB in 64 KiB pieces: 50 s with `buffer += chunk` + split
        assert reader.feed(chunk) == []
    (line,) = reader.feed(b"end\nnext")
    assert time.monotonic() - started < 5 and len(line) == (64 << 20) + 3
    assert reader.feed(b"\n") == [b"next"]
    small = LineReader(limit=1000)
    with pytest.raises(LineTooLong):
        small.feed(b"y" * 1001)


def test_worker_answers_through_a_real_pipe():
    read_fd, write_fd = os.pipe()
    lines = [json.dumps({"n": i, "pad": "z" * (i * 5000)}).encode() for i in range(50)]

    def writer() -> None:
        with os.fdopen(write_fd, "wb") as out:
            out.write(b"\n".join(lines) + b"\n")

    thread = threading.Thread(target=writer)
    thread.start()
    reader, got = LineReader(), []
    while chunk := os.read(read_fd, 1 << 16):
        got += reader.feed(chunk)
    thread.join()
    os.close(read_fd)
    assert got == lines


# ----------------------------------------------------------------------------- the child


def _allocate() -> int:
    return len(bytearray(8 << 30))


def _recurse(n: int = 0) -> int:
    return _recurse(n + 1)


def _spin() -> None:
    while True:
        pass


def _segfault() -> None:
    ctypes.string_at(0)


def _sleep() -> None:
    time.sleep(60)


def _big_reply() -> str:
    return "r" * (2 << 20)


@pytest.mark.parametrize("fn,limits,reason", [
    (_allocate, Limits(), "memory"),
    (_recurse, Limits(), "depth"),
    (_spin, Limits(cpu_seconds=1), "time"),
    (_sleep, Limits(timeout_s=1), "time"),
    (_segfault, Limits(), "crash"),
    (_big_reply, Limits(reply_bytes=1 << 20), "size"),
])
def test_the_limited_child_reports_what_stopped_it(fn, limits, reason):
    with pytest.raises(ChildFailed) as caught:
        run_limited(fn, limits=limits)
    assert caught.value.reason == reason, caught.value


def test_the_limited_child_returns_json_and_leaves_no_process():
    assert run_limited(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(ChildFailed, match="KeyError"):
        run_limited({}.__getitem__, "missing")
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # every child was reaped


def test_the_child_is_killed_with_its_parent(tmp_path):
    # Survivors would outlive grading: the child of a killed parent must die too.
    marker = tmp_path / "child.pid"
    pid = os.fork()
    if pid == 0:  # a stand-in for the trusted parent
        try:
            def record_and_sleep() -> None:
                marker.write_text(str(os.getpid()))
                time.sleep(60)

            run_limited(record_and_sleep, limits=Limits(file_bytes=1 << 20, timeout_s=60))
        finally:
            os._exit(0)
    deadline = time.monotonic() + 10
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(marker.read_text())
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the limited child outlived its parent"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


# ----------------------------------------------------------------------------- check.py


def test_check_py_reports_huge_numbers_and_deep_nesting_to_the_student(tmp_path):
    # The students' own check.py (autograder/student_files/check.py, self-contained) on the same
    # inputs.
    from autograder.student_files.check import check_module, load_answers_file

    write(tmp_path / "toy.py", "f = " + "lambda: " * 5000 + "0\n")
    section = check_module(tmp_path, "toy")
    assert section.problems == ["toy.py cannot be compiled: it is nested too deeply"]
    answers, problem = load_answers_file(write(tmp_path / "answers.yml",
                                               "q: " + "1" * 5000 + "\n"))
    assert answers == {} and "number is too long" in problem
