"""autograder.runner.warm and fork_channel: a batch worker's warm runner server.

A real server (`python -I -m autograder.runner.warm FD`, started by RunnerServer):
each job gets a freshly forked runner (its own pid, session and results stream) that reports
how it ended; a server that dies makes `alive` False, `spawn` None and its runners count as
killed, and grading then starts runners cold; and grading the toy through the server gives the
same report as grading it cold. Its sandboxes' walls are tests/batch/test_batch.py's
(test_warm_sandboxes_are_as_walled_off_as_cold_ones) and tests/grading/test_hangs.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from autograder.grading.grade import grade_loaded
from autograder.grading.supervisor import run_hidden_tests
from autograder.inputs.submission import SubmissionFiles
from autograder.project.assignment import load_assignment
from autograder.project.paths import Project
from autograder.protocol.fork_channel import SCRATCH_PREFIX, RunnerServer, server_env
from autograder.protocol.job import Job

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"


@pytest.fixture(scope="module")
def server():
    # A token in the batch worker's environment must not reach the server (and so no zygote).
    os.environ["AUTOGRADER_TEST_TOKEN"] = "secret-token"
    try:
        started = RunnerServer()
    finally:
        del os.environ["AUTOGRADER_TEST_TOKEN"]
    yield started
    started.close()


def collect_job(workdir: Path, assignment=None) -> str:
    made = assignment or load_assignment("toy", Project.of_config(TOY / "grading.yml"))
    config = made.config
    workdir.mkdir(parents=True, exist_ok=True)
    return json.dumps(asdict(Job(
        tests_dir=str(made.hidden_tests), assignment_dir=str(made.root),
        module_name=config.module, functions=config.functions, output_dir=str(workdir),
        limits=asdict(config.limits), test_timeout=config.test_timeout,
        rank_retries=config.rank_retries, visibility=config.coding.visibility,
        crash_limit=config.crash_limit, import_timeout=config.import_timeout,
        budget_factor=config.budget_factor, budget_floor=config.budget_floor,
        missing_reason="collection only", collect_only=True)))


def spawn(server: RunnerServer, job: str, workdir: Path):
    read_fd, write_fd = os.pipe()
    log_fd = os.open(workdir / "runner.log", os.O_WRONLY | os.O_CREAT, 0o600)
    forked = server.spawn(job, write_fd, log_fd)
    os.close(write_fd)
    os.close(log_fd)
    return forked, read_fd


def events_of(read_fd: int) -> list[dict]:
    with open(read_fd, "rb") as stream:
        return [json.loads(line) for line in stream.read().decode().splitlines()]


def session_of(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[3])  # parent, session


def test_the_server_runs_with_a_scrubbed_environment(server):
    environ = Path(f"/proc/{server.process.pid}/environ").read_bytes().split(b"\0")
    names = {item.split(b"=", 1)[0].decode() for item in environ if item}
    assert "AUTOGRADER_TEST_TOKEN" not in names
    assert {"OMP_NUM_THREADS", "PYTHONHASHSEED"} <= names
    # Only what grading needs, and where importing torch._dynamo makes its inductor cache folder
    # (the server's own scratch folder, removed with it).
    assert names == set(server_env()) | {"TORCHINDUCTOR_CACHE_DIR"}


def test_a_closed_server_leaves_no_folder_behind():
    server = RunnerServer()
    scratch = Path(server._scratch)
    assert scratch.is_dir()
    server.close()
    assert not scratch.exists()


def test_a_killed_batch_worker_leaves_no_folder_behind(tmp_path):
    # The worker is SIGKILLed: it cannot close its server, which sees it gone and cleans up.
    worker = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from autograder.protocol.fork_channel import RunnerServer\n"
         "print(RunnerServer()._scratch, flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    with worker.stdout:
        scratch = Path(worker.stdout.readline().strip())
    assert scratch.name.startswith(SCRATCH_PREFIX) and scratch.is_dir()
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 60  # the server first finishes importing torch
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not scratch.exists()


def test_each_job_gets_a_fresh_runner_of_its_own(server, tmp_path):
    pids, streams = [], []
    for i in range(2):
        forked, read_fd = spawn(server, collect_job(tmp_path / str(i)), tmp_path / str(i))
        assert forked is not None
        for _ in range(100):  # its first act is setsid(): a session of its own
            parent, session = session_of(forked.pid)
            if session == forked.pid:
                break
            time.sleep(0.02)
        assert parent == server.process.pid and session == forked.pid
        pids.append(forked.pid)
        assert forked.wait(timeout=60) == 0 and forked.returncode == 0
        started = time.monotonic()  # and again, at once (as subprocess.Popen does)
        assert forked.wait(timeout=5) == 0 and time.monotonic() - started < 1
        streams.append(events_of(read_fd))
    assert len(set(pids)) == 2 and server.process.pid not in pids
    for events in streams:
        assert [e["event"] for e in events] == ["environment", "collected", "done"]
        assert len(events[1]["tests"]) == 7
    # Each ran in its own work folder, logging pytest's output there.
    assert all((tmp_path / str(i) / "pytest.ini").exists() for i in range(2))
    assert server.alive


def test_grading_through_the_server_gives_the_same_report_as_cold(server, tmp_path,
                                                                 monkeypatch):
    assignment = load_assignment("toy", Project.of_config(TOY / "grading.yml"))
    submission = TOY / "submissions" / "good"
    forked = []
    spawn = server.spawn
    monkeypatch.setattr(server, "spawn", lambda *a: forked.append(spawn(*a)) or forked[-1])
    warm = grade_loaded(submission, assignment, tmp_path / "warm", runners=server)
    assert len(forked) == 1 and forked[0] is not None  # one runner, forked by the server
    cold = grade_loaded(submission, assignment, tmp_path / "cold")
    assert len(forked) == 1 and server.alive

    def seen(report):
        return [(t.name, t.status, t.score, t.message) for t in report.tests]

    assert seen(warm) == seen(cold)
    assert [t.status for t in warm.tests].count("passed") >= 8  # 2 questions, 6 tests
    assert warm.score == cold.score and warm.warnings == cold.warnings
    assert warm.environment.protections == cold.environment.protections


# A toy submission whose scale() reports what its interpreter is like, as an exception.
OBSERVER = """

