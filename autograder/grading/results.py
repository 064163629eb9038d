"""Turn graded answers and test outcomes into one `Report`: points, GPU policy, statuses.

Points are shown with at most two decimals, and what is shown adds up exactly: `build_report`
apportions each part's total over its functions, and each function's over its tests, in whole
hundredths (largest remainder), so the test scores add up to the function subtotals, those to the
part and the parts to the total, in every report and in results.json.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TypeVar

from autograder.grading.late import LateStatus
from autograder.inputs.submission import GradedFile
from autograder.project import inert as _inert
from autograder.project.config import AssignmentConfig
from autograder.protocol.statuses import ReportStatus, TestCause, TestOutcome

Record = TypeVar("Record")

PARTS = ("multiple_choice", "coding")
MAX_MESSAGE = _inert.MAX_MESSAGE
MAX_FEEDBACK_LINES = 30


@dataclass
class TestResult:
    """One graded item: a multiple-choice question or a hidden test."""

    name: str
    part: str
    item: str  # the question id, or the student function the test checks
    score: float
    max_score: float
    status: ReportStatus
    cause: TestCause  # why (statuses.TestCause): what statuses and reports read
    message: str
    visibility: str
    output: str = ""
    feedback: list[str] = field(default_factory=list)  # hint / explanation lines
    # When `feedback` may be shown, if later than the result itself: the key revealed for an
    # unanswered question (shown at once) waits for the key's own visibility. None: `visibility`.
    feedback_visibility: str | None = None


@dataclass
class PartScore:
    name: str
    score: float
    max_score: float


@dataclass
class FunctionScore:
    """A subtotal: the tests of one student function (the points the student README lists)."""

    name: str
    part: str
    score: float
    max_score: float
    tests: int  # tests counted here (GPU tests left out are not)


@dataclass(frozen=True)
class LateEntry:
    """The late penalty taken off a report's total (apply_late)."""

    minutes_late: float
    days_late: int
    penalty: float  # the fraction of the total taken away, 0..1
    message: str  # one sentence for the student
    raw_score: float  # the total before the penalty


@dataclass(frozen=True)
class ReleaseRecord:
    """What students were shown of a report (autograder.grading.visibility.Release.record)."""

    graded_at: str  # ISO 8601
    results_shown_at: str | None  # when `after_due_date` results are shown; None: no due date
    withheld: int  # results not shown by this grading
    withheld_after_due_date: int  # of those, the ones shown after the due date
    withheld_points: float


@dataclass(frozen=True)
class GradingEnvironment:
    """Where a submission was graded: the runner's machine (`gpus`, `torch`, `python`), how
    student code was isolated and what that protects against, the course's GPU policy, and
    how the tests' time budgets and the student's imports were timed."""

    gpus: int
    torch: str
    python: str
    isolation: str  # "namespaces" | "uid" | "none"
    protections: list[str]
    gpu_policy: str
    time_budgets: dict | None = None  # autograder.project.budgets' record
    imports: dict | None = None  # {"seconds": ..., "limit_seconds": ...}

    def to_json(self) -> dict:
        """As report.json holds it: the optional records only when there are some."""
        return _environment_json(json.loads(json.dumps(asdict(self))))


def _environment_json(data: dict) -> dict:
    return {key: value for key, value in data.items()
            if value is not None or key not in ("time_budgets", "imports")}


