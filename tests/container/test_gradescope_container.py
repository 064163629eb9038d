"""Each assignment's Gradescope bundle, built and run as Gradescope does, in a real container.

The image: the stand-in base (conftest), the zip extracted into /autograder/source, setup.sh run
once as root (autograder.gradescope.container.build_image). Every run is a fresh container with
Gradescope's defaults: 768 MB, half a CPU, no network, Docker's default capabilities and seccomp
profile, as root; there the grader gets `uid` isolation (namespaces are refused). The
self-hosted recipe adds `--cap-add SYS_ADMIN`, where each sandbox gets its own namespaces.
Gradings run once each (the `graded` cache) and take about 15 s apiece.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest
import yaml
from repo_project import REPO

from autograder.gradescope.container import GRADESCOPE, SELF_HOSTED, ContainerRun, Limits
from autograder.grading.late import results_shown_at
from autograder.project.assignment import load_assignment
from autograder.project.config import load_config
from autograder.release.gradescope_bundle import FALLBACK_MESSAGE

pytestmark = pytest.mark.deployment

# Where the grader can isolate neither way: no user to switch to, no namespaces to make.
NEITHER = Limits("no isolation possible", docker_args=("--cap-drop", "SETUID",
                                                       "--cap-drop", "SETGID"))
# The explicit opt-in, named unsafe: the calibration that shows the hostile submission is real.
UNSAFE = Limits("unsafe opt-in", docker_args=("-e", "AUTOGRADER_UNSAFE_NO_ISOLATION=1"))

ASSIGNMENTS = tuple(load_config(REPO))


@pytest.fixture(scope="session")
def graded(image, submission):
    """graded(name, kind, limits): one container run, cached for the session."""
    runs: dict[tuple[str, str, str], ContainerRun] = {}

    def get(name: str, kind: str, limits: Limits = GRADESCOPE) -> ContainerRun:
        key = (name, kind, limits.name)
        if key not in runs:
            from autograder.gradescope.container import run_submission

            runs[key] = run_submission(image(name), submission(name, kind), limits)
            print(f"\n{name} {kind}: {runs[key].summary()}")
        return runs[key]
    return get


def full_marks(name: str) -> float:
    """What the reference with the full key shows the student now: all of it once the
    multiple choice is shown (after the due date and the late period), the coding part before
    (autograder.grading.visibility)."""
    config = load_assignment(name, REPO).config
    shown = results_shown_at(config, None)
    if shown is None or datetime.now(timezone.utc) < shown:
        return config.coding.points
    return config.multiple_choice.points + config.coding.points


def said(run: ContainerRun) -> str:
    return f"(run_autograder said:\n{run.stdout[-3000:]})"


def assert_graded_cleanly(run: ContainerRun) -> None:
    """Within Gradescope's limits, and nothing changed or left behind once grading ended."""
    assert run.exit_code == 0, said(run)
    assert run.peak_memory_bytes is not None and run.seconds < 600
    assert run.problems() == [], said(run)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_reference_scores_full_marks_in_uid_isolation(graded, name):
    run = graded(name, "reference")
    assert run.score == full_marks(name), said(run)
    assert run.isolation == "uid", said(run)
    assert run.status == "ok", said(run)
    assert_graded_cleanly(run)


def test_after_the_due_date_the_regrade_shows_the_whole_score(image, submission, tmp_path):
    """The regrade after the due date (Gradescope's "Regrade all submissions"): the same bundle,
    its grading.yml's due date in the past, shows the multiple choice too, right or wrong per
    question, and the reference gets every point."""
    config = yaml.safe_load(REPO.config.read_text())
    config["assignments"]["dp_basics"]["due"] = "2026-01-05T23:59:00-05:00"
    past = tmp_path / "grading.yml"
    past.write_text(yaml.safe_dump(config))
    regrade = Limits("gradescope, after the due date",
                     docker_args=("-v", f"{past}:/autograder/source/grading.yml:ro"))
    from autograder.gradescope.container import run_submission

    run = run_submission(image("dp_basics"), submission("dp_basics", "reference"), regrade)
    print(f"\ndp_basics reference after the due date: {run.summary()}")
    assignment = load_assignment("dp_basics", REPO).config
    assert run.score == assignment.multiple_choice.points + assignment.coding.points, said(run)
    questions = [t for t in run.results["tests"] if t.get("visibility") == "after_due_date"]
    assert questions and all(t["status"] == "passed" for t in questions), said(run)
    assert run.isolation == "uid" and run.status == "ok", said(run)
    assert_graded_cleanly(run)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_blank_template_scores_nothing(graded, name):
    run = graded(name, "blank")
    assert run.score == 0, said(run)
    assert run.results["tests"], "a blank submission still gets every test, failed"
    assert_graded_cleanly(run)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_self_hosted_with_sys_admin_gives_each_sandbox_its_namespaces(graded, name):
    run = graded(name, "reference", SELF_HOSTED)
    assert run.score == full_marks(name), said(run)
    assert run.isolation == "namespaces", said(run)
    assert_graded_cleanly(run)


