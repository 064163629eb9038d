"""A function that hung, or kept crashing, does not get to do it again; imports of the student's
module have one allowance per submission; budgets calibrated from the reference.

A small assignment of its own (written here, from the toy's question bank): its hidden tests
declare what they use (`uses`, `tolerant`), and submissions hang on purpose. Outcomes are checked
through their messages, never through wall times.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.project import budgets
from autograder.project.paths import Project
from autograder.sandbox.client import SandboxFailure, SandboxTimeout

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
ANSWERS = "sum_shape: A\nfloat_types: [A, C]\n"

CONFIG = """
course: hang tests
assignments:
  toy:
    title: Hangs
    module: toy
    total: 13
    parts:
      multiple_choice: {points: 2}
      coding:
        points: 11
        functions: {add: 4, divide: 3, scale: 4}
        show_student_output: true
    timeouts: {call: 2, test: 8, submission: 300, budget_factor: 10, budget_floor: 1.5,
               imports: IMPORTS}
    rank_retries: RETRIES
    crash_limit: CRASHES
"""

HIDDEN = '''
import pytest
import torch

import probes


@pytest.mark.points(1)
def test_add_first(student):
    """add: first"""
    assert student.add(2, 3) == 5


@pytest.mark.points(1)
def test_add_again(student):
    """add: again"""
    assert student.add(1, 1) == 2


@pytest.mark.points(1)
def test_add_ranks(student):
    """add: in two processes"""
    assert student.run_ranks(probes.rank_add, 2, 10) == [10, 11]


@pytest.mark.points(1)
def test_add_probe(student):
    """add: in a scenario"""
    assert student.probe(probes.add_twice, 1) == 4


@pytest.mark.uses("add")
@pytest.mark.points(1)
def test_divide_uses_add(student):
    """divide: after an addition"""
    assert student.divide(student.add(3, 3), 3) == 2


@pytest.mark.points(1)
@pytest.mark.uses("add")
@pytest.mark.tolerant
def test_divide_tolerant(student):
    """divide: even when add hangs"""
    assert student.divide(6, 3) == 2


@pytest.mark.points(1)
def test_divide_by_zero(student):
    """divide: raises for zero"""
    with pytest.raises(Exception):
        student.divide(1, 0)


@pytest.mark.points(1)
def test_scale_calls_add(student):
    """scale: undeclared use of add"""
    assert student.add(1, 2) == 3
    assert torch.equal(student.scale(torch.ones(2)), torch.full((2,), 2.0))


@pytest.mark.points(2)
def test_scale(student):
    """scale: doubles"""
    assert torch.equal(student.scale(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))


@pytest.mark.points(1)
def test_scale_simulated(student):
    """scale: with simulated GPUs"""
    report = student.simulated(2).probe(probes.scale_on_gpu)
    assert report == {"active": True, "asked": ["set_device"], "device": "cuda:1"}, report
'''

PROBES = '''
import sys


def rank_add(mod, rank, world_size, port, base):
    print("rank started", flush=True)
    return mod.add(base, rank)


def add_twice(mod, x):
    return mod.add(mod.add(x, x), mod.add(x, x))


def scale_on_gpu(mod):
    import torch
    from agsandbox import simulated_cuda

    torch.cuda.set_device(1)
    out = mod.scale(torch.ones(2).to("cuda:1"))
    asked = [e["event"] for e in simulated_cuda.journal()]
    return {"active": simulated_cuda.active(), "asked": asked, "device": str(out.device)}
'''

GOOD = """
def add(a, b):
    return a + b

def divide(a, b):
    return a / b if b else 1 // 0

def scale(x):
    return x * 2
"""

ADD_LOOPS = GOOD + """
import signal

