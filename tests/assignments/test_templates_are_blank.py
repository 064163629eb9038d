"""The unchanged student template of each assignment (student_templates/, as a student
downloads it: the module, the notebook, the unanswered answers.yml) is graded `blank`, by the
real engine: every coding test fails because the stubs raise NotImplementedError, as the
sandbox reported it (raised into a test, or caught by a scenario), whatever each hidden test's
message says."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from repo_project import REPO

from autograder.batch.submission_status import derive
from autograder.grading.grade import grade_loaded
from autograder.grading.results import Report
from autograder.project.assignment import load_assignment
from autograder.project.config import load_config

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = tuple(load_config(REPO))

pytestmark = pytest.mark.slow  # a grading per assignment, one at a time per core


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("templates")

    def grade_one(name: str) -> dict:
        grade_loaded(ROOT / "student_templates" / name, load_assignment(name, REPO), out / name)
        return json.loads((out / name / "report.json").read_text())

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(ASSIGNMENTS, pool.map(grade_one, ASSIGNMENTS), strict=True))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_unchanged_template_is_blank(graded: dict[str, dict], name: str) -> None:
    report = graded[name]
    ran = [t for t in report["tests"] if t["part"] == "coding" and t["status"] != "excluded"]
    causes = {t["name"]: t["cause"] for t in ran}
    assert ran and set(causes.values()) == {"not_implemented"}, causes
    for t in ran:  # and each says something, even where the stub's message is empty
        assert t["message"].strip() and not t["message"].rstrip().endswith(":"), t
    status = derive(Report.from_json(report))
    assert (status.status, status.flags) == ("blank", []), status
