"""`autograder batch` on a small class of toy submissions: real workers, runners and sandboxes,
a real SQLite gradebook, and the real command in a subprocess where signals are involved."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_view import seen_in, snooping_source

from autograder.batch.driver import BatchError, batch
from autograder.batch.gradebook import Gradebook
from autograder.grading.results import Report
from autograder.project.paths import Project

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
CONFIG = TOY / "grading.yml"
PROJECT = Project.of_config(CONFIG)
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
ANSWERS = (TOY / "submissions" / "good" / "answers.yml").read_text()
AUTOGRADER = Path(sys.executable).parent / "autograder"


def make_class(root: Path, students: dict[str, str | None]) -> Path:
    """A folder of per-student folders: {name: toy.py source, or None for no code at all}."""
    for name, source in students.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "answers.yml").write_text(ANSWERS)
        if source is not None:
            (folder / "toy.py").write_text(source)
    return root


BLANK = ("def add(a, b):\n    raise NotImplementedError\n\n\n"
         "def divide(a, b):\n    raise NotImplementedError\n\n\n"
         "def scale(x):\n    raise NotImplementedError\n")
# Right answers, and attempts the sandbox refuses (caught, so nothing shows in the report).
HOSTILE = GOOD.replace("def add(a, b):\n", """def add(a, b):
    import os, socket
    for attempt in (lambda: socket.create_connection(("203.0.113.9", 80), timeout=1),
                    lambda: open("/etc/autograder-was-here", "w"),
                    lambda: os.kill(os.getppid(), 9)):
        try:
            attempt()
        except Exception:
            pass
