"""Run an assignment's hidden suite on one submission, from the trusted parent.

The parent starts the trusted runner (`autograder.runner.suite`) and reads its stream of events.
If the
runner dies (student code may kill it), the test in flight fails with an explanation and a new
runner carries on with the rest, so one hostile test never costs the others. Every sandbox process
group is killed before this returns.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from autograder.grading.results import CodingOutcome
from autograder.inputs.submission import SubmissionFiles
from autograder.project import budgets
from autograder.project.assignment import Assignment
from autograder.protocol.fork_channel import ForkedChild, RunnerServer
from autograder.protocol.job import Job, TestSpec
from autograder.protocol.runner_events import (
    Calibration,
    Collected,
    Crashed,
    Done,
    Environment,
    Error,
    Hung,
    Imports,
    MalformedEvent,
    Result,
    SandboxStarted,
    Start,
    parse,
)
from autograder.sandbox.cgroups import remove_left_by
from autograder.sandbox.folder import prepare_sandbox_dir
from autograder.sandbox.isolation import UID_RANGE, detect
from autograder.sandbox.processes import (
    ended_text,
    kill_group,
    kill_if_same,
    kill_uid,
    process_start_time,
    seconds_text,
)

MAX_RUNNER_STARTS = 4


class GradingError(RuntimeError):
    """Grading cannot go on, through no fault of the student: the assignment is broken
    (invalid hidden tests), or the sandbox could not start. An instructor's problem: no report
    is written (on Gradescope, the fallback asks the student to contact staff)."""


@dataclass(frozen=True)
class SuiteRun:
    """What running the hidden tests gave: each test's outcome in collection order, warnings,
    the runner's environment, and what the release self-check records of the reference: the
    seconds of each passed test by nodeid, and the calibration workload's seconds."""

    outcomes: list[CodingOutcome]
    warnings: list[str]
    environment: dict
    durations: dict[str, float]
    calibration: float | None


def run_hidden_tests(assignment: Assignment, files: SubmissionFiles, workdir: Path,
                     runners: RunnerServer | None = None) -> SuiteRun:
    """Every hidden test of `assignment` run on `files` (see SuiteRun).

    `runners`: a batch worker's warm runner server, which forks each runner (None: each runner
    is a new interpreter).

    Never raises for a student's fault: GradingError means the hidden tests are broken or the
    sandbox could not start; IsolationUnavailable that student code cannot be isolated here.
    """
    detect()  # proven before any runner starts: a grader that cannot isolate grades nothing
    config = assignment.config
    sandbox_dir = None
    if files.module is not None:
        sandbox_dir = prepare_sandbox_dir(files.module, config.module, assignment.probes, workdir)
    timings = budgets.load(assignment.root)
    job = Job(
        **_from_config(assignment, workdir),
        sandbox_dir=str(sandbox_dir) if sandbox_dir else None,
        missing_reason=files.module_problem,
        timings=timings.tests if timings else {},
        timings_calibration=timings.calibration if timings else None,
        tracebacks=bool(os.environ.get("AUTOGRADER_KEEP_WORKDIR")))
    supervisor = _Supervisor(job, time.monotonic() + config.submission_timeout, runners)
    outcomes, warnings, environment = supervisor.run()
    return SuiteRun(outcomes, warnings, environment, supervisor.durations,
                    supervisor.machine_calibration)


def collect_hidden_tests(assignment: Assignment, workdir: Path) -> list[dict]:
    """The hidden tests as declared (name, function, points, visibility, gpu), validated."""
    job = Job(**_from_config(assignment, workdir), missing_reason="collection only",
              collect_only=True)
    supervisor = _Supervisor(job, time.monotonic() + 300)
    supervisor.run()
    return [asdict(spec) for spec in supervisor.specs or []]


def _from_config(assignment: Assignment, workdir: Path) -> dict:
    """The Job's fields that come from the assignment and its grading.yml (Job has no defaults
    for them: the schema is their one source)."""
    config = assignment.config
    return dict(
        tests_dir=str(assignment.hidden_tests), assignment_dir=str(assignment.root),
        module_name=config.module, functions=config.functions, output_dir=str(workdir),
        limits=asdict(config.limits), test_timeout=config.test_timeout,
        rank_retries=config.rank_retries, crash_limit=config.crash_limit,
        import_timeout=config.import_timeout, visibility=config.coding.visibility,
        budget_factor=config.budget_factor, budget_floor=config.budget_floor)


