"""What students see in results.json, report.md and report.html: points in hundredths that add
up, one entry per function not implemented yet, GPU exclusions as one note, per-function
subtotals, the graded file, multiple-choice correctness after the due date (what is withheld
before it: tests/grading/test_visibility.py)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from repo_project import REPO
from report_records import AN_ENVIRONMENT

from autograder.grading.late import LateStatus
from autograder.grading.report import _part_views, gradescope_results, points, write_outputs
from autograder.grading.results import CodingOutcome, apply_late, build_report, coding_results
from autograder.grading.results import TestResult as Result  # not a pytest class
from autograder.grading.visibility import Release, student_view
from autograder.inputs.submission import GradedFile
from autograder.project.config import load_config
from autograder.project.inert import clip
from autograder.project.schemas import validate

CONFIG = load_config(REPO)["dp_basics"]
STUB = "{0} raised NotImplementedError: {0} is not implemented yet (line 50 in {0})"
CAUSES = {"passed": "passed", "stub": "not_implemented"}


def report_of(statuses: dict[str, str], gpu_points: float = 1.0, graded_file=None,
              mc_visibility: str = "visible"):
    """Two tests per function (and one GPU test of setup_ddp worth `gpu_points`, left out),
    twenty questions of `mc_visibility`."""
    outcomes = []
    for function, total in CONFIG.functions.items():
        total -= gpu_points if function == "setup_ddp" else 0
        status = statuses.get(function, "passed")
        message = STUB.format(function) if status == "stub" else "wrong"
        for i, share in enumerate((total / 3, total * 2 / 3)):
            outcomes.append(CodingOutcome(f"t{i}", f"{function}: test {i}", function, share,
                                          "visible", False,
                                          "passed" if status == "passed" else "failed",
                                          CAUSES.get(status, "wrong_result"),
                                          "" if status == "passed" else message))
    outcomes.append(CodingOutcome("g", "setup_ddp: on a GPU", "setup_ddp", gpu_points,
                                  "visible", True, "gpu_unavailable", "gpu_unavailable", ""))
    warnings: list[str] = []
    tests = coding_results(outcomes, CONFIG, warnings)
    tests += [Result(f"Q{i} q{i:02}", "multiple_choice", f"q{i:02}", 1.5 if i % 3 else 0.0,
                     1.5, "passed" if i % 3 else "failed", "answered", "" if i % 3 else "A: no",
                     mc_visibility) for i in range(1, 21)]
    return build_report(CONFIG, "s", tests, warnings, AN_ENVIRONMENT, 1.0, graded_file)


def shown_numbers(text: str) -> list[str]:
    return re.findall(r"\d+\.\d+", text)


def test_points_format() -> None:
    assert [points(x) for x in (40.47, 70.0, 1.5, 0.0, 1.10, 2 / 3)] == \
        ["40.47", "70", "1.5", "0", "1.1", "0.67"]


def test_results_json_adds_up_and_has_no_excluded_boxes(tmp_path) -> None:
    report = report_of({"wrap_ddp": "stub", "cleanup_ddp": "failed"}, gpu_points=1.0)
    results = gradescope_results(report)
    validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    scores = [t["score"] for t in results["tests"]]
    assert all(round(x, 2) == x for t in results["tests"] for x in (t["score"], t["max_score"]))
    assert round(sum(scores), 2) == results["score"] == report.score
    assert round(sum(t["max_score"] for t in results["tests"]), 2) == 100
    assert not any("on a GPU" in t["name"] for t in results["tests"])  # one note instead
    assert any("need a GPU" in w for w in report.warnings)
    stub = [t for t in results["tests"] if "wrap_ddp" in t["name"]]
    assert [t["name"] for t in stub] == ["wrap_ddp: not implemented yet"]
    assert stub[0]["max_score"] == next(f.max_score for f in report.functions
                                        if f.name == "wrap_ddp")
    assert stub[0]["output"].startswith("wrap_ddp is not implemented yet: it raised "
                                        "NotImplementedError in all 2 of its tests; replace")


def test_markdown_and_html_show_hundredths_that_add_up(tmp_path) -> None:
    report = report_of({"wrap_ddp": "stub", "emulate_data_parallel": "failed"}, gpu_points=1.0)
    write_outputs(report, tmp_path, REPO.schemas)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    for text in (md, html):
        assert all(len(n.split(".")[1]) <= 2 for n in shown_numbers(text))
        assert "setup\\_ddp: on a GPU" not in text and "setup_ddp: on a GPU" not in text
        assert "excluded" not in text
    assert md.count("### wrap\\_ddp") == 1  # one entry for wrap_ddp, not one per test
    rows = dict(re.findall(r"^\| `(\w+)` \| ([\d.]+) \| [\d.]+ \|$", md, re.MULTILINE))
    assert set(rows) == set(CONFIG.functions)
    coding = re.search(r"^\| Coding \| ([\d.]+) \|", md, re.MULTILINE).group(1)
    assert round(sum(float(v) for v in rows.values()), 2) == float(coding)
    data = json.loads((tmp_path / "report.json").read_text())
    validate(data, "report.schema.json", "report.json", REPO.schemas)
    assert round(sum(t["score"] for t in data["tests"]), 2) == data["score"]


def test_late_penalty_is_an_entry_so_results_still_add_up() -> None:
    report = apply_late(report_of({}), LateStatus(30.0, 1, 0.1, "1 day late: 10% off."))
    results = gradescope_results(report)
    validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    assert results["tests"][-1]["name"] == "Late penalty"
    assert round(sum(t["score"] for t in results["tests"]), 2) == results["score"]


def test_graded_file_is_said_first() -> None:
    report = report_of({}, graded_file=GradedFile("dp_basics.ipynb", "because"))
    assert gradescope_results(report)["output"].startswith("Graded file: dp_basics.ipynb. "
                                                           "because.")


def test_multiple_choice_correctness_shows_after_the_due_date() -> None:
    report = report_of({}, mc_visibility="after_due_date")
    due = datetime(2026, 12, 18, 5, 14, tzinfo=timezone.utc)
    report.release = Release(due - timedelta(seconds=1), due).record(report.tests)
    mc_before = _part_views(student_view(report))[0]
    assert mc_before.withheld == mc_before.after_due == 20 and not mc_before.failed
    assert mc_before.withheld_points == 30
    report.release = Release(due, due).record(report.tests)
    mc_after = _part_views(student_view(report))[0]
    assert mc_after.withheld == 0 and len(mc_after.failed) == 6


def test_clip_cuts_at_a_word_boundary_with_an_ellipsis() -> None:
    text = 'Missing key(s) in state_dict: "module.weight", "module.bias", "submodule.weight"'
    cut = clip(text, 60)
    assert len(cut) <= 60 and cut.endswith("\u2026")
    assert text.startswith(cut[:-1]) and text[len(cut) - 1:len(cut) + 1] == ", "  # a word end
    assert clip(cut, 60) == cut and clip("short", 60) == "short"


def test_not_implemented_entries_follow_the_cause_not_the_wording() -> None:
    report = report_of({"unwrap_model": "stub", "wrap_ddp": "failed"})
    for t in report.tests:
        if t.item == "unwrap_model":  # a test that words it as it likes: grouped all the same
            t.message = "loading failed"
        if t.item == "wrap_ddp":  # a wrong result that quotes the words: not grouped
            t.message = "wrap_ddp raised NotImplementedError: wrap_ddp is not implemented yet"
    names = [t["name"] for t in gradescope_results(report)["tests"]
             if "unwrap" in t["name"] or "wrap_ddp" in t["name"]]
    assert sorted(names) == ["unwrap_model: not implemented yet", "wrap_ddp: test 0",
                             "wrap_ddp: test 1"]


def test_excerpt_for_hidden_tests_cuts_at_a_word() -> None:
    from autograder.testing import excerpt

    assert excerpt('Unexpected key(s): "bias", "weight", "subbias", "subweight"', 40) == \
        'Unexpected key(s): "bias", "weight"\u2026'


def test_unanswered_questions_are_one_line_not_one_box_each(tmp_path) -> None:
    """Eleven unanswered questions were eleven boxes that pushed the coding part below the
    fold; now one line lists them, and a wrong answer keeps its own box. The line reads the
    cause, not the message: a reworded message stays on it, and a wrong answer whose message
    happens to say "not answered" keeps its box."""
    report = report_of({})
    for t in report.tests:
        if t.part == "multiple_choice":
            t.visibility = "visible"  # answer problems show at once
            if int(t.item[1:]) % 2:
                t.status, t.score, t.cause = "failed", 0.0, "not_answered"
                t.message = "left blank in answers.yaml"
    # Wrong answers (cause answered, invalid_answer) whose message reads like a left-out one.
    q12, q18 = (next(t for t in report.tests if t.item == item) for item in ("q12", "q18"))
    q12.message = "not answered"
    q18.cause, q18.message = "invalid_answer", "not answered"
    view = _part_views(report)[0]
    odd = [f"q{i:02}" for i in range(1, 21, 2)]
    assert [t.item for t in view.unanswered] == odd
    assert [t.item for t in view.failed] == ["q06", "q12", "q18"]  # wrong, not left out
    # Their message, when it says more than "not answered" (no answers file, say), is said
    # once, on the line: it must reach the student.
    assert view.unanswered_line == (f"Not answered (10 questions, 15 points): {', '.join(odd)}"
                                    " (left blank in answers.yaml)")
    write_outputs(report, tmp_path, REPO.schemas)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert md.count("left blank") == 1 and md.count("Not answered (10 questions") == 1
    assert "q01, q03, q05" in html and html.count('class="test"') == 3
    assert "Everything" not in md.split("## Coding")[0]


def test_a_report_round_trips_through_report_json(tmp_path) -> None:
    """What a batch worker sends back and report.json holds reads back as the same Report."""
    late = LateStatus(90.0, 1, 0.1, "1 day late: 10% off")
    report = apply_late(report_of({"wrap_ddp": "stub"}, graded_file=GradedFile("a", "b")),
                        late)
    # The staff's copy: all of it.
    report = write_outputs(report, tmp_path, REPO.schemas, students=False)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written == report.to_json()
    again = type(report).from_json(written)
    assert again == report
    assert again.tests[0] == report.tests[0] and isinstance(again.tests[0], Result)
    # What students see, with results withheld until the due date: it round-trips too.
    due = datetime(2026, 3, 1, tzinfo=timezone.utc)
    report.release = Release(due - timedelta(days=1), due).record(report.tests)
    shown = student_view(report)
    assert shown.release and shown.late
    assert type(report).from_json(json.loads(json.dumps(shown.to_json()))) == shown


def test_a_report_json_of_a_newer_grader_reads_without_its_new_keys(tmp_path) -> None:
    """A gradebook's stored reports may come from a newer grader: keys this version has no field
    for are left out, at every level, and the rest reads back equal."""
    report = write_outputs(report_of({"wrap_ddp": "stub"}, graded_file=GradedFile("a", "b")),
                           tmp_path, REPO.schemas, students=False)
    newer = report.to_json()
    newer["reviewed_by"] = "a TA"
    newer["environment"]["kernel"] = "6.1"
    newer["tests"][0]["attempts"] = 2
    newer["graded_file"]["sha256"] = "0" * 64
    assert type(report).from_json(newer) == report
