"""autograder.grading.supervisor: the trusted parent's side of the hidden suite.

run_hidden_tests with real runners: outcomes in collection order with
their points, a runner killed mid-test failing that test alone while a new runner carries on
with the rest (and never reruns what finished), the limit of runner starts, the submission's
total time limit, a stream outside the vocabulary refused, and no sandbox process left after
it returns. Related, not repeated here: tests/grading/test_grade.py (student code that kills the
runner through the whole `grade`), tests/grading/test_hangs.py (hung functions), tests/redteam/
(escapes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autograder.grading import supervisor
from autograder.grading.supervisor import GradingError, run_hidden_tests
from autograder.inputs.submission import SubmissionFiles, locate

NO_MODULE = "no toy.py found in your submission"
ONLY_ADD = {"functions: {add: 3, divide: 3, scale: 2}": "functions: {add: 8}"}


def no_submission(tmp_path: Path) -> SubmissionFiles:
    return SubmissionFiles(tmp_path / "upload", None, NO_MODULE, None, [])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_toy_suite_on_a_correct_submission(assignment, toy, tmp_path, monkeypatch):
    import torch

    made = assignment()
    expected = [  # the toy's hidden tests; grading.yml: add 3, divide 3, scale 2 points,
        # split by the tests' weights (points(n)); collect_hidden_tests' own tests are in
        # tests/runner/test_pytest_plugin.py
        ("add: adds two integers", 1, "add"),
        ("add: adds tensors without changing the inputs", 1, "add"),
        ("add: works in two processes", 1, "add"), ("divide: divides", 2, "divide"),
        ("divide: raises ZeroDivisionError for a zero divisor", 1, "divide"),
        ("scale: doubles a tensor", 1, "scale"),
        ("scale: keeps a CUDA tensor on its GPU", 1, "scale")]

    # Every sandbox process the runner announces is recorded; none may outlive grading.
    announced: list[int] = []
    record = supervisor._Supervisor._record_sandbox
    monkeypatch.setattr(supervisor._Supervisor, "_record_sandbox",
                        lambda self, pid: (announced.append(pid), record(self, pid)))
    work = tmp_path / "work"
    work.mkdir()
    suite = run_hidden_tests(made, locate(toy / "submissions" / "good", "toy"), work)
    outcomes, warnings, environment = suite.outcomes, suite.warnings, suite.environment
    assert [(o.name, o.points, o.function) for o in outcomes] == expected
    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    assert [o.status for o in outcomes] == ["passed"] * 6 + \
        ["passed" if gpu else "gpu_unavailable"]
    assert warnings == []
    assert environment["isolation"] in ("namespaces", "uid", "none")
    assert announced and not any(alive(pid) for pid in announced)
    passed = {o.nodeid for o in outcomes if o.status == "passed"}
    # What the release self-check records of a reference: each passed test's time (and the
    # calibration workload's, measured only against recorded timings: the toy has none).
    assert set(suite.durations) == passed
    assert all(type(v) is float and v >= 0 for v in suite.durations.values())
    assert suite.calibration is None
    # pytest's output, for the grader's user alone: it may quote hidden tests.
    log = work / "runner.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and log.read_text()


KILLED = '''
import os, signal
from pathlib import Path

import pytest

RUNS = Path(os.environ["RUNS_FILE"])


def ran(name):
    with open(RUNS, "a") as f:
        f.write(name + "\\n")


def test_first():
    """add: before the crash"""
    ran("first")


def test_killer():
    """add: kills its runner"""
    ran("killer")
    os.kill(os.getpid(), signal.SIGKILL)


def test_after():
    """divide: after the crash"""
    ran("after")


def test_last():
    """scale: last"""
    ran("last")
    assert False, "fails on its own"
'''


def test_a_runner_killed_mid_test_fails_that_test_and_a_new_runner_runs_the_rest(
        assignment, tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv("RUNS_FILE", str(runs))  # the runner inherits the parent's environment
    suite = run_hidden_tests(assignment(KILLED), no_submission(tmp_path), tmp_path)
    outcomes, warnings = suite.outcomes, suite.warnings
    seen = {o.name: (o.status, o.message) for o in outcomes}
    assert list(seen) == ["add: before the crash", "add: kills its runner",
                          "divide: after the crash", "scale: last"]
    assert seen["add: before the crash"] == ("passed", "")
    assert seen["add: kills its runner"] == (
        "failed", "the grading process was killed during this test (signal SIGKILL); did your "
                  "code kill its parent process?")
    assert seen["divide: after the crash"] == ("passed", "")
    assert seen["scale: last"] == ("failed", "fails on its own")
    assert warnings == []
    # The second runner skipped what the first had finished, and the test it died in.
    assert runs.read_text().split() == ["first", "killer", "after", "last"]


EVERY_TEST_KILLS = "import os, signal\n" + "".join(f'''

def test_{i}():
    """add: number {i}"""
    os.kill(os.getpid(), signal.SIGKILL)
''' for i in range(4))


def test_runner_starts_are_limited_and_what_never_ran_says_so(assignment, tmp_path,
                                                              monkeypatch):
    starts = 2  # the limit (MAX_RUNNER_STARTS, 4) lowered: each start costs seconds here
    monkeypatch.setattr(supervisor, "MAX_RUNNER_STARTS", starts)
    outcomes = run_hidden_tests(assignment(EVERY_TEST_KILLS, ONLY_ADD),
                                no_submission(tmp_path), tmp_path).outcomes
    assert [o.message.split(" (")[0] for o in outcomes] == \
        ["the grading process was killed during this test"] * starts + \
        ["this test did not run: grading was stopped by the submission's time limit or "
         "repeated crashes"] * 2
    assert {o.status for o in outcomes} == {"failed"}


SLOW = '''
import time


def test_quick():
    """add: quick"""


def test_slow():
    """divide: sleeps past the submission's limit"""
    time.sleep(120)


