"""Turn graded answers and test outcomes into one `Report`: points, GPU policy, statuses."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import inert as _inert
from .batch_records import LateStatus
from .config import AssignmentConfig

PARTS = ("multiple_choice", "coding")
MAX_MESSAGE = 4000  # characters of one message, whatever produced it (a forged reply, say)
MAX_FEEDBACK_LINES = 30


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return _inert.clip(text, limit)


@dataclass
class TestResult:
    """One graded item: a multiple-choice question or a hidden test."""

    name: str
    part: str
    item: str  # the question id, or the student function the test checks
    score: float
    max_score: float
    status: str  # passed | failed | pending | excluded
    message: str
    visibility: str
    output: str = ""
    feedback: list[str] = field(default_factory=list)  # hint / explanation lines


@dataclass
class PartScore:
    name: str
    score: float
    max_score: float


@dataclass
class Report:
    assignment: str
    title: str
    submission: str
    score: float
    max_score: float
    parts: list[PartScore]
    tests: list[TestResult]
    warnings: list[str]
    environment: dict
    execution_time: float = 0.0
    late: dict | None = None  # the late penalty applied to `score` (see apply_late)


@dataclass
class CodingOutcome:
    """What the runner reported for one hidden test."""

    nodeid: str
    name: str
    function: str
    points: float
    visibility: str
    gpu: bool
    status: str  # passed | failed | gpu_unavailable | skipped | grader_error
    message: str
    output: str = ""
    output_cut: bool = False


def coding_results(outcomes: list[CodingOutcome], config: AssignmentConfig,
                   warnings: list[str]) -> list[TestResult]:
    """Score hidden-test outcomes, applying the GPU policy to tests that could not run."""
    # Only the trusted runner says a GPU is missing (gpu_unavailable); a test that skipped
    # itself, whatever the sandbox reported, is no reason to rescale anything.
    unavailable = [o for o in outcomes if o.gpu and o.status == "gpu_unavailable"]
    scale = 1.0
    if unavailable and not any(o.points for o in unavailable):
        # Worth nothing here: they only confirm on a GPU grader what the CPU tests graded.
        warnings.append(f"{len(unavailable)} coding test(s) that check real GPUs (worth no "
                        "points) were not run: this grader has none.")
    elif unavailable and config.gpu_policy == "reweight":
        left_out = sum(o.points for o in unavailable)
        remaining = config.coding.points - left_out
        scale = config.coding.points / remaining if remaining > 0 else 1.0
        warnings.append(
            f"{len(unavailable)} coding test(s) worth {left_out:g} points need a GPU and this "
            f"grader has none: they were left out, and the other coding tests were scaled by "
            f"{scale:.4g} so the coding part is still out of {config.coding.points:g}.")
    elif unavailable:
        warnings.append(
            f"{len(unavailable)} coding test(s) worth {sum(o.points for o in unavailable):g} "
            f"points need a GPU and this grader has none: they score 0 for now and are pending "
            f"a regrade on a GPU grader.")
    results = []
    for o in outcomes:
        if o in unavailable:
            excluded = config.gpu_policy == "reweight"
            results.append(TestResult(
                o.name, "coding", o.function, 0.0, 0.0 if excluded else o.points,
                "excluded" if excluded else "pending",
                "needs a GPU; left out (the other tests were reweighted)" if excluded
                else "needs a GPU; pending a regrade on a GPU grader", o.visibility))
            continue
        if o.status == "grader_error":
            warnings.append(f"grader error in '{o.name}' (tell your instructor): {o.message}")
        max_score = o.points * scale  # rounded only when written
        passed = o.status == "passed"
        message = o.message
        if o.status == "skipped":
            message = f"this test did not run ({o.message}), so it cannot count as passed"
        # Escaped first, then held to the output limit: escaping must not grow what is kept.
        output = _inert.inert(o.output)[:config.limits.output_bytes] \
            if config.show_student_output else ""
        if output and o.output_cut:
            output += f"\n[output cut at {config.limits.output_bytes // 1024} KiB]"
        results.append(TestResult(o.name, "coding", o.function, max_score if passed else 0.0,
                                  max_score, "passed" if passed else "failed", clip(message),
                                  o.visibility, output))
    return results


def build_report(assignment: AssignmentConfig, submission: str, tests: list[TestResult],
                 warnings: list[str], environment: dict, execution_time: float) -> Report:
    # The boundary where submission-derived text enters the record: made inert and bounded here,
    # so every writer (files, terminal, gradebook) gets the same safe text.
    tests = [_inert_test(t) for t in tests]
    warnings = _inert.bounded(warnings)
    parts = []
    for part in PARTS:
        declared = getattr(assignment, part).points
        score = sum(t.score for t in tests if t.part == part)
        parts.append(PartScore(part, round(score, 4), declared))
    return Report(
        assignment=assignment.name, title=assignment.title,
        submission=_inert.label(submission, 200),
        score=round(sum(p.score for p in parts), 4),
        max_score=round(sum(p.max_score for p in parts), 4), parts=parts, tests=tests,
        warnings=warnings, environment=environment, execution_time=round(execution_time, 3))


def _inert_test(t: TestResult) -> TestResult:
    return replace(
        t, name=_inert.label(t.name, 300), item=_inert.label(t.item, 200),
        message=clip(_inert.inert(t.message)), output=_inert.inert(t.output),
        feedback=_inert.bounded(t.feedback, MAX_FEEDBACK_LINES, MAX_MESSAGE))


def apply_late(report: Report, late: LateStatus | None) -> Report:
    """The report with the late penalty taken off its total (tests keep their own scores)."""
    if late is None:
        return report
    raw = report.score
    report.score = round(raw * (1.0 - late.penalty), 4)
    report.late = {"minutes_late": round(late.minutes_late, 1), "days_late": late.days_late,
                   "penalty": late.penalty, "message": late.message, "raw_score": raw}
    return report