def add(a, b):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pass
"""


def course(tmp_path: Path, retries: int = 2, timings: dict | None = None, crashes: int = 3,
           imports: float = 60) -> Path:
    root = tmp_path / "course"
    folder = root / "assignments" / "toy"
    (folder / "tests" / "hidden").mkdir(parents=True)
    shutil.copy(TOY / "assignments" / "toy" / "questions.yml", folder / "questions.yml")
    (folder / "tests" / "hidden" / "test_hangs.py").write_text(HIDDEN)
    (folder / "probes.py").write_text(PROBES)
    (root / "grading.yml").write_text(CONFIG.replace("RETRIES", str(retries)).replace(
        "CRASHES", str(crashes)).replace("IMPORTS", str(imports)))
    if timings is not None:
        (folder / budgets.TIMINGS_NAME).write_text(json.dumps(timings))
    return root / "grading.yml"


def graded(tmp_path: Path, source: str, config: Path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "toy.py").write_text(textwrap.dedent(source))
    (folder / "answers.yml").write_text(ANSWERS)
    report = grade(folder, "toy", tmp_path / "out", Project.of_config(config))
    assert json.loads((tmp_path / "out" / "results.json").read_text())["tests"]
    return report, {t.name: t for t in report.tests}


def test_the_reference_passes_everything(tmp_path):
    report, tests = graded(tmp_path, GOOD, course(tmp_path))
    coding = [t for t in tests.values() if t.part == "coding"]
    assert [t.name for t in coding if t.status != "passed"] == []


def test_a_function_that_hung_is_not_run_again(tmp_path):
    report, tests = graded(tmp_path, ADD_LOOPS, course(tmp_path))
    first = tests["add: first"]
    assert first.status == "failed" and "timed out after 2 s during add" in first.message
    assert first.cause == "timed_out"
    not_run = "not run: add did not finish within 2 s in an earlier test (add: first)"
    # Later tests of add, a test that declares it uses add, and a test that calls add without
    # declaring it: all fail at once with the cause, scenarios and rank scenarios included.
    for name in ("add: again", "add: in two processes", "add: in a scenario",
                 "divide: after an addition", "scale: undeclared use of add"):
        assert tests[name].status == "failed", name
        assert (tests[name].cause, tests[name].message) == ("not_run_hung", not_run), name
    assert "rank started" not in tests["add: in two processes"].output  # never started
    # A tolerant test runs anyway; tests of other functions run as usual.
    for name in ("divide: even when add hangs", "divide: raises for zero", "scale: doubles"):
        assert tests[name].status == "passed", name
    hang_notes = [w for w in report.warnings if "the first to hang" in w]
    assert hang_notes == ["add did not finish within 2 s in the test 'add: first' (the first "
                          "to hang); 5 later tests that need it were not run"]


def test_a_hanging_rank_scenario_is_retried_once_then_blocks_its_function(tmp_path):
    ranks_hang = GOOD + """
import sys, time

def add(a, b):
    if "rank_add" in repr(sys._getframe(1).f_code):
        while True:
            time.sleep(1)
    return a + b
"""
    report, tests = graded(tmp_path, ranks_hang, course(tmp_path, retries=2))
    assert tests["add: first"].status == "passed"
    ranks = tests["add: in two processes"]
    assert "during add (scenario rank_add, 2 processes)" in ranks.message
    assert "timed out after" in ranks.message
    # Two attempts, not 1 + rank_retries: a hang is retried once.
    assert ranks.output.count("[rank0]") == 2, ranks.output
    assert tests["add: in a scenario"].message.startswith("not run: add did not finish within")
    assert "(add: in two processes)" in tests["add: in a scenario"].message


RANKS_CRASH = GOOD + """
import os, sys

def add(a, b):
    if "rank_add" in repr(sys._getframe(1).f_code):
        print("rank crashes", flush=True)
        os._exit(3)
    return a + b