def test_never():
    """scale: comes after"""
'''


def test_the_submissions_time_limit_stops_grading_where_it_is(assignment, tmp_path):
    made = assignment(SLOW, {"submission: 120": "submission: 10", "test: 8": "test: 300"})
    suite = run_hidden_tests(made, no_submission(tmp_path), tmp_path)
    outcomes, warnings = suite.outcomes, suite.warnings
    assert [(o.status, o.message) for o in outcomes] == [
        ("passed", ""),
        ("failed", "the submission's total time limit ran out during this test"),
        ("failed", "this test did not run: grading was stopped by the submission's time limit "
                   "or repeated crashes")]
    assert [o.cause for o in outcomes] == ["passed", "timed_out", "not_run_time_limit"]
    assert warnings == ["grading stopped at the submission's time limit"]


FORGED = '''
import json, os, sys


def test_forges_an_event():
    """add: writes an event the runner never sends"""
    os.write(int(sys.argv[1]), (json.dumps({"event": "surprise"}) + "\\n").encode())
'''


def test_an_event_outside_the_vocabulary_is_a_grading_error(assignment, tmp_path):
    with pytest.raises(GradingError, match="the runner sent an unknown event 'surprise'"):
        run_hidden_tests(assignment(FORGED, ONLY_ADD), no_submission(tmp_path), tmp_path)


def test_the_grader_private_files_and_the_sandbox_folders(assignment, toy, tmp_path):
    # Before a runner starts, the work folder's entries but the sandbox folders are private.
    (tmp_path / "upload").mkdir()
    (tmp_path / "upload" / "toy.py").write_text("x")
    (tmp_path / "notes.txt").write_text("the grader's")
    (tmp_path / "sandbox-x").mkdir(mode=0o755)
    supervisor._make_private(tmp_path)
    assert stat.S_IMODE((tmp_path / "upload").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "notes.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "sandbox-x").stat().st_mode) == 0o755
    assert os.access(tmp_path / "sandbox-x", os.R_OK)
