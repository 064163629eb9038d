"""Reports made by hand for tests that need one of a given shape (a gradebook row, a status):
real `Report` and `TestResult` records, with what the test does not care about filled in."""

from __future__ import annotations

from autograder.grading.results import GradingEnvironment, PartScore, Report, TestResult

# Where a hand-made report was "graded": nowhere in particular, without isolation.
AN_ENVIRONMENT = GradingEnvironment(0, "2.13.0", "3.11.7", "none", [], "reweight")


def a_test(item: str = "add", status: str = "failed", cause: str | None = None,
           message: str = "", *, part: str = "coding", name: str | None = None,
           score: float | None = None, max_score: float = 1.0,
           visibility: str = "visible", **more: object) -> TestResult:
    """One graded item; its cause is the one its status implies unless given, its score its
    maximum when passed."""
    if cause is None:
        cause = {"passed": "passed", "withheld": "withheld"}.get(status, "wrong_result")
        cause = "answered" if part == "multiple_choice" and status != "withheld" else cause
    if score is None:
        score = max_score if status == "passed" else 0.0
    return TestResult(name or f"{item}: test", part, item, score, max_score, status, cause,
                      message, visibility, **more)


def a_report(*tests: TestResult, warnings: list[str] | None = None,
             score: float | None = None, max_score: float | None = None,
             **more: object) -> Report:
    """A report of `tests`: its parts and totals add up theirs unless given."""
    parts = [PartScore(part, round(sum(t.score for t in tests if t.part == part), 2),
                       round(sum(t.max_score for t in tests if t.part == part), 2))
             for part in ("multiple_choice", "coding")]
    return Report("toy", "Toy", "submission",
                  round(sum(p.score for p in parts), 2) if score is None else score,
                  round(sum(p.max_score for p in parts), 2) if max_score is None else max_score,
                  parts, list(tests), list(warnings or []), AN_ENVIRONMENT, **more)
