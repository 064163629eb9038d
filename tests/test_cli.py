"""The `autograder` command, run as a user would run it."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AUTOGRADER = [sys.executable, "-m", "autograder.cli"]
TOY = ROOT / "tests" / "fixtures" / "toy"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTOGRADER, *args], capture_output=True, text=True, timeout=300)


def test_validate_dp_basics_lists_points_per_function():
    result = run("validate", "dp_basics")
    assert result.returncode == 0, result.stderr
    assert "61 hidden tests, 70 points: OK" in result.stdout
    assert "load_state_dict_flexible" in result.stdout


def test_validate_reports_points_that_do_not_add_up(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    config.write_text(config.read_text().replace("divide: 3, scale: 2", "divide: 4, scale: 1"))
    result = run("validate", "toy", "--config", str(config))
    assert result.returncode == 2
    assert "tests of divide add up to 3 points, but grading.yml gives it 4" in result.stderr


def test_grade_prints_scores_and_where_the_reports_are(tmp_path):
    out = tmp_path / "out"
    result = run("grade", str(TOY / "submissions" / "good"), "--assignment", "toy", "--out",
                 str(out), "--config", str(TOY / "grading.yml"))
    assert result.returncode == 0, result.stderr
    assert "total                 10 / 10" in result.stdout
    assert "isolation:" in result.stdout
    assert (out / "results.json").exists() and (out / "report.html").exists()


def test_grade_with_an_unknown_assignment_fails_clearly(tmp_path):
    result = run("grade", str(tmp_path), "--assignment", "nope", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "has no assignment 'nope'" in result.stderr