def _record(kind: type[Record], data: dict) -> Record:
    """`kind` from its JSON, leaving out keys it has no field for: a report.json written by a
    newer grader (a batch's stored reports) reads in an older one."""
    names = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    return kind(**{key: value for key, value in data.items() if key in names})


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
    environment: GradingEnvironment
    execution_time: float = 0.0
    late: LateEntry | None = None  # the late penalty applied to `score` (see apply_late)
    functions: list[FunctionScore] = field(default_factory=list)  # coding subtotals
    # Which file was graded, when the grader had to choose; None when there was no choice.
    graded_file: GradedFile | None = None
    due: str | None = None  # the assignment's due date (grading.yml)
    # What students were shown of this report (autograder.grading.visibility.Release): when it
    # was graded, when its `after_due_date` results are shown, how many results were withheld.
    release: ReleaseRecord | None = None

    def to_json(self) -> dict:
        """This report as JSON values (what report.json holds, and what a batch worker sends
        back): `Report.from_json` reads it back equal."""
        data = json.loads(json.dumps(asdict(self)))  # (tuples become lists, as in a file)
        return {**data, "environment": _environment_json(data["environment"])}

    @classmethod
    def from_json(cls, data: dict) -> Report:
        """The report `to_json` wrote; keys this version does not know are left out."""
        lists = {"parts": PartScore, "tests": TestResult, "functions": FunctionScore}
        records = {"late": LateEntry, "graded_file": GradedFile, "release": ReleaseRecord}
        return _record(cls, {**data,
                             "environment": _record(GradingEnvironment, data["environment"]),
                             **{key: [_record(kind, item) for item in data.get(key, [])]
                                for key, kind in lists.items()},
                             **{key: _record(kind, data[key]) for key, kind in records.items()
                                if data.get(key) is not None}})


@dataclass
class CodingOutcome:
    """What the runner reported for one hidden test."""

    nodeid: str
    name: str
    function: str
    points: float
    visibility: str
    gpu: bool
    status: TestOutcome
    cause: TestCause
    message: str
    output: str = ""
    output_cut: bool = False


def coding_results(outcomes: list[CodingOutcome], config: AssignmentConfig,
                   warnings: list[str], internal_names: Iterable[str] = ()) -> list[TestResult]:
    """Score hidden-test outcomes, applying the GPU policy to tests that could not run.

    `internal_names` are the grader's own class names (probes', hidden tests'): where one shows
    in a message (PyTorch names the model in its errors) it is replaced by a neutral phrase.
    """
    hide = _internal_names_pattern(internal_names)
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
            f"grader has none: they were left out, and the points of the other coding tests "
            f"were scaled up (in proportion, to the hundredth) so the coding part is still out "
            f"of {config.coding.points:g}.")
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
                "excluded" if excluded else "pending", o.cause,
                "needs a GPU; left out (the other tests were reweighted)" if excluded
                else "needs a GPU; pending a regrade on a GPU grader", o.visibility))
            continue
        if o.status == "grader_error":
            warnings.append(f"grader error in '{o.name}' (tell your instructor): {o.message}")
        max_score = o.points * scale  # rounded only when written
        passed = o.status == "passed"
        message = _hide_internal(o.message, hide)
        if o.status == "skipped":
            message = f"this test did not run ({o.message}), so it cannot count as passed"
        # Escaped first, then held to the output limit: escaping must not grow what is kept.
        output = _inert.inert(o.output)[:config.limits.output_bytes] \
            if config.show_student_output else ""
        if output and o.output_cut:
            output += f"\n[output cut at {config.limits.output_bytes // 1024} KiB]"
        results.append(TestResult(o.name, "coding", o.function, max_score if passed else 0.0,
                                  max_score, "passed" if passed else "failed", o.cause,
                                  _inert.clip(message, MAX_MESSAGE),
                                  o.visibility, output))
    return results


def _internal_names_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted({n for n in names if n and n.isidentifier()}, key=len, reverse=True)
    if not names:
        return None
    alternatives = "|".join(map(re.escape, names))
    return re.compile(rf"\b(?:(?:[Aa]n?|[Tt]he) )?(?:{alternatives})\b")


def _hide_internal(message: str, pattern: re.Pattern[str] | None) -> str:
    """`message` without the grader's class names: PyTorch's "Error(s) in loading state_dict for
    Holder" becomes "... for the test's model"."""
    return message if pattern is None else pattern.sub("the test's model", message)


# ----------------------------------------------------------------------------- points


def _apportion(total: int, weights: list[float]) -> list[int]:
    """`total` hundredths split in proportion to `weights`, by largest remainder: whole
    hundredths that add up to `total` exactly (ties go to the earlier item)."""
    weight = sum(weights)
    if not weights or weight <= 0:
        return [0] * len(weights)
    exact = [total * w / weight for w in weights]
    # A hair of tolerance: 3 * (8 / 7) * 100 must floor to 342, not 342 - 1e-13.
    floors = [math.floor(x + 1e-9) for x in exact]
    left = total - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:max(left, 0)]:
        floors[i] += 1
    return floors