class _Supervisor:
    def __init__(self, job: Job, deadline: float, runners: RunnerServer | None = None) -> None:
        self.job, self.deadline, self.runners = job, deadline, runners
        self.specs: list[TestSpec] | None = None
        self.results: dict[str, Result] = {}
        self.warnings: list[str] = []
        self.sandbox_pids: dict[int, str | None] = {}  # host pid -> its start time
        self.sandbox_uids: set[int] = set()
        self.environment: dict = {}
        self.durations: dict[str, float] = {}  # nodeid -> seconds the test took
        self.budgets: dict = {}
        # What this grading's runners found, handed to each later runner in its Job.
        self.hung: dict[str, dict] = dict(job.hung)
        self.crashed: dict[str, dict] = dict(job.crashed)
        self.imports_spent: float = job.imports_spent
        self.machine_calibration: float | None = job.machine_calibration

    def run(self) -> tuple[list[CodingOutcome], list[str], dict]:
        try:
            for _ in range(MAX_RUNNER_STARTS):
                if self._run_once() or time.monotonic() >= self.deadline:
                    break
        finally:
            self._kill_sandboxes()
        if self.specs is None:
            raise GradingError("the hidden tests could not be collected (see messages above)")
        outcomes = [self._outcome(spec) for spec in self.specs]
        self.warnings += self._hang_warnings()
        # how this grading's test budgets were set (see autograder.project.budgets)
        if self.budgets:
            self.environment["time_budgets"] = self.budgets
        if self.job.sandbox_dir is not None:  # what starting the student's code took, in all
            self.environment["imports"] = {"seconds": round(self.imports_spent, 2),
                                           "limit_seconds": self.job.import_timeout}
        return outcomes, self.warnings, self.environment

    def _hang_warnings(self) -> list[str]:
        """One line per function that hung or crashed crash_limit times: where it did first,
        how many tests that need it were not run; and one if imports used up their
        allowance."""
        lines = []
        for function, first in self.hung.items():
            skipped = self._not_run("not_run_hung", function)
            lines.append(f"{function} did not finish within {seconds_text(first['seconds'])} s "
                         f"in the test '{first['test']}' (the first to hang); "
                         + _skipped_text(skipped))
        for function, record in self.crashed.items():
            if function in self.hung or record["crashes"] < self.job.crash_limit:
                continue
            skipped = self._not_run("not_run_crashed", function)
            lines.append(f"{function} crashed {record['crashes']} times, first in the test "
                         f"'{record['test']}' ({record['message']}); "
                         + _skipped_text(skipped))
        if self.imports_spent >= self.job.import_timeout:
            skipped = self._not_run("not_run_imports")
            lines.append(f"importing your module used up this submission's "
                         f"{seconds_text(self.job.import_timeout)} s for imports "
                         f"({seconds_text(self.imports_spent)} s in all); "
                         + _skipped_text(skipped, need=False))
        return lines

    def _not_run(self, cause: str, function: str | None = None) -> int:
        """Tests not run for `cause` (because of `function`, when given)."""
        return sum(1 for r in self.results.values()
                   if r.cause == cause and (function is None or r.blocked_by == function))

    def _kill_sandboxes(self) -> None:
        # Each sandbox leads its own process group; a dead runner cannot clean up after itself.
        # Each is also killed by its pid (a zygote is PID 1 of its namespace: all goes with it)
        # when it is still the process recorded, since it may have left its group (setsid).
        for pid, started in self.sandbox_pids.items():
            kill_group(pid)
            kill_if_same(pid, started)
        # Without a PID namespace or a cgroup, a sandbox's descendant may have left every group:
        # as root, each sandbox uid's processes are killed (uids are per submission).
        for uid in self.sandbox_uids:
            kill_uid(uid)

    def _record_sandbox(self, pid: int) -> None:
        self.sandbox_pids[pid] = process_start_time(pid)
        uid = _uid_of(pid)
        if uid is not None and UID_RANGE[0] <= uid <= UID_RANGE[1] and os.geteuid() == 0:
            self.sandbox_uids.add(uid)

    def _outcome(self, spec: TestSpec) -> CodingOutcome:
        # (a status outside the vocabulary never gets here: parse refuses the whole event)
        result = self.results.get(spec.nodeid) or Result(
            spec.nodeid, "failed", "not_run_time_limit",
            "this test did not run: grading was stopped by the submission's time limit or "
            "repeated crashes")
        return CodingOutcome(
            nodeid=spec.nodeid, name=spec.name, function=spec.function, points=spec.points,
            visibility=spec.visibility, gpu=spec.gpu, status=result.status, cause=result.cause,
            message=result.message, output=result.output, output_cut=result.output_cut)

    def _run_once(self) -> bool:
        """One runner process; True when it finished the suite."""
        job = replace(self.job, skip=sorted(self.results), hung=dict(self.hung),
                      crashed=dict(self.crashed), imports_spent=self.imports_spent,
                      machine_calibration=self.machine_calibration)
        read_fd, write_fd = os.pipe()
        _make_private(Path(job.output_dir))
        # pytest's output: tracebacks quote hidden tests, so for the grader's user alone.
        log_fd = os.open(Path(job.output_dir) / "runner.log",
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(log_fd, "ab") as log:
            runner = _start_runner(job, write_fd, log, self.runners)
        os.close(write_fd)
        current, finished, buffer = None, False, bytearray()
        try:
            while not finished:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.warnings.append("grading stopped at the submission's time limit")
                    if current:
                        self.results[current] = Result(
                            current, "failed", "timed_out",
                            "the submission's total time limit ran out during this test")
                    return True
                if not select.select([read_fd], [], [], min(left, 1.0))[0]:
                    continue
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                # Linear in the stream's size: only the new chunk is searched for line ends.
                start = len(buffer)
                buffer += chunk
                if chunk.find(b"\n") < 0:
                    continue
                end = buffer.rfind(b"\n", start)
                lines = bytes(buffer[:end]).split(b"\n")
                del buffer[:end + 1]
                for line in lines:
                    try:
                        event = parse(line)
                    except MalformedEvent as exc:  # the runner is ours: a grader bug
                        raise GradingError(str(exc)) from None
                    match event:
                        case Collected(tests=tests):
                            if self.specs is None:  # a later runner collects the same tests
                                self.specs = tests
                        case Error(message=message):
                            raise GradingError(message)
                        case Environment(environment=environment):
                            self.environment = environment
                        case Start(nodeid=nodeid):
                            current = nodeid
                        case SandboxStarted(pid=pid):
                            self._record_sandbox(pid)
                        case Result(nodeid=nodeid, status=status, duration=duration):
                            self.results[nodeid] = event
                            # Times of passed tests only (a GPU test left out here took 0 s).
                            if status == "passed":
                                self.durations[nodeid] = duration
                            current = None
                        case Hung(function=function):  # later runners of this grading know it
                            self.hung.setdefault(function, {
                                "seconds": event.seconds, "test": event.test,
                                "nodeid": event.nodeid})
                        case Crashed(function=function):  # so do they its crashes
                            self.crashed[function] = {
                                "crashes": event.crashes, "test": event.test,
                                "nodeid": event.nodeid, "message": event.message}
                        case Imports(seconds=seconds):  # and what its imports have taken
                            self.imports_spent = seconds
                        case Calibration(seconds=seconds, factor=factor):
                            self.machine_calibration = seconds
                            self.budgets = {
                                "machine_factor": round(factor, 2),
                                "calibration_seconds": round(seconds, 3),
                                "k": self.job.budget_factor,
                                "floor_seconds": self.job.budget_floor}
                        case Done():
                            finished = True
        finally:
            os.close(read_fd)
            kill_group(runner.pid)
            runner.wait()
            remove_left_by(runner.pid)
        if not finished and current is not None:
            self.results[current] = Result(
                current, "failed", "runner_killed",
                f"the grading process was killed during this test "
                f"({ended_text(runner.returncode)}); did your code kill its parent process?")
        return finished


def _skipped_text(skipped: int, need: bool = True) -> str:
    """How many later tests were not run (that need the function, when `need`)."""
    if not skipped:
        return "no later test needed it" if need else "no later test was left out"
    if skipped == 1:
        return f"1 later test {'that needs it ' if need else ''}was not run"
    return f"{skipped} later tests {'that need it ' if need else ''}were not run"


def _start_runner(job: Job, write_fd: int, log,
                  runners: RunnerServer | None) -> subprocess.Popen | ForkedChild:
    payload = json.dumps(asdict(job))
    if runners is not None and runners.alive:
        forked = runners.spawn(payload, write_fd, log.fileno())
        if forked is not None:
            return forked
    runner = subprocess.Popen(
        # -I: neither the working folder nor PYTHON* variables reach sys.path, so nothing a
        # sandbox could write there is ever imported as (part of) the runner.
        [sys.executable, "-I", "-m", "autograder.runner.suite", str(write_fd)],
        stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_fd,),
        start_new_session=True, cwd=job.output_dir)
    runner.stdin.write(payload.encode())
    runner.stdin.close()
    return runner


def _make_private(workdir: Path) -> None:
    """The grader's own files in its folder (the upload, a converted notebook, logs) readable
    by the grader's user alone: the folder itself stays passable (0711) so that sandbox users
    reach their own folders, but in `uid` mode they could otherwise read what lies next to them.
    Sandbox folders are left as they are (they belong to their sandbox users)."""
    for entry in workdir.iterdir():
        if entry.name.startswith(("sandbox-", "mnt-")) or entry.is_symlink():
            continue
        try:
            entry.chmod(0o700 if entry.is_dir() else 0o600)
        except OSError:
            pass


def _uid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
