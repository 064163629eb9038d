"""Points as shown: whole hundredths that add up exactly (tests -> functions -> parts -> total),
grader-internal names kept out of messages, late totals in hundredths."""

from __future__ import annotations

import random
from dataclasses import replace

from repo_project import REPO

from autograder.grading.late import LateStatus
from autograder.grading.results import (
    CodingOutcome,
    _apportion,
    apply_late,
    build_report,
    coding_results,
)
from autograder.grading.results import TestResult as Result  # not a pytest class
from autograder.project.config import load_config

CONFIG = load_config(REPO)["dp_basics"]


def outcome(function: str, points: float, status: str = "passed", gpu: bool = False,
            message: str = "") -> CodingOutcome:
    cause = {"failed": "wrong_result"}.get(status, status)
    return CodingOutcome(f"t::{function}", f"{function}: a test", function, points, "visible",
                         gpu, status, cause, message)


def cents(x: float) -> int:
    assert abs(x * 100 - round(x * 100)) < 1e-6, f"{x} has more than 2 decimals"
    return round(x * 100)


def test_apportion_is_exact_and_by_largest_remainder() -> None:
    assert _apportion(800, [3, 3, 1]) == [343, 343, 114]  # 8 points over 3 : 3 : 1 (x 8/7)
    assert _apportion(100, [1, 1, 1]) == [34, 33, 33]  # ties: the earlier item
    assert _apportion(0, [1, 2]) == [0, 0] and _apportion(100, []) == []
    rng = random.Random(12)
    for _ in range(500):
        weights = [rng.choice([0, 0.5, 1, 1.5, 2, 7 / 3]) for _ in range(rng.randint(1, 12))]
        total = rng.randint(0, 10_000)
        split = _apportion(total, weights)
        assert sum(split) == (total if sum(weights) else 0)
        assert all(abs(s - total * w / sum(weights)) < 1 for s, w in zip(split, weights,
                                                                          strict=True)
                   if sum(weights))


def test_reweighted_scores_add_up_in_hundredths_everywhere() -> None:
    """The issue's numbers: 1.09375-point tests and a coding part of 40.4688. Now each test,
    each function subtotal, each part and the total are hundredths that add up exactly."""
    rng = random.Random(3)
    for trial in range(40):
        outcomes = []
        gpu_points = 5 if trial % 3 else 0.5  # a GPU test of setup_ddp, left out here
        for function, points in CONFIG.functions.items():
            points -= gpu_points if function == "setup_ddp" else 0
            split = [points / 4] * 4 if trial % 2 else [points - 1, 1]
            outcomes += [outcome(function, p, rng.choice(["passed", "failed"])) for p in split]
        # The rest are scaled by 70 / 65 (or 70 / 69.5): 1.0769... points a test, and so on.
        outcomes.append(outcome("setup_ddp", gpu_points, "gpu_unavailable", gpu=True))
        warnings: list[str] = []
        tests = coding_results(outcomes, CONFIG, warnings)
        tests += [Result(f"Q{i}", "multiple_choice", f"q{i:02}", rng.choice([0, 1.5]), 1.5,
                             "passed", "answered", "", "visible") for i in range(1, 21)]
        report = build_report(CONFIG, "s", tests, warnings, {}, 1.0)
        for part in report.parts:
            members = [t for t in report.tests if t.part == part.name]
            assert sum(cents(t.score) for t in members) == cents(part.score)
            assert sum(cents(t.max_score) for t in members) == cents(part.max_score)
        assert sum(cents(p.score) for p in report.parts) == cents(report.score)
        for f in report.functions:
            members = [t for t in report.tests if t.item == f.name and t.part == "coding"]
            assert sum(cents(t.score) for t in members) == cents(f.score)
            assert sum(cents(t.max_score) for t in members) == cents(f.max_score)
        assert sum(cents(f.max_score) for f in report.functions) == 7000
        excluded = [t for t in report.tests if t.status == "excluded"]
        assert excluded and all(t.max_score == t.score == 0 for t in excluded)


def test_function_subtotals_are_the_readme_points_without_reweighting() -> None:
    outcomes = [outcome(f, p) for f, p in CONFIG.functions.items()]
    outcomes.append(outcome("setup_ddp", 0, "gpu_unavailable", gpu=True))  # worth 0: no scale
    report = build_report(CONFIG, "s", coding_results(outcomes, CONFIG, []), [], {}, 1.0)
    assert {f.name: f.max_score for f in report.functions} == CONFIG.functions
    assert report.parts[1].score == 70 and report.score == 70


def test_probe_class_names_never_reach_a_message() -> None:
    message = ('only a leading \'module.\' may be removed (Error(s) in loading state_dict for '
               'Holder: Missing key(s) in state_dict: "module.weight")')
    tests = coding_results([outcome("load_state_dict_flexible", 8, "failed", message=message)],
                           CONFIG, [], internal_names=["Holder", "TinyMLP"])
    assert "Holder" not in tests[0].message
    assert "Error(s) in loading state_dict for the test's model: Missing key(s)" \
        in tests[0].message
    tests = coding_results([outcome("unwrap_model", 5, "failed",
                                    message="expected the Holder inside, got a TinyMLP")],
                           CONFIG, [], internal_names=["Holder", "TinyMLP"])
    assert tests[0].message == "expected the test's model inside, got the test's model"


def test_late_total_stays_in_hundredths() -> None:
    tests = coding_results([outcome(f, p) for f, p in CONFIG.functions.items()], CONFIG, [])
    report = build_report(CONFIG, "s", tests, [], {}, 1.0)
    late = LateStatus(minutes_late=100.0, days_late=1, penalty=1 / 3, message="1 day late.")
    report = apply_late(replace(report), late)
    assert report.score == 46.67 and report.late.raw_score == 70