def _cents(value: float) -> int:
    return round(value * 100 + 0.0)


def rounded_points(tests: list[TestResult]) -> tuple[list[TestResult], dict[str, int],
                                                     list[FunctionScore]]:
    """Tests with points in whole hundredths that add up exactly: each part's total (the sum of
    its tests' maxima, to the hundredth) is apportioned over its functions (coding) or questions,
    then each function's over its tests. A passed test scores its shown maximum; a partial score
    keeps its fraction of it. Returns the tests, each part's score in hundredths, and the coding
    subtotals per function."""
    out = list(tests)
    part_scores: dict[str, int] = {}
    functions: list[FunctionScore] = []
    for part in PARTS:
        indices = [i for i, t in enumerate(tests) if t.part == part and t.status != "excluded"]
        total = _cents(sum(tests[i].max_score for i in indices))
        groups: dict[str, list[int]] = {}
        for i in indices:
            groups.setdefault(tests[i].item if part == "coding" else str(i), []).append(i)
        group_cents = _apportion(total, [sum(tests[i].max_score for i in g)
                                         for g in groups.values()])
        part_score = 0
        for (name, members), cents in zip(groups.items(), group_cents, strict=True):
            maxima = _apportion(cents, [tests[i].max_score for i in members])
            scored = 0
            for i, max_cents in zip(members, maxima, strict=True):
                t = tests[i]
                if t.max_score <= 0:
                    score_cents = 0
                elif t.score >= t.max_score - 1e-9:
                    score_cents = max_cents
                else:
                    score_cents = min(max_cents, max(0, round(max_cents * t.score / t.max_score)))
                out[i] = replace(t, score=score_cents / 100, max_score=max_cents / 100)
                scored += score_cents
            part_score += scored
            if part == "coding":
                functions.append(FunctionScore(name, part, scored / 100, cents / 100,
                                               len(members)))
        for i, t in enumerate(tests):  # left out: worth nothing here
            if t.part == part and t.status == "excluded":
                out[i] = replace(t, score=0.0, max_score=0.0)
        part_scores[part] = part_score
    return out, part_scores, functions


def build_report(assignment: AssignmentConfig, submission: str, tests: list[TestResult],
                 warnings: list[str], environment: GradingEnvironment, execution_time: float,
                 graded_file: GradedFile | None = None) -> Report:
    # The boundary where submission-derived text enters the record: made inert and bounded here,
    # so every writer (files, terminal, gradebook) gets the same safe text.
    tests = [_inert_test(t) for t in tests]
    warnings = _inert.bounded(warnings)
    tests, part_cents, functions = rounded_points(tests)
    parts = [PartScore(part, part_cents[part] / 100, getattr(assignment, part).points)
             for part in PARTS]
    if graded_file is not None:
        graded_file = GradedFile(_inert.label(graded_file.file, 200),
                                 _inert.clip(_inert.inert(graded_file.why), MAX_MESSAGE))
    return Report(
        assignment=assignment.name, title=assignment.title,
        submission=_inert.label(submission, 200),
        score=sum(part_cents.values()) / 100,
        max_score=round(sum(p.max_score for p in parts), 2), parts=parts, tests=tests,
        warnings=warnings, environment=environment, execution_time=round(execution_time, 3),
        functions=functions, graded_file=graded_file, due=assignment.due)


def _inert_test(t: TestResult) -> TestResult:
    return replace(
        t, name=_inert.label(t.name, 300), item=_inert.label(t.item, 200),
        message=_inert.clip(_inert.inert(t.message), MAX_MESSAGE), output=_inert.inert(t.output),
        feedback=_inert.bounded(t.feedback, MAX_FEEDBACK_LINES, MAX_MESSAGE))


def apply_late(report: Report, late: LateStatus | None) -> Report:
    """The report with the late penalty taken off its total (tests keep their own scores); the
    total stays in whole hundredths."""
    if late is None:
        return report
    raw = report.score
    report.score = late_total(raw, late.penalty)
    report.late = LateEntry(round(late.minutes_late, 1), late.days_late, late.penalty,
                            late.message, raw)
    return report


def late_total(raw: float, penalty: float) -> float:
    """A total after a late penalty (a fraction of it), in whole hundredths."""
    return round(raw * (1.0 - penalty), 2)