"""


def test_a_crashing_rank_scenario_is_retried_up_to_rank_retries(tmp_path):
    report, tests = graded(tmp_path, RANKS_CRASH, course(tmp_path, retries=2, crashes=5))
    ranks = tests["add: in two processes"]
    assert "exited with status 3" in ranks.message
    assert ranks.output.count("[rank0]") == 3, ranks.output  # 1 + rank_retries
    # A crash is not a hang, and 3 crashes are under this crash_limit: add still runs.
    assert tests["add: in a scenario"].status == "passed"
    assert not [w for w in report.warnings if "crashed" in w]


def test_rank_retries_count_toward_the_crash_limit(tmp_path):
    # crash_limit 2: the retry after the first crash is the last attempt (rank_retries 2 would
    # allow two), and add is not run again.
    report, tests = graded(tmp_path, RANKS_CRASH, course(tmp_path, retries=2, crashes=2))
    ranks = tests["add: in two processes"]
    assert "exited with status 3 in rank" in ranks.message
    assert ranks.output.count("[rank0]") == 2, ranks.output
    not_run = "not run: add crashed 2 times already (first in add: in two processes)"
    assert tests["add: in a scenario"].message == not_run
    assert tests["divide: after an addition"].message == not_run
    assert tests["add: first"].status == "passed"  # before the crashes
    assert tests["scale: doubles"].status == "passed"


ADD_CRASHES = GOOD + """
import os

def add(a, b):
    print("add runs", flush=True)
    os._exit(3)
"""


def test_a_function_that_keeps_crashing_is_not_run_again(tmp_path):
    report, tests = graded(tmp_path, ADD_CRASHES, course(tmp_path, crashes=2))
    for name in ("add: first", "add: again"):  # two crashes: the limit
        assert tests[name].status == "failed" and tests[name].cause == "crashed"
        assert tests[name].message == "your code exited with status 3 during add", name
    not_run = "not run: add crashed 2 times already (first in add: first)"
    # Later tests of add, one that declares it uses add, one that calls it undeclared: all
    # fail at once, rank scenarios and scenarios included (no rank was started).
    for name in ("add: in two processes", "add: in a scenario", "divide: after an addition",
                 "scale: undeclared use of add"):
        assert tests[name].status == "failed", name
        assert (tests[name].cause, tests[name].message) == ("not_run_crashed", not_run), name
        assert "add runs" not in tests[name].output, name
    assert "rank" not in tests["add: in two processes"].output
    # A tolerant test runs anyway; tests of other functions run as usual.
    for name in ("divide: even when add hangs", "divide: raises for zero", "scale: doubles",
                 "scale: with simulated GPUs"):
        assert tests[name].status == "passed", name
    notes = [w for w in report.warnings if "crashed" in w]
    assert notes == ["add crashed 2 times, first in the test 'add: first' (your code exited "
                     "with status 3 during add); 4 later tests that need it were not run"]


def test_imports_have_one_allowance_per_submission(tmp_path):
    # Every import takes 0.6 s and every call of add crashes, so each test of add imports the
    # module again: once 1.5 s of imports are spent, no test imports it again (a call, a
    # scenario, a rank scenario, another function's call all need a new worker here).
    slow_import = ADD_CRASHES + """
import time
time.sleep(0.6)
"""
    report, tests = graded(tmp_path, slow_import, course(tmp_path, crashes=10, imports=1.5))
    messages = [tests[name].message for name in (
        "add: first", "add: again", "add: in two processes", "add: in a scenario",
        "divide: after an addition", "divide: even when add hangs",
        "scale: undeclared use of add", "scale: doubles", "scale: with simulated GPUs")]
    assert messages[0] == "your code exited with status 3 during add"
    spent = [i for i, m in enumerate(messages) if "for imports" in m]
    assert spent and 1 <= spent[0] <= 3, messages  # after two or three imports
    for message in messages[spent[0]:]:
        assert "importing your module has used up this submission's 1.5 s for imports (" in \
            message, message
        assert re.search(r"your module is imported again after each crash and in each process "
                         r"of a multi-process test; one import took [\d.]+ s\)$", message), message
    not_run = [m for m in messages if m.startswith("not run: importing your module has used")]
    assert len(not_run) >= len(messages) - spent[0] - 1 >= 5, messages
    notes = [w for w in report.warnings if "for imports" in w]
    assert len(notes) == 1 and notes[0].startswith(
        "importing your module used up this submission's 1.5 s for imports ("), notes
    assert notes[0].endswith(f" s in all); {len(not_run)} later tests were not run"), notes


def test_budgets_come_from_the_reference_times(tmp_path):
    # add sleeps 1.8 s: under the call limit (2 s), over its calibrated budget (floor 1.5 s,
    # since 10 x 0.01 s x a machine factor >= 1 is less). divide has no recorded time: it keeps
    # the flat 8 s and its slow call passes.
    sleepy = GOOD + """
