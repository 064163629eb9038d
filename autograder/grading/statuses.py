"""The words grading uses for how things went: one vocabulary, as Literal types.

- `TestOutcome`: what the runner says of one hidden test;
- `ReportStatus`: what a report says of one graded item (a question or a test); `withheld` only
  in what students are shown (autograder.grading.visibility): a result not shown yet;
- `SubmissionState`: what a TA's gradebook says of a whole submission;
- `RunnerEvent`: the kinds of event a runner streams to the parent, one JSON line each (each
  kind's record, its fields typed, is in autograder.grading.runner_events).

Each comes with the tuple of its values (`get_args`), which the code that reads them from JSON
checks against.
"""

from __future__ import annotations

from typing import Literal, get_args

TestOutcome = Literal["passed", "failed", "skipped", "gpu_unavailable", "grader_error"]
ReportStatus = Literal["passed", "failed", "pending", "excluded", "withheld"]
# In the order a TA should look at them (the first that applies is shown).
SubmissionState = Literal["flagged", "grader_error", "no_module", "not_importable", "timed_out",
                          "crashed", "blank", "ok"]
RunnerEvent = Literal["environment", "calibration", "collected", "start", "sandbox", "result",
                      "hung", "crashed", "imports", "error", "done"]

TEST_OUTCOMES: tuple[str, ...] = get_args(TestOutcome)
REPORT_STATUSES: tuple[str, ...] = get_args(ReportStatus)
SUBMISSION_STATES: tuple[str, ...] = get_args(SubmissionState)
RUNNER_EVENTS: tuple[str, ...] = get_args(RunnerEvent)