def scale(x):
    import builtins, json, os, signal, sys, tempfile
    seen = {
        "temp_in_sandbox": tempfile.gettempdir().startswith(os.getcwd()),
        "sigint": getattr(signal.getsignal(signal.SIGINT), "__name__", str(signal.getsignal(
            signal.SIGINT))),
        "site_builtins": [n for n in ("exit", "quit", "help") if hasattr(builtins, n)],
        "writes_bytecode": not sys.dont_write_bytecode,
        # The class the trusted side names a refused connection by (no connection is made).
        "network_refused": sys.modules["agsandbox.worker"].NetworkRefused.__module__,
        "runtime": sorted(n for n in sys.modules if n.startswith("agsandbox.")),
        "root": os.getuid() == 0 or os.geteuid() == 0,
        "in_its_folder": os.getcwd() == os.environ.get("HOME", os.getcwd()),
        "umask": os.umask(0o022),
    }
    raise RuntimeError("OBSERVED" + json.dumps(seen, sort_keys=True) + "OBSERVED")
"""


def test_a_warm_sandbox_is_the_interpreter_a_cold_one_is(server, tmp_path):
    """A zygote forked from the server is not a fresh `python -I -S -B`: what it would inherit
    (the server's temp folder, SIGINT ignored by a batch worker, site builtins, the runtime
    under its package name, so that the trusted side no longer recognised a refused
    connection) is set as a cold sandbox has it."""
    warm_and_cold_alike(server, tmp_path)


def warm_and_cold_alike(server: RunnerServer, tmp_path: Path):
    """Grade the observer warm (through `server`) and cold; check what it saw is the same."""
    assignment = load_assignment("toy", Project.of_config(TOY / "grading.yml"))
    folder = tmp_path / "observer"
    folder.mkdir()
    (folder / "toy.py").write_text((TOY / "submissions" / "good" / "toy.py").read_text()
                                   + OBSERVER)

    def observed(report) -> dict:
        message = next(t.message for t in report.tests if t.name == "scale: doubles a tensor")
        return json.loads(message.split("OBSERVED")[1])

    warm_report = grade_loaded(folder, assignment, tmp_path / "warm", runners=server)
    cold_report = grade_loaded(folder, assignment, tmp_path / "cold")
    warm, cold = observed(warm_report), observed(cold_report)
    runtime = {"agsandbox.caught", "agsandbox.codec", "agsandbox.worker"}  # what probes use
    assert runtime <= set(warm.pop("runtime")) and runtime <= set(cold.pop("runtime"))
    assert warm == cold  # (a warm zygote has imported simulated_cuda too, a cold one lazily)
    assert cold["temp_in_sandbox"] and cold["sigint"] == "default_int_handler"
    assert cold["site_builtins"] == [] and not cold["writes_bytecode"]
    assert cold["network_refused"] == "agsandbox.worker"
    assert not cold["root"]
    assert warm_report.environment.protections == cold_report.environment.protections
    return warm_report, cold_report


def test_a_dead_server_is_noticed_and_grading_starts_runners_cold(server, assignment, tmp_path):
    # Last in this file: it kills the module's server.
    dying = server
    hang = assignment("import time\n\ndef test_sleeps():\n    '''add: sleeps'''\n"
                      "    time.sleep(120)\n",
                      {"functions: {add: 3, divide: 3, scale: 2}": "functions: {add: 8}"})
    job = json.loads(collect_job(tmp_path / "job", hang))
    job.update(collect_only=False, missing_reason="no submission")
    forked, read_fd = spawn(dying, json.dumps(job), tmp_path / "job")
    try:
        assert forked is not None
        os.kill(dying.process.pid, signal.SIGKILL)
        for _ in range(200):
            if not dying.alive:
                break
            time.sleep(0.05)
        assert not dying.alive
        # Its runner dies with it (parent-death signal) and counts as killed.
        assert forked.wait(timeout=30) == -signal.SIGKILL
        os.close(read_fd)
        assert dying.spawn(collect_job(tmp_path / "next"), *os.pipe()) is None
        # The supervisor falls back to a cold runner: the test runs (and passes, quickly).
        quick = assignment("def test_quick():\n    '''add: quick'''\n",
                           {"functions: {add: 3, divide: 3, scale: 2}": "functions: {add: 8}"})
        files = SubmissionFiles(tmp_path / "upload", None, "no submission", None, [])
        (tmp_path / "cold").mkdir()
        outcomes = run_hidden_tests(quick, files, tmp_path / "cold", runners=dying).outcomes
        assert [o.status for o in outcomes] == ["passed"]
    finally:
        dying.close()  # and a second close (the fixture's) is harmless