import time


def add(a, b):
    time.sleep(1.8)
    return a + b

def divide(a, b):
    time.sleep(1.8)
    return a / b if b else 1 // 0
"""
    nodeid = "test_hangs.py::test_add_first"
    timings = {"fingerprint": "x", "calibration": 1e9, "tests": {nodeid: 0.01}}
    report, tests = graded(tmp_path, sleepy, course(tmp_path, timings=timings))
    assert "timed out after 1.5 s during add" in tests["add: first"].message
    assert tests["add: again"].message.startswith("not run: add did not finish within 1.5 s")
    assert tests["divide: even when add hangs"].status == "passed"


def test_warm_batch_sandboxes_grade_as_cold_ones(tmp_path):
    """A batch's warm zygotes import nothing from the grader's package after the fork, and
    probes find the runtime under the name a cold sandbox gives it (simulated GPUs included)."""
    from autograder.batch.driver import batch

    config = course(tmp_path)
    folder = tmp_path / "class" / "alice"
    folder.mkdir(parents=True)
    (folder / "toy.py").write_text(GOOD)
    (folder / "answers.yml").write_text(ANSWERS)
    summary = batch(folder.parent, "toy", tmp_path / "batch", jobs=1,
                    project=Project.of_config(config), progress=False)
    assert summary.failed == 0
    warm = json.loads((tmp_path / "batch" / "reports" / "alice" / "report.json").read_text())
    coding = [t for t in warm["tests"] if t["part"] == "coding"]  # (questions: withheld)
    failed = {t["name"]: t["message"] for t in coding if t["status"] != "passed"}
    assert coding and failed == {}


def test_budget_arithmetic():
    assert budgets.budget(None, 60, 10, 5, 1) == 60  # no reference time: the flat cap
    assert budgets.budget(0.1, 60, 10, 5, 1) == 5  # the floor
    assert budgets.budget(2.0, 60, 10, 5, 1.5) == 30
    assert budgets.budget(20.0, 60, 10, 5, 1) == 60  # never more than the cap
    assert budgets.budget(2.0, 60, 0, 5, 1) == 60  # k 0: flat budgets
    assert budgets.machine_factor(0.2, 0.4) == 2.0
    assert budgets.machine_factor(0.2, 0.1) == 1.0  # a faster grader keeps the recorded times
    assert budgets.machine_factor(0.2, 100) == budgets.MAX_FACTOR
    assert budgets.machine_factor(None, 0.4) == 1.0
    assert budgets.calibration_seconds() > 0


def test_timings_file_and_its_staleness(tmp_path):
    config = course(tmp_path)
    root = config.parent / "assignments" / "toy"
    (root / "solution").mkdir()
    (root / "solution" / "toy.py").write_text(GOOD)
    assert "missing" in budgets.stale(root, "toy")
    recorded = budgets.Timings(budgets.fingerprint(root, "toy"), 0.2, {"a::b": 0.5})
    (root / budgets.TIMINGS_NAME).write_text(recorded.to_json())
    assert budgets.load(root) == recorded and budgets.stale(root, "toy") is None
    (root / "probes.py").write_text(PROBES + "\n# changed\n")
    assert "other hidden tests" in budgets.stale(root, "toy")


def test_timeouts_raise_a_typed_failure(make_sandbox):
    sandbox = make_sandbox("import time\ndef nap():\n    time.sleep(30)\n")
    with pytest.raises(SandboxTimeout) as caught:
        sandbox.call("nap", (), {}, timeout=0.5)
    assert isinstance(caught.value, SandboxFailure)
    assert caught.value.seconds == 0.5 and caught.value.what == "nap"
    assert str(caught.value) == "timed out after 0.5 s during nap"
