"""autograder.runner.suite: the trusted runner as the parent starts it, on its own.

`python -I -m autograder.runner.suite FD` with a Job as JSON on stdin, in its work folder: the
events it streams on FD (their kinds, their order, what each carries), the state it runs hidden
tests in (not dumpable, umask 077, a memory limit, no plugin autoload, the assignment's probes
importable, the suite's own pytest configuration and any conftest.py above it ignored), and the
job's `skip` and budgets.
What the parent makes of the stream is tests/grading/test_supervisor.py's; the plugin's
validation and outcomes are tests/runner/test_pytest_plugin.py's; the memory limit's effect is
tests/runner/test_runner_limits.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from autograder.project import budgets
from autograder.protocol.job import Job
from autograder.protocol.statuses import RUNNER_EVENTS
from autograder.sandbox.folder import prepare_sandbox_dir

HIDDEN = '''
import ctypes, json, os, resource, sys

import pytest

import probes  # the assignment's, from the runner's sys.path


def test_state(student):
    """add: reports the runner's state"""
    umask = os.umask(0)
    os.umask(umask)
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    import torch
    # The seeding of each kind of device that is not available, waiting for it to start.
    absent = [getattr(torch, name) for name in ("cuda", "xpu", "mtia")
              if not getattr(torch, name).is_available()]
    waiting = [backend._lazy_seed_tracker.manual_seed_all_cb for backend in absent]
    torch.manual_seed(5)
    drawn = torch.rand(3)
    torch.manual_seed(5)
    pytest.fail(json.dumps({
        "seeded": bool(torch.equal(drawn, torch.rand(3))),
        "queued": [backend.__name__ for backend, before in zip(absent, waiting)
                   if backend._lazy_seed_tracker.manual_seed_all_cb is not before],
        "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), "umask": umask,
        "address_space": None if soft == resource.RLIM_INFINITY else soft,
        "autoload": os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"),
        "path0": sys.path[0], "cwd": os.getcwd(), "probes": probes.__file__,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuda": torch.cuda.is_available(),
        "sandbox_visible": student.probe(probes.visible_devices)}))


def test_student(student):
    """add: calls the student in a sandbox"""
    assert student.add(2, 3) == 5


def test_quick():
    """divide: passes"""


def test_scale():
    """scale: passes too"""
