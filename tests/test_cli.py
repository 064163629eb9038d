"""The `autograder` command, run as a user would run it."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
TOY = ROOT / "tests" / "fixtures" / "toy"


def run(*args: str, cwd: Path | None = None, env: dict | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTOGRADER, *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def copy_of_the_project(tmp_path: Path) -> Path:
    """What an instructor gets by copying the course's folder (no engine inside)."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "grading.yml", course)
    shutil.copytree(ROOT / "assignments", course / "assignments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return course


def test_validate_dp_basics_lists_points_per_function():
    result = run("validate", "dp_basics")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\d+ hidden tests, 70 points: OK$", result.stdout, re.M)
    assert "load_state_dict_flexible" in result.stdout


def test_moving_points_between_functions_is_one_edit_of_grading_yml(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    config.write_text(config.read_text().replace("divide: 3, scale: 2", "divide: 4, scale: 1"))
    result = run("validate", "toy", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert re.search(r"^  divide +4 points", result.stdout, re.M)  # its tests' weights split it
    assert re.search(r"^  scale +1 point\b", result.stdout, re.M)


def test_a_total_the_parts_do_not_add_up_to_is_refused(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    config.write_text(config.read_text().replace("multiple_choice: {points: 2",
                                                 "multiple_choice: {points: 3.5"))
    result = run("validate", "toy", "--config", str(config))
    assert result.returncode == 2
    assert "the parts add up to 11.5 points (multiple_choice 3.5 + coding 8), but its total " \
           "is 10" in result.stderr


def test_a_config_outside_the_root_given_is_refused_not_silently_preferred(tmp_path):
    # A grading.yml's project is the folder holding it (child processes find it again from
    # that folder alone), so --root naming another one is a contradiction, said as such.
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    result = run("validate", "toy", "--root", str(TOY), "--config", str(course / "grading.yml"))
    assert result.returncode == 2
    assert "makes its folder the project, not --root" in result.stderr
    assert run("validate", "toy", "--root", str(course),
               "--config", str(course / "grading.yml")).returncode == 0


def test_grade_prints_scores_and_where_the_reports_are(tmp_path):
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(TOY / "grading.yml"))
    assert result.returncode == 0, result.stderr
    assert "total                 10 / 10" in result.stdout
    assert "isolation:" in result.stdout
    assert (out / "results.json").exists() and (out / "report.html").exists()


def test_grade_of_a_late_submission_prints_the_penalty_between_the_parts_and_the_total(
        tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course, ignore=shutil.ignore_patterns("submissions"))
    config = course / "grading.yml"
    config.write_text(config.read_text().replace(
        "    module: toy\n", '    module: toy\n    due: "2020-01-01T00:00:00Z"\n'
        "    late: {policy: per_day, percent_per_day: 10}\n"))
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(tmp_path / "out"), "--config", str(config),
                 "--submitted-at", "2020-01-02T12:00:00Z")  # two started days late
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    penalty = next(i for i, line in enumerate(lines) if line.startswith("late penalty"))
    assert lines[penalty].split()[2] == "-2" and "20%" in lines[penalty]
    assert lines[penalty + 1].startswith("total") and lines[penalty + 1].split()[1] == "8"


@pytest.mark.parametrize("option, value, said", [
    ("--submitted-at", "yesterday", "'yesterday' is not a date and time"),
    ("--submitted-at", "2026-12-15T10:00:00", "has no time zone"),
])
def test_grade_refuses_a_submission_time_it_cannot_read_before_grading(tmp_path, option, value,
                                                                       said):
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(TOY / "grading.yml"), option, value)
    assert result.returncode == 2 and option in result.stderr and said in result.stderr
    assert not out.exists()


def test_grade_with_an_unknown_assignment_fails_clearly(tmp_path):
    result = run("grade", str(tmp_path), "--assignment", "nope", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "has no assignment 'nope'" in result.stderr


def test_every_command_says_which_project_it_acts_on_first():
    result = run("validate", "-a", "dp_basics", cwd=ROOT / "assignments")
    assert result.stderr.splitlines()[0] == f"project: {ROOT} (found from the working folder)"


def test_a_copy_of_the_project_is_found_from_the_working_folder(tmp_path):
    # A 21st question in the copy only: the copy, not the installed tree, is what is checked.
    course = copy_of_the_project(tmp_path)
    bank = course / "assignments" / "dp_basics" / "questions.yml"
    env = {k: v for k, v in __import__("os").environ.items() if k != "AUTOGRADER_ROOT"}
    bank.write_text(bank.read_text().replace("questions:", "questions:\n  - oops", 1))
    result = run("validate", "-a", "dp_basics", cwd=course / "assignments", env=env)
    assert result.stderr.splitlines()[0] == f"project: {course} (found from the working folder)"
    assert result.returncode == 2 and "questions.yml" in result.stderr
    elsewhere = run("validate", "-a", "dp_basics", "--root", str(ROOT), cwd=course, env=env)
    assert elsewhere.returncode == 0 and f"project: {ROOT} (from --root)" in elsewhere.stderr


def test_every_command_that_takes_an_assignment_takes_it_as_a_option():
    from autograder.cli import main

    without = {name for name, command in main.commands.items()
               if not any("-a" in param.opts for param in command.params)}
    assert without == set()


@pytest.mark.parametrize("command", [["validate"], ["verify-key"], ["gradescope"],
                                     ["release", "--check"], ["generate", "--check"],
                                     ["check", "."], ["check", ".", "--no-tests"]])
def test_every_command_takes_the_assignment_as_a_option(command, tmp_path):
    args = [*command, "-a", "nope"]
    if command[0] == "gradescope":
        args += ["-o", str(tmp_path / "x.zip")]
    result = run(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "nope" in result.stderr and "Traceback" not in result.stderr


def test_check_a_folder_for_the_assignment_named_with_a(tmp_path):
    # `autograder check DIR -a dp_basics` used to say "No such option '-a'".
    folder = tmp_path / "work"
    shutil.copytree(ROOT / "student_templates" / "dp_basics", folder)
    result = run("check", str(folder), "-a", "dp_basics", "--no-tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dp_basics.py" in result.stdout + result.stderr


def test_new_takes_the_name_as_a_option_too(tmp_path):
    course = copy_of_the_project(tmp_path)
    result = run("new", "-a", "hw_two", "--root", str(course))
    assert result.returncode == 0, result.stderr
    assert (course / "assignments" / "hw_two").is_dir()
    both = run("new", "hw_three", "-a", "hw_four", "--root", str(course))
    assert both.returncode == 2 and "two names" in both.stderr


def test_help_lists_the_exit_codes():
    result = run("--help")
    assert "Exit status:" in result.stdout
    for code in ("0 ", "1 ", "2 ", "130 "):
        assert re.search(rf"^\s+{code}", result.stdout, re.M), code


def test_validate_lists_every_problem_in_one_run(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    toy = course / "assignments" / "toy"
    bank = toy / "questions.yml"
    bank.write_text(bank.read_text().replace("answer: [A]\n", "answer: [D]\n", 1)
                    .replace("points: 1\n", "points: 2\n", 1))
    hidden = toy / "tests" / "hidden" / "test_toy.py"
    hidden.write_text(hidden.read_text() + '\n\ndef test_nameless(student):\n    """oops"""\n')
    result = run("validate", "-a", "toy", "--config", str(course / "grading.yml"))
    assert result.returncode == 2
    assert "assignments/toy/questions.yml:" in result.stderr
    assert "at answer: D not among the options" in result.stderr
    assert "the questions add up to 3 points, but grading.yml gives multiple_choice 2" \
        in result.stderr
    assert "assignments/toy/tests/hidden:" in result.stderr and "test_nameless" in result.stderr


# ----------------------------------------------------------------------------- fail closed


def test_grade_refuses_when_the_isolation_asked_for_cannot_start(tmp_path):
    env = {**os.environ, "AUTOGRADER_ISOLATION": "uid"}
    env.pop("AUTOGRADER_UNSAFE_NO_ISOLATION", None)
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(TOY / "grading.yml"), env=env)
    if result.returncode == 0 and "isolation: uid;" in result.stdout:
        pytest.skip("uid mode works on this machine")
    assert result.returncode == 3, (result.stdout, result.stderr)  # its own status
    assert "error: student code cannot be isolated here (AUTOGRADER_ISOLATION=uid" in \
        result.stderr and "To fix:" in result.stderr
    assert "Traceback" not in result.stderr and "total" not in result.stdout
    assert not (out / "results.json").exists() and not (out / "report.json").exists()


def test_grade_with_a_sandbox_that_cannot_start_fails_as_the_graders_error(
        tmp_path, sandbox_cannot_start):
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(sandbox_cannot_start))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "error: the sandbox could not start: the isolation launcher failed: the sandbox " \
           "folder could not be copied into its tmpfs (1 MiB" in result.stderr
    assert "No space left on device" in result.stderr
    # Never the student's failure: no score, no "your code" anything.
    assert "could not start a process for your code" not in result.stdout + result.stderr
    assert "total" not in result.stdout and not (out / "results.json").exists()


def test_grade_without_isolation_only_by_the_unsafe_flag_and_it_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOGRADER_ISOLATION", "AUTOGRADER_UNSAFE_NO_ISOLATION")}
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(TOY / "grading.yml"), "--unsafe-no-isolation",
                 env=env)
    assert result.returncode == 0, result.stderr
    assert "warning: --unsafe-no-isolation" in result.stderr
    assert "isolation: none;" in result.stdout and "NOT isolated, by the unsafe opt-in" in \
        result.stdout
    report = json.loads((out / "report.json").read_text())
    assert any("unsafe opt-in" in p for p in report["environment"]["protections"])


def test_gradescope_out_is_a_zip_or_a_folder_for_it(tmp_path):
    """-o ending in .zip is the zip; any other path is a folder, as every other --out."""
    zipped = run("gradescope", "-a", "dp_basics", "-o", str(tmp_path / "mine.zip"))
    assert zipped.returncode == 0, zipped.stderr
    assert (tmp_path / "mine.zip").is_file()
    folder = run("gradescope", "-a", "dp_basics", "-o", str(tmp_path / "bundles"))
    assert folder.returncode == 0, folder.stderr
    assert (tmp_path / "bundles" / "dp_basics-gradescope.zip").is_file()


def test_an_assignment_named_twice_differently_is_refused(tmp_path):
    result = run("gradescope", "ddp_basics", "-a", "dp_basics", "-o", str(tmp_path))
    assert result.returncode == 2
    assert "name different assignments" in result.stderr and not list(tmp_path.iterdir())
