"""The pytest plugin the trusted runner loads to run a hidden suite against a sandbox.

It registers the grading markers, validates every test's points and name at collection, provides
the `student` fixture (calls run in the submission's sandbox) and streams one outcome per test to
the parent as a JSON line. It runs only in trusted processes.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autograder.project import budgets
from autograder.project.config import SandboxLimits
from autograder.project.inert import MAX_MESSAGE, clip
from autograder.protocol.job import SCORED_VISIBILITIES, VISIBILITIES, Job, TestSpec
from autograder.protocol.runner_events import (
    Calibration,
    Collected,
    Crashed,
    Error,
    Event,
    Hung,
    Imports,
    Result,
    SandboxStarted,
    Start,
)
from autograder.protocol.statuses import TEST_CAUSES, TestCause, outcome_of
from autograder.runner.gpus import GraderGpus
from autograder.runner.stores import TcpStores
from autograder.sandbox.client import (
    ImportBudget,
    ImportCrash,
    ImportFailed,
    ImportHang,
    ImportsSpent,
    ImportStopped,
    MissingFunction,
    ObservedFailure,
    RankResults,
    Sandbox,
    SandboxCrash,
    SandboxFailure,
    SandboxTimeout,
    Starts,
    StudentError,
    StudentExited,
    Uncheckable,
    UnreadableReply,
    ZygoteKilled,
    ZygoteLost,
    ZygoteSource,
)
from autograder.sandbox.observer import Observer
from autograder.sandbox.processes import seconds_text
from autograder.sandbox.reports import Reads, ReportError, as_report, rank_reports
from autograder.sandbox_runtime.codec import CodecError

MARKERS = {
    "weight": "weight(w): this test's share of its function's points, relative to the "
              "function's other tests (default 1; 0: worth nothing)",
    "points": "points(n): the older name of weight(n), still accepted",
    "visibility": "visibility(v): Gradescope visibility of this test",
    "gpu": "gpu(n=1): the test needs n CUDA GPUs; on a grader with fewer the GPU policy "
           "applies",
    "timeout_s": "timeout_s(s): the most this test's time budget may be, in seconds",
    "uses": "uses(*functions): further student functions this test calls (its own is named by "
            "its docstring); the test is not run once one of them has hung or crashed "
            "crash_limit times",
    "tolerant": "tolerant: run this test even when a function it uses hung (or kept crashing) "
                "in an earlier test",
}


def spec_for(item: pytest.Item, job: Job) -> tuple[TestSpec | None, list[str]]:
    problems = []
    doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines()
    name = doc[0].strip() if doc else ""
    function = name.split(":", 1)[0].strip() if ":" in name else ""
    if not name:
        problems.append(f"{item.nodeid}: needs a docstring whose first line names the test")
    elif function not in job.functions:
        problems.append(f"{item.nodeid}: display name {name!r} must start with one of "
                        f"{sorted(job.functions)} followed by ':'")
    # Points live in grading.yml only; a test carries a relative weight (points(n): the old name).
    marker = item.get_closest_marker("weight") or item.get_closest_marker("points")
    weight = marker.args[0] if marker and marker.args else 1
    if type(weight) not in (int, float) or weight < 0:
        problems.append(f"{item.nodeid}: @pytest.mark.{marker.name}(w) needs a number w >= 0")
    vis = item.get_closest_marker("visibility")
    visibility = vis.args[0] if vis and vis.args else job.visibility
    if visibility not in VISIBILITIES:
        problems.append(f"{item.nodeid}: visibility {visibility!r} is not one of {VISIBILITIES}")
    elif visibility not in SCORED_VISIBILITIES and weight:
        problems.append(f"{item.nodeid}: visibility {visibility!r} on a test worth points: "
                        f"students' totals count only what they are shown, so its points would "
                        f"never reach their score; use one of {SCORED_VISIBILITIES} (or weight 0)")
    limit = item.get_closest_marker("timeout_s")
    timeout = float(limit.args[0]) if limit and limit.args else job.test_timeout
    uses = [function] if function else []
    for marker in item.iter_markers("uses"):
        for used in marker.args:
            if used not in job.functions:
                problems.append(f"{item.nodeid}: @pytest.mark.uses({used!r}) names no function "
                                f"of {sorted(job.functions)}")
            elif used not in uses:
                uses.append(used)
    if problems:
        return None, problems
    return TestSpec(item.nodeid, name, function, float(weight), visibility,
                    item.get_closest_marker("gpu") is not None, timeout, uses,
                    item.get_closest_marker("tolerant") is not None), []


def number_repeated_names(specs: list[TestSpec]) -> None:
    """Tests that share a name (a parametrized test's docstring) are told apart by number, in
    collection order: "f: ... (2 of 4)". Reports, grade sheets and the overview list each test
    by name; pytest's ids are not shown, since they can give inputs or expected values away."""
    counts = Counter(spec.name for spec in specs)
    seen: Counter[str] = Counter()
    for spec in specs:
        if counts[spec.name] > 1:
            seen[spec.name] += 1
            spec.name = f"{spec.name} ({seen[spec.name]} of {counts[spec.name]})"


class NotRun(SandboxFailure):
    """The test needs `function`, which already hung (`cause` not_run_hung), or crashed
    crash_limit times (not_run_crashed), in this grading: it fails without running."""

    def __init__(self, message: str, cause: TestCause, function: str) -> None:
        super().__init__(message)
        self.cause, self.function = cause, function


class BudgetUsedUp(SandboxFailure):
    """This test's time budget was used up before a call or scenario could start."""


class NoModule(SandboxFailure):
    """The submission has no module to run (missing, unreadable, a broken notebook)."""


class Student:
    """The `student` fixture: the student's module, reached only through the sandbox.

    `student.simulated()` is the same module in workers that simulate several GPUs (their
    number drawn for this grading unless given), so tests can check device decisions on a
    grader without one; `student.gpus` is how many real GPUs this grader has (decided here, in
    the trusted runner, never by what the sandbox reports).
    """

    def __init__(self, plugin: GradingPlugin, spec: TestSpec, simulated_gpus: int = 0) -> None:
        self._plugin, self._spec = plugin, spec
        self._deadline = time.monotonic() + spec.timeout
        self._simulated = simulated_gpus
        # Starting sandbox processes is the grader's time: the deadline moves by what it takes.
        sandbox = plugin.sandbox
        self._grader_seconds = sandbox.grader_seconds if sandbox is not None else 0.0
        # What the test read from probes' reports (see sandbox.reports): a check that cannot
        # use such a value fails as the student's.
        self._reads = Reads()

    @property
    def gpus(self) -> int:
        """GPUs the student's code sees: the simulated ones, else this grader's real ones."""
        if self._simulated:
            return max(self._simulated, 0)
        return self._plugin.gpus.count

    def simulated(self, gpus: int | None = None) -> Student:
        """This module run with `gpus` simulated GPUs (default: 2 to 4, drawn per grading)."""
        return self._view(gpus or self._plugin.simulated_gpus)

    def without_gpus(self) -> Student:
        """This module run where CUDA is hidden: its CPU branch, on any grader."""
        return self._view(-1)

    def _view(self, simulated: int) -> Student:
        view = Student(self._plugin, self._spec, simulated)
        view._deadline, view._grader_seconds = self._deadline, self._grader_seconds
        view._reads = self._reads
        return view

    def _remaining(self) -> float:
        sandbox = self._plugin.sandbox
        if sandbox is not None:  # the grader's own start-up time is not the test's
            self._deadline += sandbox.grader_seconds - self._grader_seconds
            self._grader_seconds = sandbox.grader_seconds
        return self._deadline - time.monotonic()

    def _left(self) -> float:
        return max(0.1, self._remaining())

    def _timeout(self) -> float:
        left = self._remaining()
        if left <= 0:
            raise BudgetUsedUp(
                f"this test's time limit of {seconds_text(self._spec.timeout)} s was used up")
        return min(left, self._plugin.limits.call_timeout)

    def _guarded(self, function: str, run: Callable[[], Any]) -> Any:
        """Run one call or scenario of `function`; once a function hangs, or has crashed
        crash_limit times, it is not run again."""
        self._plugin.refuse_if_blocked(function, self._spec)
        try:
            return run()
        except SandboxTimeout as exc:
            self._plugin.record_hang(function, exc.seconds, self._spec)
            raise
        except SandboxCrash as exc:
            self._plugin.record_crash(function, str(exc), self._spec)
            raise
        except StudentError as exc:  # (the test may catch it: it was raised all the same)
            self._plugin.saw_raised(self._spec, [exc])
            raise
        finally:
            self._saw_caught()

    def _saw_caught(self) -> None:
        """The student exceptions the last call's scenario caught and noted."""
        if self._plugin.sandbox is not None:
            self._plugin.saw_raised(self._spec, self._plugin.sandbox.caught)

    def _sandbox(self) -> Sandbox:
        if self._plugin.sandbox is None:
            raise NoModule(self._plugin.job.missing_reason or "no submission to run")
        return self._plugin.sandbox

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._guarded(name, lambda: self._sandbox().call(
                name, args, kwargs, self._timeout(), self._left(), gpus=self._simulated))

        return call

    def probe(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(module, *args, **kwargs)` from probes.py in the sandbox."""
        function = self._spec.function
        return as_report(self._guarded(function, lambda: self._sandbox().probe(
            _probe_name(fn), args, kwargs, function, self._timeout(), self._left(),
            gpus=self._simulated)), reads=self._reads)

    def run_ranks(self, fn: Callable, world_size: int, *args: Any,
                  per_rank: list | None = None, stores: int = 1,
                  store_host: str = "127.0.0.1", observer: Observer | None = None
                  ) -> RankResults:
        """Run `fn(module, rank, world_size, port, *args)` in `world_size` rank processes
        (fresh, or kept from an earlier scenario and reset: Sandbox.run_ranks);
        with `per_rank`, rank r alone also gets `per_rank[r]` as its last argument.

        `port` is a rendezvous store the grader hosts (`stores=2`: a second one, its port
        right after `port`), listening at `store_host` (a loopback address) only; the
        result's `stores` say which ranks met at each
        (`StoreView.ranks_met()`): only ranks that made a real process group there did.

        With `observer` (autograder.runner.observe), one rank is the grader's own: its record
        is the result's `observed`, and a failure it saw fails the test at once (no retry)."""
        function, name = self._spec.function, _probe_name(fn)
        self._plugin.refuse_if_blocked(function, self._spec)
        sandbox = self._sandbox()
        imports = self._plugin.imports
        imports.refuse_if_spent()  # every rank imports the student's module
        # gloo on CPU sometimes crashes on its own (at teardown, mostly): a crash is retried
        # up to rank_retries times, but each crashed attempt counts toward the function's
        # crash_limit and its time (its ranks' imports) toward the submission's imports, so a
        # crash of the student's own is not paid for again and again. Any other failure (an
        # exception, sys.exit, an import error) would come again: it is not retried. A hang
        # is retried once at most (see RANK_HANG_RETRIES), each attempt no longer than the
        # call time limit, so a scenario that never meets costs at most two call limits.
        crashes = self._plugin.job.rank_retries
        hangs = min(RANK_HANG_RETRIES, crashes)
        while True:
            left = self._remaining()
            if left <= 1:
                raise BudgetUsedUp(f"this test's time limit of "
                                 f"{seconds_text(self._spec.timeout)} s was used up")
            # An equal share of what is left for this attempt and each hang still allowed.
            timeout = min(left / (1 + hangs), self._plugin.limits.call_timeout)
            started = time.monotonic()
            try:
                return rank_reports(sandbox.run_ranks(
                    name, world_size, args, timeout, self._plugin.rank_output_dir(), function,
                    gpus=self._simulated, per_rank=per_rank, stores=stores,
                    store_host=store_host, observer=observer), self._reads)
            except SandboxTimeout as exc:
                if hangs <= 0 or crashes <= 0:
                    self._plugin.record_hang(function, exc.seconds, self._spec)
                    raise
                hangs -= 1
                crashes -= 1
            except SandboxCrash as exc:
                imports.charge(time.monotonic() - started)
                self._plugin.record_crash(function, str(exc), self._spec)
                if crashes <= 0 or self._plugin.crashed_out(function) or imports.left() <= 0:
                    raise
                crashes -= 1
            except ObservedFailure as exc:
                imports.charge(time.monotonic() - started)
                if exc.student_error is not None:
                    self._plugin.saw_raised(self._spec, [exc.student_error])
                raise
            except SandboxFailure:
                imports.charge(time.monotonic() - started)
                raise
            except StudentError as exc:
                self._plugin.saw_raised(self._spec, [exc])
                raise
            finally:
                self._saw_caught()

    def fresh(self) -> None:
        """Restart the sandbox so the next call starts from a newly imported module."""
        self._sandbox().restart()


# Retries of a multi-process scenario that timed out (crashes: grading.yml's rank_retries).
# Measured with bench/rank_flakes.py: see docs/ARCHITECTURE.md ("Time budgets and hangs").
RANK_HANG_RETRIES = 1


def _probe_name(fn: Callable) -> str:
    if getattr(fn, "__module__", None) != "probes":
        raise TypeError("probes must be functions defined in the assignment's probes.py")
    return fn.__name__


def _brief_failure(excinfo: pytest.ExceptionInfo) -> str:
    """What runner.log shows of a failed test when nobody keeps it: one line, no traceback."""
    return f"{excinfo.typename}: {_head(excinfo.value)[:1000]}"


def not_run_message(function: str, first: dict) -> str:
    return (f"not run: {function} did not finish within {seconds_text(first['seconds'])} s in "
            f"an earlier test ({first['test']})")


def crashed_message(function: str, record: dict) -> str:
    return (f"not run: {function} crashed {record['crashes']} times already (first in "
            f"{record['test']})")


def describe_failure(excinfo: pytest.ExceptionInfo) -> tuple[TestCause, str]:
    """(cause, message for the student) for an exception that ended a test, clipped here in
    the runner: a message may quote what student code returned (64 MiB of it, say)."""
    cause, message = _describe(excinfo.value)
    return cause, clip(message, MAX_MESSAGE)


# What a failure of the sandbox (or of the test's use of it) was, by its class: the first
# entry that the exception is an instance of. The messages are the student's to read.
FAILURE_CAUSES: tuple[tuple[type[SandboxFailure], TestCause], ...] = (
    (ImportHang, "import_hang"),
    (ImportStopped, "import_stopped"),
    (ImportsSpent, "not_run_imports"),
    (SandboxTimeout, "timed_out"),
    (BudgetUsedUp, "timed_out"),
    (ObservedFailure, "wrong_result"),  # the grader's own rank saw the student's ranks err
    (ZygoteKilled, "sandbox_killed"),
    (ZygoteLost, "sandbox_killed"),
    (SandboxCrash, "crashed"),
    (ImportCrash, "crashed"),
    (StudentExited, "crashed"),
    (ImportFailed, "import_failed"),
    (MissingFunction, "missing_function"),
    (NoModule, "no_module"),
    (UnreadableReply, "unreadable_reply"),
    (Uncheckable, "uncheckable"),
    (ReportError, "wrong_result"),  # a check read what the scenario's report does not hold
    (SandboxFailure, "crashed"),  # the sandbox failed otherwise (it did not start properly)
)
if any(cause not in TEST_CAUSES for _, cause in FAILURE_CAUSES):
    raise ImportError("a failure's cause is not in statuses.TestCause")
# Causes of a test that ended by a check, which a NotImplementedError that the student's code
# raised during the test (caught by the test or a scenario) turns into not_implemented.
_CHECKED = ("wrong_result", "raised")


def _describe(exc: BaseException) -> tuple[TestCause, str]:
    if isinstance(exc, NotRun):
        return exc.cause, str(exc)
    if isinstance(exc, SandboxFailure):
        return next(cause for kind, cause in FAILURE_CAUSES if isinstance(exc, kind)), str(exc)
    if isinstance(exc, StudentError):
        where = f" ({exc.where})" if exc.where else ""
        message = f"{exc.function} raised {exc.described}{where}"
        if exc.refused_by_sandbox:
            return "network_refused", message
        if exc.is_a("NotImplementedError"):
            return "not_implemented", message
        return "raised", message
    if isinstance(exc, AssertionError):
        # Only the test author's message: pytest's rewritten detail may show hidden inputs.
        text = _head(exc).split("\nassert ", 1)[0].strip()
        if not text or text.startswith("assert "):
            text = "a check of this behaviour failed"
        return "wrong_result", text
    if isinstance(exc, pytest.fail.Exception):
        return "wrong_result", _head(exc)
    if isinstance(exc, CodecError):
        return "uncheckable", f"the result could not be checked: {_head(exc)}"
    if isinstance(exc, MemoryError):
        # The runner's own memory limit (see runner.limit_memory): only what student code sent
        # back can be that large, so it is the student's failure, not the grader's.
        return "too_large", "the result was too large to check (the grader ran out of " \
                            "memory reading it)"
    return "grader_error", f"the grader could not run this check ({type(exc).__name__}: " \
                           f"{_head(exc)})"


def _head(exc: BaseException) -> str:
    # str() of an exception quoting a huge value is itself huge: keep a bounded part of it.
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a message that cannot be built
        return f"<{type(exc).__name__}>"
    return text[:4 * MAX_MESSAGE]


class GradingPlugin:
    def __init__(self, job: Job, emit: Callable[[Event], None], zygotes: ZygoteSource | None,
                 gpus: GraderGpus) -> None:
        self.job, self.emit = job, emit
        self.gpus = gpus  # the grader's real GPUs, for sandboxes only (see runner.gpus)
        self.limits = SandboxLimits(**job.limits)
        self.specs: dict[str, TestSpec] = {}
        self.outcomes: dict[str, dict] = {}  # nodeid -> {"cause", "message"}
        # Tests during which student code raised NotImplementedError (see saw_raised).
        self.not_implemented: set[str] = set()
        self.sandbox: Sandbox | None = None
        self.hung: dict[str, dict] = dict(job.hung)
        self.crashed: dict[str, dict] = {f: dict(r) for f, r in job.crashed.items()}
        # What starting the student's code may take in all (timeouts.imports), shared by runners.
        self.imports = ImportBudget(job.import_timeout, job.imports_spent)
        self._imports_told = job.imports_spent
        self.machine_factor = 1.0
        if job.timings and job.budget_factor > 0:
            measured = job.machine_calibration or budgets.calibration_seconds()
            self.machine_factor = budgets.machine_factor(job.timings_calibration, measured)
            emit(Calibration(seconds=measured, factor=self.machine_factor))
        # Drawn once per grading by the trusted side: a hard-coded count cannot be guessed.
        self.simulated_gpus = random.SystemRandom().randint(2, 4)
        # Every sandbox process is announced to the parent, which kills what is left.
        starts = Starts(zygotes, on_start=lambda pid: emit(SandboxStarted(pid=pid)),
                        stores=TcpStores(), gpu_env=gpus.sandbox_env)
        if job.sandbox_dir is not None:
            self.sandbox = Sandbox(Path(job.sandbox_dir), job.module_name, self.limits,
                                   Path(job.output_dir) / f"sandbox-{os.getpid()}.log",
                                   starts=starts, imports=self.imports,
                                   keep_ranks=gpus.count == 0)

    # -- functions that hung or kept crashing ------------------------------------
    def refuse_if_blocked(self, function: str, spec: TestSpec) -> None:
        """Raise NotRun if `function` hung in an earlier test or has crashed crash_limit
        times (unless `spec` is tolerant)."""
        if spec.tolerant:
            return
        first = self.hung.get(function)
        if first is not None and first["nodeid"] != spec.nodeid:
            raise NotRun(not_run_message(function, first), "not_run_hung", function)
        if self.crashed_out(function):
            raise NotRun(crashed_message(function, self.crashed[function]), "not_run_crashed",
                         function)

    def saw_raised(self, spec: TestSpec, errors: list[StudentError]) -> None:
        """Student exceptions seen during the test `spec` (raised into it, or caught by a
        scenario): a built-in NotImplementedError among them makes a failed check of this
        test not_implemented, whatever its message says."""
        if any(error.is_a("NotImplementedError") for error in errors):
            self.not_implemented.add(spec.nodeid)

    def crashed_out(self, function: str) -> bool:
        record = self.crashed.get(function)
        return record is not None and record["crashes"] >= self.job.crash_limit

    def record_crash(self, function: str, message: str, spec: TestSpec) -> None:
        """One more crash of `function` (the first one's test and message are kept)."""
        record = self.crashed.setdefault(function, {
            "crashes": 0, "test": spec.name, "nodeid": spec.nodeid,
            "message": clip(message, 500)})
        record["crashes"] += 1
        self.emit(Crashed(function=function, **record))

    def record_hang(self, function: str, seconds: float, spec: TestSpec) -> None:
        if function in self.hung:
            return
        self.hung[function] = first = {"seconds": round(seconds, 1), "test": spec.name,
                                       "nodeid": spec.nodeid}
        self.emit(Hung(function=function, **first))

    def budget(self, spec: TestSpec) -> float:
        """This test's time budget: calibrated from the reference when its time is known."""
        return budgets.budget(self.job.timings.get(spec.nodeid), spec.timeout,
                              self.job.budget_factor, self.job.budget_floor,
                              self.machine_factor)

    def rank_output_dir(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="ranks-", dir=self.job.output_dir))
        self._rank_dirs.append(path)
        return path

    # -- collection ------------------------------------------------------------
    def pytest_configure(self, config: pytest.Config) -> None:
        for line in MARKERS.values():
            config.addinivalue_line("markers", line)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.emit(Error(message=f"the hidden tests could not be collected: "
                                    f"{report.nodeid}: {report.longreprtext}"))

    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        problems: list[str] = []
        for item in items:
            spec, found = spec_for(item, self.job)
            problems += found
            if spec is not None:
                spec.timeout = self.budget(spec)
                self.specs[item.nodeid] = spec
        # Each function's points (grading.yml) are split over its tests by their weights.
        weights = {name: 0.0 for name in self.job.functions}
        for spec in self.specs.values():
            weights[spec.function] += spec.points
        for name, declared in self.job.functions.items():
            if declared > 0 and weights[name] <= 0:
                problems.append(f"grading.yml gives {name} {declared:g} points, but it has no "
                                "hidden test with a weight above 0")
        for spec in self.specs.values():
            total = weights[spec.function]
            spec.points = self.job.functions[spec.function] * spec.points / total if total else 0.0
        number_repeated_names(list(self.specs.values()))
        if problems:
            self.emit(Error(message="invalid hidden tests:\n  - " + "\n  - ".join(problems)))
            raise pytest.UsageError("invalid hidden tests")
        self.emit(Collected(tests=list(self.specs.values())))
        skip = set(self.job.skip)
        items[:] = [i for i in items if i.nodeid not in skip]
        if not self.job.tracebacks:
            for item in items:
                item.repr_failure = _brief_failure  # type: ignore[method-assign]
        if self.job.collect_only:
            items.clear()

    # -- running ---------------------------------------------------------------
    @pytest.fixture
    def student(self, request: pytest.FixtureRequest) -> Student:
        import torch

        # The inputs a test draws from torch's generator differ in every grading: an answer
        # that was not computed from them cannot be known in advance.
        torch.manual_seed(random.SystemRandom().getrandbits(63))
        return Student(self, self.specs[request.node.nodeid])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        spec = self.specs[item.nodeid]
        marker = item.get_closest_marker("gpu")
        needed = int(marker.args[0]) if marker is not None and marker.args else 1
        if spec.gpu and self.gpus.count < needed:
            have = self.gpus.count
            self.outcomes[item.nodeid] = {
                "cause": "gpu_unavailable",
                "message": f"needs {needed} GPU{'s' if needed > 1 else ''}; this grader has "
                           f"{have or 'none'}"}
            pytest.skip("needs CUDA")
        for function in spec.uses:
            try:
                self.refuse_if_blocked(function, spec)
            except NotRun as exc:  # fails at once, with the cause of the first hang or crash
                self.outcomes[item.nodeid] = {"cause": exc.cause, "message": str(exc),
                                              "blocked_by": exc.function}
                pytest.skip("a function it uses hung or kept crashing in an earlier test")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if item.nodeid in self.outcomes or (call.when != "call" and report.passed):
            return
        if report.passed:
            self.outcomes[item.nodeid] = {"cause": "passed", "message": ""}
        elif report.skipped and self.specs[item.nodeid].gpu:
            # This grader has CUDA (else setup marked the test above): whatever the sandbox
            # reported, a GPU test that does not run here is a failure, never a free pass.
            self.outcomes[item.nodeid] = {
                "cause": "gpu_skipped", "message": "this GPU test did not run although this "
                                                   "grader has a GPU (did your code hide CUDA?)"}
        elif report.skipped:
            reason = str(call.excinfo.value) if call.excinfo else "skipped"
            self.outcomes[item.nodeid] = {"cause": "skipped", "message": reason}
        elif call.excinfo is not None:
            cause, message = describe_failure(call.excinfo)
            student = item.funcargs.get("student") if hasattr(item, "funcargs") else None
            if cause == "grader_error" and isinstance(student, Student):
                # A check that could not use a value of a probe's report: the student's.
                blamed = student._reads.blame(call.excinfo.value)
                if blamed is not None:
                    cause, message = "wrong_result", clip(blamed, MAX_MESSAGE)
            if cause in _CHECKED and item.nodeid in self.not_implemented:
                cause = "not_implemented"  # a stub's NotImplementedError, told by its class
            blocked = call.excinfo.value
            self.outcomes[item.nodeid] = {
                "cause": cause, "message": message,
                "blocked_by": blocked.function if isinstance(blocked, NotRun) else ""}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        self._rank_dirs: list[Path] = []
        self.emit(Start(nodeid=item.nodeid))
        started = time.monotonic()
        yield
        unavailable = self.sandbox.unavailable if self.sandbox is not None else None
        if unavailable is not None:
            # The grader's failure, never the student's: no verdict on this test or any other;
            # the parent stops grading this submission (a grading error).
            self.emit(Error(message=f"the sandbox could not start: {unavailable}"))
            item.session.shouldstop = "the sandbox could not start"
            return
        if self.imports.spent != self._imports_told:  # later runners of this grading know it
            self._imports_told = self.imports.spent
            self.emit(Imports(seconds=round(self.imports.spent, 3)))
        result = self.outcomes.get(item.nodeid) or {
            "cause": "grader_error", "message": "the test ended without an outcome"}
        output, cut = self._take_output()
        self.emit(Result(nodeid=item.nodeid, status=outcome_of(result["cause"]),
                         cause=result["cause"], message=result["message"],
                         blocked_by=result.get("blocked_by", ""), output=output,
                         output_cut=cut, duration=round(time.monotonic() - started, 3)))

    def _take_output(self) -> tuple[str, bool]:
        output, cut = ("", False) if self.sandbox is None else self.sandbox.take_output()
        for folder in self._rank_dirs:
            for log in sorted(folder.glob("rank*.log")):
                with open(log, "rb") as f:
                    data = f.read(self.limits.output_bytes + 1)
                cut = cut or len(data) > self.limits.output_bytes
                if data:
                    output += f"[{log.stem}]\n" + data[: self.limits.output_bytes].decode(
                        "utf-8", "replace")
            shutil.rmtree(folder, ignore_errors=True)
        limit = self.limits.output_bytes
        return output[:limit], cut or len(output) > limit

    def pytest_sessionfinish(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


def write_line(fd: int) -> Callable[[Event], None]:
    def emit(event: Event) -> None:
        os.write(fd, (event.to_json() + "\n").encode())
    return emit