@pytest.mark.parametrize("limits", [GRADESCOPE, SELF_HOSTED], ids=lambda limits: limits.name)
def test_a_hostile_submission_gets_nothing_and_changes_nothing(graded, limits):
    """It forges results.json, appends to run_autograder, reads the key, leaves its cgroups and
    leaves a detached rewriter: it scores 0, is flagged for staff, and the grader's results.json
    and the bundle's run_autograder are what stays."""
    run = graded("dp_basics", "hostile", limits)
    assert run.score == 0, said(run)
    assert "FORGED" not in json.dumps(run.results)
    assert run.status is not None and run.status.startswith("flagged"), said(run)
    assert "flagged" not in json.dumps(run.results), "flags are for staff, not the student"
    assert_graded_cleanly(run)


def test_sabotage_of_its_own_later_sandboxes_is_the_students_not_the_graders(graded):
    """The reference, with a detached process that kills every later zygote of its uid and a hold
    on the uid's process limit (found by a red-team review: it turned the grading into a
    grader_error, the student's whole grade thrown away and 'not a verdict on your work'). The
    grader clears the uid before it starts a new zygote: the tests it disturbed are the
    student's, flagged, and the rest is graded. (A warm zygote starts again in milliseconds,
    so often no test is lost: the score may be full.)"""
    run = graded("dp_basics", "saboteur")
    assert run.results["tests"] and FALLBACK_MESSAGE not in run.results["output"], said(run)
    assert run.status is not None and run.status.startswith("flagged"), said(run)
    assert "were stopped" in run.status, said(run)
    assert 30 < run.score <= full_marks("dp_basics"), said(run)
    assert_graded_cleanly(run)


def test_calibration_the_same_submission_unisolated_forges_leaks_and_stays(graded):
    """The attacks above are real: graded with the explicit unsafe opt-in, as root with no
    isolation, the same code replaces results.json (with the key in it), tampers with
    run_autograder, and its rewriter outlives grading."""
    run = graded("dp_basics", "hostile", UNSAFE)
    assert run.isolation == "none"
    assert run.run_autograder_changed
    assert run.results_rewritten or run.leftover
    forged = json.dumps(run.results)
    assert "FORGED" in forged and "KEY " in forged and "questions:" in forged, said(run)


def test_where_neither_isolation_works_root_refuses_to_grade(graded):
    """Root without namespaces and without a user to switch to: no grading, a results.json that
    says the autograder failed, and stdout that says why and how to fix it."""
    run = graded("dp_basics", "reference", NEITHER)
    assert run.exit_code == 0 and not run.timed_out, said(run)
    assert run.score == 0
    assert run.results["tests"] == []
    assert FALLBACK_MESSAGE in run.results["output"]
    assert "the autograder is misconfigured" in run.results["output"], said(run)
    assert "uid" not in run.results["output"], "the details are for staff"
    assert "SYS_ADMIN" in run.stdout, said(run)  # how to fix it, for the instructor
    assert run.status is not None and run.status.startswith("grader_error"), said(run)
    assert not run.results_rewritten and not run.run_autograder_changed


def test_instructors_try_a_bundle_from_the_command_line(image, submission, tmp_path):
    """`autograder gradescope --try`: the zip, the image (cached: the same content as above),
    one line per submission, exit 0 when nothing is wrong."""
    image("dp_basics")  # built once for the session; the CLI finds it by content
    folder = submission("dp_basics", "reference")
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "gradescope", "dp_basics",
                           "--out", str(tmp_path / "dp_basics-gradescope.zip"),
                           "--try", str(folder)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith(folder.name))
    assert f"score {full_marks('dp_basics'):g} in" in line, line
    assert "isolation uid" in line and "status ok" in line, line
    assert "problem:" not in done.stdout
