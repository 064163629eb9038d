"""The words grading uses for how things went: one vocabulary, as Literal types.

- `TestOutcome`: what the runner says of one hidden test;
- `TestCause`: why a graded item ended as it did (a hidden test, or a question), decided where
  it was observed, never read back from a message (see below);
- `ReportStatus`: what a report says of one graded item (a question or a test); `withheld` only
  in what students are shown (autograder.grading.visibility): a result not shown yet;
- `SubmissionState`: what a TA's gradebook says of a whole submission;
- `RunnerEvent`: the kinds of event a runner streams to the parent, one JSON line each (each
  kind's record, its fields typed, is in autograder.protocol.runner_events).

Each comes with the tuple of its values (`get_args`), which the code that reads them from JSON
checks against.
"""

from __future__ import annotations

from typing import Literal, get_args

TestOutcome = Literal["passed", "failed", "skipped", "gpu_unavailable", "grader_error"]

# Why a hidden test passed or failed, decided where it happened: the pytest plugin, from the
# exception that ended the test (the sandbox client's failures are typed: a timeout, a crash, a
# missing function, a failed import...) and from the student exceptions the sandbox reported
# during it (raised into the test, or caught by a scenario and noted); the supervisor, for what
# it sees itself (a runner killed during a test, the submission's time limit). Statuses, the
# reports' "not implemented yet" entries and the class overview read it; messages are for
# people and may be worded as a test's author likes.
TestCause = Literal[
    # the test ran to its end
    "passed",
    "wrong_result",       # a check failed: an assertion, a result the checks could not use
    "raised",             # student code raised an exception the test did not expect
    "not_implemented",    # student code raised NotImplementedError (the template's stubs)
    "missing_function",   # the module has no function of that name
    "uncheckable",        # a result the grader cannot read back (not plain data, malformed)
    # the module
    "no_module",          # no module to grade (missing, unreadable, a broken notebook)
    "import_failed",      # the module raised at import (a syntax or import error, sys.exit)
    # time
    "timed_out",          # a call, a scenario, the test's budget or the submission's ran out
    "import_hang",        # importing the module took too long: nothing else runs
    "import_stopped",     # an import cut at what was left of the imports allowance
    # processes (each also a flag, but `crashed`)
    "crashed",            # the worker ended: exited, killed, crashed, sys.exit, stopped answering
    "sandbox_killed",     # the sandbox's parent process (its zygote) ended while student code ran
    "runner_killed",      # the trusted runner was killed during the test
    "unreadable_reply",   # a reply over the size limit or not a reply at all
    "too_large",          # a reply too large for the runner's memory to check
    "network_refused",    # the sandbox refused a network socket, and that ended the test
    # not run, and why
    "not_run_hung",       # a function it needs hung in an earlier test
    "not_run_crashed",    # a function it needs crashed crash_limit times already
    "not_run_imports",    # imports have used up the submission's allowance
    "not_run_time_limit",  # grading stopped (the submission's time limit, repeated crashes)
    # not counted as passed or failed by the student's code
    "skipped",            # the test skipped itself (reported failed: it cannot count as passed)
    "gpu_skipped",        # a GPU test that did not run on a grader that has the GPUs
    "gpu_unavailable",    # needs GPUs this grader does not have (the GPU policy applies)
    "grader_error",       # the grader could not run the check (the instructor's)
    # questions: whether an answer was given (never whether it is right: that is the status)
    "answered",
    "not_answered",
    "invalid_answer",
    # what students are shown of a result not shown yet (autograder.grading.visibility): its
    # cause would tell its outcome
    "withheld",
]

ReportStatus = Literal["passed", "failed", "pending", "excluded", "withheld"]
# In the order a TA should look at them (the first that applies is shown).
SubmissionState = Literal["flagged", "grader_error", "no_module", "not_importable", "timed_out",
                          "crashed", "blank", "ok"]
RunnerEvent = Literal["environment", "calibration", "collected", "start", "sandbox", "result",
                      "hung", "crashed", "imports", "error", "done"]

TEST_OUTCOMES: tuple[str, ...] = get_args(TestOutcome)
TEST_CAUSES: tuple[str, ...] = get_args(TestCause)
REPORT_STATUSES: tuple[str, ...] = get_args(ReportStatus)
SUBMISSION_STATES: tuple[str, ...] = get_args(SubmissionState)
RUNNER_EVENTS: tuple[str, ...] = get_args(RunnerEvent)

# The runner's outcome of a hidden test follows from its cause (every other cause: "failed").
_OUTCOMES: dict[str, TestOutcome] = {"passed": "passed", "skipped": "skipped",
                                     "gpu_unavailable": "gpu_unavailable",
                                     "grader_error": "grader_error"}
NOT_RUN_CAUSES: tuple[str, ...] = tuple(c for c in TEST_CAUSES if c.startswith("not_run_"))
QUESTION_CAUSES: tuple[str, ...] = ("answered", "not_answered", "invalid_answer")
_NOT_OF_A_RUN = (*QUESTION_CAUSES, "withheld")  # no runner outcome of a hidden test


def outcome_of(cause: TestCause) -> TestOutcome:
    """The runner's outcome of a hidden test that ended for `cause`."""
    if cause not in TEST_CAUSES or cause in _NOT_OF_A_RUN:
        raise ValueError(f"{cause!r} is no cause of a hidden test")
    return _OUTCOMES.get(cause, "failed")
