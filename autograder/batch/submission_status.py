"""What a TA needs to know about one graded submission, in one word and one line.

`derive(report, error, events)` gives a `SubmissionStatus` from the `Report` (each coding
test's `cause`, statuses.TestCause, never its message), the grader's own failure and the
sandbox's event log:

- `flagged`: hostile behaviour: a refused socket, a write outside the sandbox, a read of the
  grader's files, a signal to the grader or to the sandbox's parent, an import hang, an
  over-limit reply, tampering with the sandbox's event channel;
- `grader_error`: the grader failed (no report), or could not run some checks;
- `no_module`: no module in the submission;
- `not_importable`: the module raised at import (a syntax or import error), with the error;
- `timed_out`: tests ran out of time (how many);
- `crashed`: tests ended with the worker dead (killed, exited, crashed) (how many);
- `blank`: the template unchanged: no coding test passed, and each failed because student code
  raised `NotImplementedError` (told by its class, also when a test or a scenario caught it)
  or a function is missing;
- `ok`: none of the above.

A status is one word (the first that applies, in the order above); `flags` keeps every hostile
reason, whatever the status.

Trust. Flags come from two sources. Most are the trusted side's own observations, the causes the
trusted runner and supervisor gave tests (a runner killed mid-test, a zygote killed, an import
that hung, a reply over the size limit, a socket the sandbox refused): student code can make
some appear (it can raise the sandbox's refusal itself, say) but cannot remove them, and
`flagged` outranks every other status, so a student can only ever add a flag to itself. The
sandbox's audit hook also notes attempts the trusted side cannot see (a refused socket that the
student code caught, a write to a read-only path, a read of a grader path, a signal to the
zygote), sent on each worker's event channel, which only the trusted runner reads, as it arrives
(autograder.sandbox.events): what was sent is out of the sandbox's reach, and the runner keeps
it in a records file of its own in the grader's folder
(autograder.grading.ta_events.read_sandbox_events). Student code may send more (flagging itself)
or stop its hook from sending (hiding its later attempts); flooding the channel, sending what is
not an event and closing the channel while it still runs are flags of their own, observed by the
runner. None of it changes a score or clears a trusted observation.

The student's report never mentions flags: grading keeps the events next to it
(autograder.grading.ta_events), the batch takes them out before publishing the reports, and
they are shown only in the TA's outputs. A status is the TA's (the gradebook, the overview,
Gradescope's staff output), so it lives with the batch; grading never reads one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from autograder.grading.results import Report, TestResult
from autograder.project.inert import clip, inert
from autograder.protocol.statuses import SUBMISSION_STATES, SubmissionState, TestCause

STATUSES = SUBMISSION_STATES
NEEDS_A_LOOK = tuple(s for s in STATUSES if s != "ok")
TITLES = {"flagged": "flagged", "grader_error": "grader error", "no_module": "no module",
          "not_importable": "not importable", "timed_out": "timed out", "crashed": "crashed",
          "blank": "blank", "ok": "ok"}

MAX_DETAIL = 300  # of the one line a status shows
EVENT_REASONS = {
    # sent by the sandbox's audit hook (autograder.sandbox.events.SANDBOX_KINDS)
    "network": "tried the network (refused)",
    "write": "tried to write outside its sandbox",
    "read": "tried to read the grader's files",
    "signal": "sent a signal to the grader's processes",
    "unexpected": "unexpected sandbox event",
    # observed by the runner reading the channels (autograder.sandbox.events.TRUSTED_KINDS)
    "flood": "flooded its sandbox's event channel",
    "malformed": "sent what is not an event on its sandbox's event channel",
    "closed": "closed its sandbox's event channel while its code still ran",
    # observed by the sandbox client after a worker ended (autograder.sandbox.client)
    "left_running": "left processes running after its code's test ended (they were stopped)",
}

# What a coding test's cause (statuses.TestCause) says of the whole submission.
CAUSE_FLAGS = {
    "runner_killed": "killed the grading process (a signal to the grader)",
    "sandbox_killed": "killed its sandbox's parent process",
    "import_hang": "import hang",
    "unreadable_reply": "sent a reply over the size limit or malformed",
    "too_large": "sent a reply too large to check",
    "network_refused": "tried the network (refused)",
}
TIMED_OUT_CAUSES = ("timed_out", "import_hang")
CRASHED_CAUSES = ("crashed", "runner_killed")
BLANK_CAUSES = ("not_implemented", "missing_function")
_NOT_IMPORTABLE = "your module could not be imported:"  # (taken off the detail shown)


@dataclass
class SubmissionStatus:
    status: SubmissionState
    detail: str = ""  # one line for the TA: the import error, how many tests timed out, why
    flags: list[str] = field(default_factory=list)  # every hostile reason seen
    timed_out: int = 0  # coding tests that ran out of time
    crashed: int = 0  # coding tests whose worker died
    grader_errors: int = 0  # coding tests the grader could not run (whatever the status)

    @property
    def title(self) -> str:
        return TITLES.get(self.status, self.status)

    @property
    def needs_a_look(self) -> bool:
        return self.status != "ok"

    @property
    def grader_failed(self) -> bool:
        """The grader failed on this submission: it wrote no report (`grader_error`), or could
        not run some of its checks (even when the submission is also flagged)."""
        return self.status == "grader_error" or self.grader_errors > 0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> SubmissionStatus:
        if not isinstance(data, dict) or data.get("status") not in STATUSES:
            return cls("ok")
        return cls(data["status"], str(data.get("detail", "")),
                   [str(f) for f in data.get("flags", [])],
                   int(data.get("timed_out", 0)), int(data.get("crashed", 0)),
                   int(data.get("grader_errors", 0)))


def derive(report: Report | None, error: str | None = None,
           events: list[dict] | None = None) -> SubmissionStatus:
    """The status of one grading: `report` is its report (None when the grader failed), `error`
    the grader's own failure, `events` the sandbox's (grading.ta_events.take_kept_events)."""
    flags = _event_flags(events or [])
    if report is None or error is not None:
        detail = error or "the grader wrote no report"
        if flags:
            return SubmissionStatus("flagged", f"{'; '.join(flags)} (and: {detail})", flags)
        return SubmissionStatus("grader_error", clip(inert(detail), MAX_DETAIL))
    coding = [t for t in report.tests if t.part == "coding"]
    counted = [t for t in coding if t.status in ("passed", "failed")]
    failed = [t for t in counted if t.status == "failed"]
    causes = [t.cause for t in failed]
    for cause in causes:
        reason = CAUSE_FLAGS.get(cause)
        if reason is not None and reason not in flags:
            flags.append(reason)
    slow = sum(cause in TIMED_OUT_CAUSES for cause in causes)
    dead = sum(cause in CRASHED_CAUSES for cause in causes)
    found = SubmissionStatus("ok", flags=flags, timed_out=slow, crashed=dead)
    problem = _module_problem(failed)
    grader_errors = [t for t in failed if t.cause == "grader_error"]
    found.grader_errors = len(grader_errors)
    if flags:
        found.status, found.detail = "flagged", "; ".join(flags)
    elif grader_errors:
        found.status = "grader_error"
        found.detail = (f"the grader could not run {len(grader_errors)} check(s), e.g. "
                        f"{grader_errors[0].name}")
    elif problem is not None:
        found.status, found.detail = problem
    elif slow:
        found.status, found.detail = "timed_out", f"{slow} of {len(counted)} tests timed out"
    elif dead:
        found.status, found.detail = "crashed", f"{dead} of {len(counted)} tests crashed"
    elif counted and len(failed) == len(counted) and all(c in BLANK_CAUSES for c in causes):
        found.status, found.detail = "blank", ("the template unchanged: its functions raise "
                                               "NotImplementedError or are missing")
    found.detail = clip(inert(found.detail), MAX_DETAIL)
    return found


def _module_problem(failed: list[TestResult]) -> tuple[SubmissionState, str] | None:
    """no_module or not_importable, with the first such test's message as the detail."""
    states: tuple[tuple[SubmissionState, TestCause], ...] = (("no_module", "no_module"),
                                                             ("not_importable", "import_failed"))
    for state, cause in states:
        for test in failed:
            if test.cause == cause:
                return state, test.message.removeprefix(_NOT_IMPORTABLE).strip()
    return None


def _event_flags(events: list[dict]) -> list[str]:
    flags: list[str] = []
    said: set[str] = set()
    for event in events:
        reason = EVENT_REASONS.get(str(event.get("kind")), "unexpected sandbox event")
        if reason in said:  # one line per reason: the first event's detail
            continue
        said.add(reason)
        detail = clip(inert(str(event.get("detail", ""))), 120)
        flags.append(f"{reason}: {detail}" if detail else reason)
    return flags