""")
CLASS = {"alice": GOOD, "bob": "def add(a, b):\n    return a - b\n",
         "carol": "def add(a, b) return a + b\n",  # a syntax error
         "dave": None, "erin": BLANK, "mallory": HOSTILE}
N = len(CLASS)
STATUSES = {"alice": "ok", "bob": "ok", "carol": "not_importable", "dave": "no_module",
            "erin": "blank", "mallory": "flagged"}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("class")
    submissions = make_class(root / "submissions", CLASS)
    out = root / "out"
    summary = batch(submissions, "toy", out, jobs=2, project=PROJECT, progress=False)
    assert (summary.total, summary.graded, summary.skipped, summary.failed) == (N, N, 0, 0)
    assert summary.left_out == 0 and summary.flagged == 1
    return submissions, out


def latest_scores(out: Path) -> dict[str, tuple]:
    with Gradebook(out / "gradebook.sqlite") as book:
        return {g.submission.key: (g.score, g.max_score, g.error,
                                   tuple((t.name, t.status) for t in g.report.tests))
                for g in book.latest()}


def run_counts(out: Path) -> dict[str, int]:
    db = sqlite3.connect(out / "gradebook.sqlite")
    try:
        return dict(db.execute("SELECT submission_key, COUNT(*) FROM runs GROUP BY 1"))
    except sqlite3.OperationalError:  # the batch has created the file, not yet its tables
        return {}
    finally:
        db.close()


def test_every_student_is_graded_and_one_broken_submission_costs_only_itself(graded_class):
    _, out = graded_class
    scores = latest_scores(out)
    assert scores["alice"][0] == scores["alice"][1] == 10  # the toy is out of 10
    assert 2 <= scores["bob"][0] < 10  # answers right, add wrong
    assert scores["mallory"][0] == 10  # flagged, not penalised: the TA decides
    for broken in ("carol", "dave", "erin"):  # no usable code: the answers still count
        assert scores[broken][0] == 2 and scores[broken][2] is None
    report = json.loads((out / "reports" / "carol" / "report.json").read_text())
    assert any("SyntaxError" in t["message"] for t in report["tests"] if t["part"] == "coding")


def test_outputs_for_the_class(graded_class):
    _, out = graded_class
    for sid in CLASS:
        for name in ("results.json", "report.json", "report.md", "report.html"):
            assert (out / "reports" / sid / name).is_file()
    with open(out / "grades.csv", newline="", encoding="utf-8-sig") as f:
        rows = {row["sid"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(CLASS)
    assert float(rows["alice"]["total"]) == 10
    assert {sid: row["status"] for sid, row in rows.items()} == STATUSES
    assert "SyntaxError" in rows["carol"]["reason"]
    assert "/etc/autograder-was-here" in rows["mallory"]["reason"]
    assert "203.0.113.9" in rows["mallory"]["reason"]
    assert (out / "grades.xlsx").is_file()
    # Canvas's import: everyone but the flagged submission, which waits for a TA.
    with open(out / "canvas_grades.csv", newline="", encoding="utf-8-sig") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         "Toy assignment"]
    assert canvas[1][0] == "Points Possible"
    assert sorted(row[2] for row in canvas[2:]) == sorted(set(CLASS) - {"mallory"})
    assert not (out / "gradescope_scores.csv").exists()  # no unverified Gradescope import
    index = (out / "index.html").read_text()
    assert all(f"reports/{sid}/report.html" in index for sid in CLASS)
    # The first section: who needs a look, with the reasons (the done-when of issue #13).
    first = index.split('<section id="look">', 1)[1].split("</section>", 1)[0]
    assert index[index.index("<body"):].split("<section", 2)[1].startswith(' id="look"')
    for sid in ("carol", "dave", "erin", "mallory"):
        assert f"reports/{sid}/report.html" in first
    assert "alice" not in first and "bob" not in first
    assert "SyntaxError" in first and "template unchanged" in first
    assert "tried to write outside its sandbox" in first
    # The students' own files say nothing about flags.
    for name in ("results.json", "report.json", "report.md", "report.html"):
        text = (out / "reports" / "mallory" / name).read_text()
        assert "flag" not in text.lower() and "autograder-was-here" not in text
    assert not list((out / "reports").rglob("ta-sandbox-events.json"))


def test_summaries_add_up_to_the_roster(graded_class, tmp_path, capsys):
    submissions, first_out = graded_class
    out = tmp_path / "out"
    shutil.copytree(first_out, out)
    nothing = batch(submissions, "toy", out, project=PROJECT, progress=True)
    assert nothing.nothing_to_grade and nothing.line() == f"{N} unchanged, nothing to grade"
    assert "submission" not in capsys.readouterr().err  # no empty progress bar
    one = batch(submissions, "toy", out, only=["alice"], project=PROJECT, progress=False)
    assert (one.graded, one.skipped, one.failed, one.left_out) == (1, 0, 0, N - 1)
    assert one.line().startswith(f"{N} submissions: 1 graded, 0 grader error(s), 0 unchanged, "
                                 f"{N - 1} left out by --only")
    result = subprocess.run([str(AUTOGRADER), "batch", str(submissions), "-a", "toy", "-o",
                             str(out), "--config", str(CONFIG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{N} unchanged, nothing to grade\n"


def test_history_of_a_student(graded_class, tmp_path):
    from autograder.batch.driver import history

    submissions, first_out = graded_class
    out = tmp_path / "out"
    shutil.copytree(first_out, out)
    changed = tmp_path / "submissions"
    shutil.copytree(submissions, changed)
    (changed / "carol" / "toy.py").write_text(GOOD)
    batch(changed, "toy", out, only=["carol"], project=PROJECT, progress=False)
    (entry,) = history(out, "carol")
    first, second = entry.runs
    assert (first.status, second.status) == ("not_importable", "ok")
    assert second.score_change == 8 and second.why == ["new files"]
    assert ("add: adds two integers", "failed", "passed") in second.tests
    assert [r.run_id for r in history(out, "carol", since_run=second.run_id)[0].runs] == \
        [second.run_id]
    with pytest.raises(BatchError, match="no submission of 'zoe'"):
        history(out, "zoe")
    with pytest.raises(BatchError, match="holds toy, not dp_basics"):
        history(out, "carol", assignment="dp_basics")
    result = subprocess.run([str(AUTOGRADER), "history", "carol", "-o", str(out), "-a", "toy"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "not_importable" in result.stdout and "(+8)" in result.stdout
    assert "add: adds two integers: failed -> passed" in result.stdout
    # -a names the assignment OUT should hold: another one is a clear error, before any output.
    wrong = subprocess.run([str(AUTOGRADER), "history", "carol", "-o", str(out), "-a",
                            "dp_basics"], capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "holds toy, not dp_basics" in wrong.stderr and "Traceback" not in wrong.stderr


def test_a_rerun_skips_unchanged_submissions_and_adds_history_for_regrades(graded_class,
                                                                          tmp_path):
    submissions, first_out = graded_class
    out = tmp_path / "out"
    shutil.copytree(first_out, out)
    again = batch(submissions, "toy", out, project=PROJECT, progress=False)
    assert (again.graded, again.skipped) == (0, N)
    assert run_counts(out) == dict.fromkeys(CLASS, 1)

    # One student resubmits: only they are regraded, and their first run stays in the history.
    changed = tmp_path / "submissions"
    shutil.copytree(submissions, changed)
    (changed / "bob" / "toy.py").write_text(GOOD)
    again = batch(changed, "toy", out, project=PROJECT, progress=False)
    assert (again.graded, again.skipped) == (1, N - 1)
    assert run_counts(out)["bob"] == 2
    assert latest_scores(out)["bob"][0] == 10
    with Gradebook(out / "gradebook.sqlite") as book:
        history = book.history("bob")
    assert [h.score for h in history] == [latest_scores(first_out)["bob"][0], 10]

    # --only regrades one student even when nothing changed; --force regrades everyone.
    batch(changed, "toy", out, only=["alice"], project=PROJECT, progress=False)
    assert run_counts(out) == {**dict.fromkeys(CLASS, 1), "alice": 2, "bob": 2}
    with pytest.raises(BatchError, match="no submission of zoe"):
        batch(changed, "toy", out, only=["zoe"], project=PROJECT, progress=False)


def _start(submissions: Path, out: Path, jobs: int = 1, mark: str = "") -> subprocess.Popen:
    # `mark` tags the batch and every worker (they inherit it) among other runs on the machine.
    return subprocess.Popen(
        [str(AUTOGRADER), "batch", str(submissions), "-a", "toy", "-o", str(out),
         "--jobs", str(jobs), "--config", str(CONFIG)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "AUTOGRADER_TEST_MARK": mark})


def _marked(mark: str) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"AUTOGRADER_TEST_MARK={mark}".encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            pass
    return found


def _wait_for_runs(out: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if (out / "gradebook.sqlite").exists() and sum(run_counts(out).values()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {count} runs recorded: {process.poll()}")


def test_kill_9_then_rerun_gives_the_same_gradebook_as_an_uninterrupted_run(graded_class,
                                                                           tmp_path):
    submissions, uninterrupted = graded_class
    out = tmp_path / "out"
    process = _start(submissions, out)
    _wait_for_runs(out, 1, process)
    process.kill()  # SIGKILL: no clean-up of any kind in the batch process
    process.wait()
    assert 1 <= sum(run_counts(out).values()) < N
    rerun = _start(submissions, out, jobs=2)
    stdout, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr
    assert run_counts(out) == dict.fromkeys(CLASS, 1)  # nothing lost, nothing twice
    assert latest_scores(out) == latest_scores(uninterrupted)
    assert f"{N} submissions: " in stdout and " unchanged" in stdout


def _interrupted_outputs(out: Path, stderr: str) -> None:
    """What an interrupted batch leaves: the class outputs for every finished submission,
    and how many finished."""
    finished = sum(run_counts(out).values())
    assert 1 <= finished < N
    assert f"interrupted: {finished} of {N} submissions to grade finished" in stderr
    assert f"{N - finished} not graded" in stderr
    with open(out / "grades.csv", newline="", encoding="utf-8-sig") as f:
        graded = [row for row in csv.DictReader(f)]
    assert len(graded) == finished
    index = (out / "index.html").read_text()
    assert all(f"reports/{row['sid']}/report.html" in index for row in graded)


def test_ctrl_c_stops_cleanly_writes_what_finished_and_a_rerun_resumes(graded_class,
                                                                       tmp_path):
    submissions, uninterrupted = graded_class
    out = tmp_path / "out"
    mark = os.urandom(8).hex()
    process = _start(submissions, out, mark=mark)
    _wait_for_runs(out, 1, process)
    assert len(_marked(mark)) >= 2  # the batch and its worker
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "run the same command again" in stderr
    _interrupted_outputs(out, stderr)
    time.sleep(1)
    assert _marked(mark) == []  # its workers are gone with it
    rerun = _start(submissions, out)
    rerun.communicate(timeout=300)
    assert rerun.returncode == 0
    assert latest_scores(out) == latest_scores(uninterrupted)
    assert set(run_counts(out).values()) == {1}


def test_sigterm_stops_like_ctrl_c(graded_class, tmp_path):
    """A batch stopped by SIGTERM (a scheduler's time limit, `kill`) also writes what it has;
    by default SIGTERM ended it at once with no grades.csv and no overview."""
    submissions, _ = graded_class
    out = tmp_path / "out"
    mark = os.urandom(8).hex()
    process = _start(submissions, out, mark=mark)
    _wait_for_runs(out, 1, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    _interrupted_outputs(out, stderr)
    time.sleep(1)
    assert _marked(mark) == []


def test_the_progress_bar_names_the_students_not_the_export_folder():
    from autograder.batch.driver import progress_label
    from autograder.batch.records import ClassSubmission, Submitter

    def label(*submitters: Submitter) -> str:
        return progress_label(ClassSubmission("submission_227444538", Path("x"),
                                              list(submitters)))

    assert label(Submitter("Ann Lee", "03078615")) == "Ann Lee"
    assert label(Submitter("Ann Lee", "1"), Submitter("", "2")) == "Ann Lee & 2"  # a group
    assert label() == "submission_227444538"  # nobody named in the metadata
    hostile = label(Submitter("\x1b[2J" + "x" * 100, "1"))
    assert "\x1b" not in hostile and len(hostile) <= 40  # one short inert line


def test_bad_options_are_refused_before_anything_is_graded(tmp_path):
    submissions = make_class(tmp_path / "s", {"alice": GOOD})
    with pytest.raises(BatchError, match="unknown backend"):
        batch(submissions, "toy", tmp_path / "o", backend="slurm", project=PROJECT)
    result = subprocess.run([str(AUTOGRADER), "batch", str(submissions), "-a", "toy", "-o",
                             str(tmp_path / "o"), "--jobs", "0", "--config", str(CONFIG)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--jobs" in result.stderr
    with pytest.raises(BatchError, match="--canvas-id must be the number"):
        batch(submissions, "toy", tmp_path / "o", canvas_id="abc", project=PROJECT)


def test_warm_sandboxes_are_as_walled_off_as_cold_ones(tmp_path, monkeypatch):
    """Batch workers fork runners and sandbox zygotes from warm servers; what a submission can
    see from inside must not change: no grader environment, no hidden tests in memory or on
    disk, no grader processes."""
    from autograder.grading.grade import grade

    canary = "CANARY-" + os.urandom(8).hex()
    monkeypatch.setenv("AUTOGRADER_TEST_SECRET", canary)
    hidden = TOY / "assignments" / "toy" / "tests" / "hidden" / "test_toy.py"
    submissions = make_class(tmp_path / "s", {"eve": snooping_source(hidden)})
    summary = batch(submissions, "toy", tmp_path / "out", project=PROJECT, progress=False)
    assert summary.failed == 0
    warm = json.loads((tmp_path / "out" / "reports" / "eve" / "report.json").read_text())
    cold = grade(submissions / "eve", "toy", tmp_path / "cold", PROJECT)

    observed = seen_in(Report.from_json(warm).tests)
    assert canary not in observed["environ"] and "AUTOGRADER_TEST_SECRET" not in \
        observed["environ"]
    assert observed["test_modules"] == []
    assert not observed["hidden_visible"] and not observed["canary_in_memory"]
    assert observed["foreign_processes"] == []  # the grader's processes are out of sight
    assert observed["uid"] != 0 and observed["pid"] < 10  # own user, own PID namespace
    assert warm["environment"]["protections"] == cold.environment.protections
    assert warm["score"] == cold.score
    cold_seen = seen_in(cold.tests)
    assert set(observed["environ"].split("\0")) <= set(cold_seen["environ"].split("\0")) | {
        "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "PYTHONHASHSEED=0", ""} | {
        e for e in observed["environ"].split("\0") if e.split("=")[0] in (
            "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}


def test_one_batch_at_a_time_per_output_folder_and_missing_reports_are_regraded(graded_class,
                                                                                tmp_path):
    import fcntl

    submissions, first_out = graded_class
    out = tmp_path / "out"
    shutil.copytree(first_out, out)
    with open(out / ".lock", "w") as held:  # as a running batch holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BatchError, match="another autograder batch is writing"):
            batch(submissions, "toy", out, project=PROJECT, progress=False)
    # A batch killed while swapping a student's report folder left it missing.
    shutil.rmtree(out / "reports" / "carol")
    again = batch(submissions, "toy", out, project=PROJECT, progress=False)
    assert (again.graded, again.skipped) == (1, N - 1)
    assert (out / "reports" / "carol" / "report.html").is_file()


def test_a_batch_where_student_code_cannot_be_isolated_is_refused_before_anyone_is_graded(
        tmp_path, monkeypatch):
    from autograder.sandbox.isolation import IsolationUnavailable

    monkeypatch.setenv("AUTOGRADER_ISOLATION", "uid")
    monkeypatch.delenv("AUTOGRADER_UNSAFE_NO_ISOLATION", raising=False)
    submissions = make_class(tmp_path / "s", {"alice": GOOD, "bob": GOOD})
    try:
        batch(submissions, "toy", tmp_path / "out", project=PROJECT, progress=False)
    except IsolationUnavailable as exc:
        assert "AUTOGRADER_ISOLATION=uid" in str(exc) and "To fix:" in str(exc)
    else:
        pytest.skip("uid mode works on this machine")
    assert not (tmp_path / "out").exists()  # not N grader errors: nothing at all


def test_a_sandbox_that_cannot_start_is_a_grader_error_never_the_students(
        tmp_path, sandbox_cannot_start):
    submissions = make_class(tmp_path / "s", {"alice": GOOD})
    out = tmp_path / "out"
    summary = batch(submissions, "toy", out, project=Project.of_config(sandbox_cannot_start),
                    progress=False)
    assert (summary.graded, summary.failed, summary.statuses) == (0, 1, {"grader_error": 1})
    with Gradebook(out / "gradebook.sqlite") as book:
        [row] = book.latest()
    assert row.report is None  # no verdict on the student's code
    assert "the sandbox could not start: the isolation launcher failed" in row.error
    assert row.status.status == "grader_error"
    assert not (out / "reports" / "alice").exists()  # nothing published (retried next run)


# A check of the toy's that is the grader's own bug, for every submission (weight 0: the
# points stay with the other tests).
GRADER_BUG = '''
import pytest



def test_add(student):
    """add: adds"""
    assert student.add(2, 3) == 5, "add(2, 3) should be 5"


@pytest.mark.weight(0)
def test_add_buggy(student):
    """add: a check with a bug of its own"""
    assert student.add(1, 1) == 2 and {}["typo"]


def test_divide(student):
    """divide: divides"""
    assert student.divide(6, 3) == 2, "divide(6, 3) should be 2"


def test_scale(student):
    """scale: doubles"""
    assert student.scale(2) == 4, "scale(2) should be 4"
'''


def test_a_check_the_grader_could_not_run_is_a_grader_error_of_the_batch(tmp_path):
    """Issue 24: a report with a grader_error test was counted as graded ("0 grader error(s)",
    exit 0). It counts as the grader's failure (graded in part: its reports are published),
    the command exits 1, and the next run grades it again."""
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    hidden = course / "assignments" / "toy" / "tests" / "hidden"
    for old in hidden.glob("*.py"):
        old.unlink()
    (hidden / "test_bug.py").write_text(GRADER_BUG)
    config = course / "grading.yml"
    submissions = make_class(tmp_path / "s", {"alice": GOOD, "bob": "def add(a, b):\n"
                                                                    "    return a + b\n"})
    out = tmp_path / "out"
    result = subprocess.run([str(AUTOGRADER), "batch", str(submissions), "-a", "toy", "-o",
                             str(out), "--config", str(config)], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 submissions: 0 graded, 2 grader error(s) (2 graded in part), 0 unchanged" in \
        result.stdout
    with Gradebook(out / "gradebook.sqlite") as book:
        rows = {row.submission.key: row for row in book.latest()}
    assert {k: r.status.status for k, r in rows.items()} == {"alice": "grader_error",
                                                             "bob": "grader_error"}
    assert rows["alice"].status.grader_errors == 1 and rows["alice"].score is not None
    assert (out / "reports" / "alice" / "results.json").is_file()  # graded, in part
    again = batch(submissions, "toy", out, project=Project.of_config(config), progress=False)
    assert (again.graded, again.skipped, again.failed, again.failed_in_part) == (0, 0, 2, 2)
    assert again.statuses == {"grader_error": 2}