'''


def job_for(assignment, workdir: Path, **changes) -> Job:
    config = assignment.config
    fields = dict(
        tests_dir=str(assignment.hidden_tests), assignment_dir=str(assignment.root),
        module_name=config.module, functions=config.functions, output_dir=str(workdir),
        limits=asdict(config.limits), test_timeout=config.test_timeout,
        rank_retries=config.rank_retries, visibility=config.coding.visibility,
        crash_limit=config.crash_limit, import_timeout=config.import_timeout,
        budget_factor=config.budget_factor, budget_floor=config.budget_floor)
    return Job(**{**fields, **changes})


def run_runner(job: Job) -> tuple[list[dict], subprocess.CompletedProcess]:
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb") as events:
        done = subprocess.run([sys.executable, "-I", "-m", "autograder.runner.suite",
                               str(write_fd)], input=json.dumps(asdict(job)).encode(),
                              pass_fds=(write_fd,), capture_output=True, timeout=120,
                              cwd=job.output_dir)
        os.close(write_fd)
        stream = events.read()
    return [json.loads(line) for line in stream.decode().splitlines()], done


VISIBLE_PROBE = """

def visible_devices(mod):
    import os
    return os.environ.get("CUDA_VISIBLE_DEVICES")
"""


def test_the_event_stream_and_the_state_tests_run_in(assignment, toy, tmp_path, monkeypatch):
    made = assignment(HIDDEN)
    made.probes.write_text(made.probes.read_text() + VISIBLE_PROBE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # the GPUs this grader may use
    (made.hidden_tests / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option -x\n")
    # Nor is a conftest.py above the suite's folder (the project's tests/conftest.py was loaded
    # by every grading of its own fixtures).
    (made.hidden_tests.parent / "conftest.py").write_text("raise RuntimeError('not ours')\n")
    work = tmp_path / "work"
    work.mkdir()
    sandbox = prepare_sandbox_dir(toy / "submissions" / "good" / "toy.py", "toy", made.probes,
                                  work)
    events, done = run_runner(job_for(made, work, sandbox_dir=str(sandbox)))
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    kinds = [e["event"] for e in events]
    assert set(kinds) <= set(RUNNER_EVENTS)
    # environment first, then the collected specs, then start/result per test, done last.
    assert kinds[0] == "environment" and kinds[1] == "collected" and kinds[-1] == "done"
    assert "calibration" not in kinds  # no recorded timings: flat budgets, nothing measured
    environment = events[0]["environment"]
    assert {"gpus", "torch", "python", "isolation", "protections"} <= set(environment)
    nodeids = [t["nodeid"] for t in events[1]["tests"]]
    assert [n.split("::")[1] for n in nodeids] == \
        ["test_state", "test_student", "test_quick", "test_scale"]
    running = [e for e in events[2:-1] if e["event"] in ("start", "result")]
    assert [(e["event"], e["nodeid"]) for e in running] == \
        [(kind, n) for n in nodeids for kind in ("start", "result")]
    results = {e["nodeid"].split("::")[1]: e for e in events if e["event"] == "result"}
    for result in results.values():
        assert set(result) == {"event", "nodeid", "status", "cause", "message", "blocked_by",
                               "output", "output_cut", "duration"}
        assert type(result["duration"]) is float and result["duration"] >= 0
    assert [results[n]["status"] for n in ("test_student", "test_quick", "test_scale")] == \
        ["passed"] * 3
    assert [results[n]["cause"] for n in ("test_student", "test_quick", "test_scale")] == \
        ["passed"] * 3
    # The student's test started a sandbox: announced (its host pid) before its result.
    sandboxes = [i for i, e in enumerate(events) if e["event"] == "sandbox"]
    assert sandboxes and all(kinds.index("start") < i < len(kinds) - 1 for i in sandboxes)
    assert all(type(events[i]["pid"]) is int for i in sandboxes)
    assert events[-1] == {"event": "done", "exit_code": 1}  # pytest's: a test failed
    state = json.loads(results["test_state"]["message"])
    assert state["dumpable"] == 0 and state["umask"] == 0o077
    assert state["autoload"] == "1"
    assert state["path0"] == str(made.root) and state["probes"] == str(made.probes)
    assert state["cwd"] == str(work)
    assert state["address_space"] is not None  # on a GPU grader too (no CUDA in a runner)
    assert (work / "pytest.ini").read_text() == "[pytest]\n"  # the suite's own was ignored
    # torch.manual_seed seeds as ever, and no longer queues a seeding (with the Python stack)
    # of the kinds of devices this machine lacks, at every call (~2 ms each at a test's depth).
    assert state["seeded"] is True and state["queued"] == []
    # Its own torch sees no GPU, on any grader (autograder.runner.gpus); the sandbox is given
    # the grader's choice of GPUs.
    assert state["visible"] == "" and state["cuda"] is False
    assert state["sandbox_visible"] == "3"


def test_skipped_tests_are_not_run_and_budgets_come_from_recorded_times(assignment, tmp_path):
    made = assignment(HIDDEN.replace("import probes  #", "#"))
    nodeids = [f"test_hidden.py::{n}" for n in ("test_state", "test_student", "test_quick",
                                                 "test_scale")]
    job = job_for(made, tmp_path, missing_reason="no submission", skip=nodeids[:2],
                  timings={nodeids[2]: 0.01}, timings_calibration=1e9, budget_factor=10,
                  budget_floor=1.5)
    events, done = run_runner(job)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    kinds = [e["event"] for e in events]
    assert kinds[:3] == ["environment", "calibration", "collected"]
    calibration = events[1]
    assert calibration["seconds"] > 0
    # Recorded on a machine "infinitely" fast: this one is as slow as a factor may say.
    assert calibration["factor"] == budgets.machine_factor(1e9, calibration["seconds"])
    specs = {t["nodeid"]: t for t in events[2]["tests"]}
    assert list(specs) == nodeids  # skipped tests are still collected (and reported)
    expected = budgets.budget(0.01, 8, 10, 1.5, calibration["factor"])
    assert specs[nodeids[2]]["timeout"] == expected < 8
    assert specs[nodeids[3]]["timeout"] == 8  # no recorded time: timeouts.test
    started = [e["nodeid"] for e in events if e["event"] == "start"]
    assert started == nodeids[2:]
