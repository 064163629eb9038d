"""autograder.runner.observe in a real grading: a hidden test whose scenario has a rank of the
grader's own. What it records is the test's evidence; what it saw go wrong fails the test at
once, as a wrong result (not a hang or a crash to retry), and unfinished work still reads as
not implemented.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from autograder.grading.grade import grade
from autograder.project.paths import Project

TOY = Path(__file__).parents[1] / "fixtures" / "toy"

CONFIG = """
course: observer tests
assignments:
  toy:
    title: Observed
    module: toy
    total: 5
    parts:
      multiple_choice: {points: 2}
      coding:
        points: 3
        functions: {add: 3}
        show_student_output: true
    timeouts: {call: 10, test: 20, submission: 300}
    rank_retries: 2
"""

HIDDEN = '''
import pytest
import torch
import torch.distributed as dist

import probes
from autograder.runner.observe import join_group, observe, posted


def summed(seat, size):
    """The grader's rank: contributes zeros, so it receives exactly what the other sent."""
    join_group(seat)
    values = torch.zeros(size)
    seat.note(f"all_reduce #0 ({size} float32)")
    posted(seat, dist.all_reduce(values, async_op=True))
    return {"got": values.tolist()}


@pytest.mark.points(2)
def test_add_observed(student):
    """add: its sum reaches the grader's rank"""
    results = student.run_ranks(probes.rank_send, 2, per_rank=[None, 4.0],
                                observer=observe(summed, 1, rank=0, wait=2.0))
    assert results.observed["got"] == [7.0], "the grader's rank should receive 4 + 3"


@pytest.mark.points(1)
def test_add(student):
    """add: adds"""
    assert student.add(2, 3) == 5
'''

PROBES = '''
def rank_send(mod, rank, world_size, port, base):
    import torch, torch.distributed as dist
    print("rank started", flush=True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    values = torch.tensor(mod.add(base, 3.0), dtype=torch.float32).reshape(-1)
    dist.all_reduce(values)
    return "sent"
'''


def graded(tmp_path: Path, source: str) -> dict:
    root = tmp_path / "course"
    folder = root / "assignments" / "toy"
    (folder / "tests" / "hidden").mkdir(parents=True)
    shutil.copy(TOY / "assignments" / "toy" / "questions.yml", folder / "questions.yml")
    (folder / "tests" / "hidden" / "test_observed.py").write_text(HIDDEN)
    (folder / "probes.py").write_text(PROBES)
    (root / "grading.yml").write_text(CONFIG)
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "toy.py").write_text(textwrap.dedent(source))
    (submission / "answers.yml").write_text("sum_shape: A\nfloat_types: [A, C]\n")
    report = grade(submission, "toy", tmp_path / "out", Project.of_config(root / "grading.yml"))
    assert json.loads((tmp_path / "out" / "results.json").read_text())["tests"]
    return {t.name: t for t in report.tests}


def test_what_the_graders_rank_received_passes_the_test(tmp_path):
    tests = graded(tmp_path, "def add(a, b):\n    return a + b\n")
    assert tests["add: its sum reaches the grader's rank"].status == "passed"


def test_a_collective_of_the_wrong_size_fails_once_as_a_wrong_result(tmp_path):
    tests = graded(tmp_path, "def add(a, b):\n    return [a + b, a + b]\n")
    observed = tests["add: its sum reaches the grader's rank"]
    assert (observed.status, observed.cause) == ("failed", "wrong_result")
    # (gloo aborts the rank that posted fewer bytes, or times out: it depends on the sizes)
    assert observed.message.startswith("the grader's own rank in this scenario "), \
        observed.message
    assert " at: all_reduce #0 (1 float32) (" in observed.message
    # the student's rank ended with the grader's: not retried as a crash (rank_retries 2)
    assert observed.output.count("rank started") == 1, observed.output
    assert tests["add: adds"].status == "failed"  # (a list is not 5)


def test_unfinished_work_is_still_not_implemented(tmp_path):
    tests = graded(tmp_path, "def add(a, b):\n    raise NotImplementedError\n")
    observed = tests["add: its sum reaches the grader's rank"]
    assert (observed.status, observed.cause) == ("failed", "not_implemented")
