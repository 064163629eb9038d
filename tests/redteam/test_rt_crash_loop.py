"""Red team: a crash loop, graded by the real grader for both assignments.

The reference solution (with the key) whose module sleeps 8.5 s at import and whose every
function calls `os._exit(3)`: every test's call kills its worker, and the next test pays the
import again; each rank of a multi-process test imports it too, and a crashed rank scenario is
retried. Before the crash count and the import allowance, dp_basics took 5 min 7 s on it (the
submission's 300 s cap was hit, 23 tests not run). Now each function is run until it has
crashed `crash_limit` times and imports stop at `timeouts.imports`: the grading ends within
120 s, later tests fail at once saying why, and the report says it once per function.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.markers import reference

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 120.0
CRASH_LOOP = """

# --- a crash loop: a slow import, and every function kills its process ---
import os as _os
import time as _time

_time.sleep(8.5)


def _crash(*args, **kwargs):
    _os._exit(3)


"""


def crash_loop(folder: Path, name: str) -> Path:
    assignment = load_assignment(name, REPO)
    source = reference(assignment.solution.read_text()) + CRASH_LOOP
    source += "".join(f"{function} = _crash\n" for function in assignment.config.functions)
    folder.mkdir(parents=True)
    (folder / f"{assignment.config.module}.py").write_text(source)
    key = {q.id: (list(q.answer) if q.multiple else q.answer[0])
           for q in assignment.bank.questions}
    (folder / "answers.yml").write_text(yaml.safe_dump(key))
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both assignments' crash loops graded side by side by `autograder grade`: the report,
    the wall time and the command's exit status of each."""
    base = tmp_path_factory.mktemp("crash_loop")

    def grade(name: str) -> dict:
        submission = crash_loop(base / name, name)
        out = base / f"{name}-out"
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "autograder.cli", "grade", str(submission), "--assignment",
             name, "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
            timeout=BOUND_S + 200)
        wall = time.monotonic() - started
        report = json.loads((out / "report.json").read_text()) \
            if (out / "report.json").is_file() else None
        return {"wall": wall, "exit": done.returncode, "report": report,
                "results": (out / "results.json").is_file(), "stderr": done.stderr[-3000:]}

    names = ["dp_basics", "ddp_training"]
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(grade, names), strict=True))


@pytest.mark.parametrize("name", ["dp_basics", "ddp_training"])
def test_a_crash_loop_is_graded_within_the_bound(graded, name):
    run = graded[name]
    assert run["exit"] == 0 and run["results"] and run["report"], run["stderr"]
    assert run["wall"] <= BOUND_S, f"{name}: {run['wall']:.0f} s"
    report = run["report"]
    coding = [t for t in report["tests"] if t["part"] == "coding"]
    assert coding and all(t["status"] != "passed" for t in coding)
    assert not [t for t in coding if "did not run: grading was stopped" in t["message"]
                or "total time limit ran out" in t["message"]]  # the cap was never reached


@pytest.mark.parametrize("name", ["dp_basics", "ddp_training"])
def test_later_tests_fail_at_once_saying_why(graded, name):
    report = graded[name]["report"]
    messages = [t["message"] for t in report["tests"] if t["part"] == "coding"
                and t["status"] == "failed"]
    # ddp_training's budgets are shorter than the import (5 s against 8.5 s): there the import
    # hang stops the rest, as before; dp_basics' 10 s are not.
    not_run = [m for m in messages if m.startswith("not run: ")
               or m.startswith("importing your module took longer than")]
    crashes = [m for m in messages if m.startswith("your code exited with status 3")]
    assert crashes and len(not_run) >= len(messages) // 2, messages
    for message in not_run:  # each says which limit stopped it
        assert (" crashed " in message and " times already (first in " in message
                or "did not finish within" in message
                or message.startswith("importing your module took longer than")
                or message.startswith("not run: importing your module has used up this "
                                      "submission's 60 s for imports")), message
    # One warning per function not run again, one for the imports: none repeated.
    warnings = report["warnings"]
    assert len(warnings) == len(set(warnings))
    crashed = [w for w in warnings if " crashed 3 times, first in the test '" in w]
    for function in {m.split()[2] for m in not_run if " crashed " in m}:
        assert sum(w.startswith(f"{function} crashed 3 times") for w in crashed) == 1, warnings


def test_dp_basics_stops_importing_at_the_allowance(graded):
    report = graded["dp_basics"]["report"]
    messages = [t["message"] for t in report["tests"] if t["part"] == "coding"]
    assert sum(m.startswith("not run: importing your module has used up") for m in messages) > 20
    crashed_out = {m.split()[2] for m in messages if " crashed 3 times already " in m}
    assert "wrap_data_parallel" in crashed_out, messages
    notes = [w for w in report["warnings"] if w.startswith("importing your module used up")]
    assert len(notes) == 1, report["warnings"]
    assert report["environment"]["imports"]["limit_seconds"] == 60
    # Every import counted, a failed multi-process attempt at most over the line.
    assert 60 <= report["environment"]["imports"]["seconds"] < 60 + 10 + 8.5
