"""`autograder batch --backend ray` on a real two-node Ray cluster whose worker node shares no
folder with the driver: the export, the output folder and the project (grading.yml, assignment,
schemas, even the repository's own assignments/ and tests/) are empty read-only file systems in
the worker node's mount namespace. Every submission is graded there, by warm actors, with the
scores `autograder grade` gives on this machine.

The cluster runs in namespaces of its own (tests/batch/ray_two_nodes.py): loopback-only networking,
and a PID namespace that takes every Ray process with it when the harness ends. It needs root
or unprivileged user namespaces, as the sandboxes' own isolation does.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.project.paths import Project

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # (first in parallel runs, one unit with the other Ray file)

HERE = Path(__file__).parent
REPO = HERE.parents[1]
TOY = REPO / "tests" / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
ANSWERS = (TOY / "submissions" / "good" / "answers.yml").read_text()
HOSTILE = GOOD.replace("def add(a, b):\n", """def add(a, b):
    import os
    for attempt in (lambda: open("/etc/autograder-was-here", "w"),
                    lambda: os.kill(os.getppid(), 9)):
        try:
            attempt()
        except Exception:
            pass
""")


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _class(root: Path) -> Path:
    """Folders of several kinds: plain, an upload zip, one nested folder with a link in it."""
    students = {"alice": GOOD, "bob": "def add(a, b):\n    return a - b\n",
                "carol": "def add(a, b) return a + b\n", "mallory": HOSTILE}
    for name, source in students.items():
        (root / name).mkdir(parents=True)
        (root / name / "toy.py").write_text(source)
        (root / name / "answers.yml").write_text(ANSWERS)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("work/toy.py", GOOD.replace("return x * 2", "return x * 3"))
        archive.writestr("work/answers.yml", "sum_shape: B\n")
    (root / "zoe").mkdir()
    (root / "zoe" / "upload.zip").write_bytes(buffer.getvalue())
    nested = root / "nina" / "my work"
    nested.mkdir(parents=True)
    (nested / "toy (1).py").write_text(GOOD)
    (nested / "answers.yml").write_text(ANSWERS)
    (nested / "notes.txt").symlink_to("/etc/hostname")
    return root


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    if not _can_unshare():
        pytest.skip("needs mount, PID and network namespaces (root or user namespaces)")
    driver = tmp_path_factory.mktemp("driver")  # everything of the driver's: hidden there
    project = driver / "project"
    shutil.copytree(TOY, project, ignore=shutil.ignore_patterns("submissions"))
    export = _class(driver / "export")
    out = driver / "out"
    # Short: Ray's socket paths under it must stay under 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="agray-"))
    result_file = temp / "result.json"
    hidden_repo = [REPO / name for name in ("assignments", "schemas", "tests")]
    probes = [project / "grading.yml", export / "alice" / "toy.py", REPO / "grading.yml",
              REPO / "assignments" / "dp_basics" / "questions.yml", HERE / "test_batch.py"]
    spec = {
        "hide": [str(driver), *map(str, hidden_repo)],
        "hide_files": [str(REPO / "grading.yml")],
        "probe": [str(p) for p in probes],
        "temp": str(temp),
        "result": str(result_file),
        "batch": [str(Path(sys.executable).parent / "autograder"), "--config",
                  str(project / "grading.yml"), "batch", str(export), "-a", "toy",
                  "--out", str(out), "--backend", "ray", "--address", "127.0.0.1:6379",
                  "--jobs", "2"],
    }
    (temp / "spec.json").write_text(json.dumps(spec))
    try:
        subprocess.run(
            ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc",
             "--propagation", "private", sys.executable, str(HERE / "ray_two_nodes.py"),
             str(temp / "spec.json")], cwd=REPO, timeout=900, check=False)
        result = json.loads(result_file.read_text())
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert "error" not in result, json.dumps(result, indent=1)
    return result, export, out, project


def test_the_worker_node_cannot_see_the_drivers_folders(cluster_run):
    result, *_ = cluster_run
    assert result["driver_sees"] == [True] * 5
    assert result["worker_node_sees"], "no process of the worker node was found"
    for pid, seen in result["worker_node_sees"].items():
        assert seen == [False] * 5, (pid, seen)
    # The graders themselves (Ray actors), looked at while they graded.
    assert len(result["actors_see"]) >= 2, result["actors_see"]
    for pid, seen in result["actors_see"].items():
        assert seen == [False] * 5, (pid, seen)


def test_an_export_grades_on_the_worker_node_with_the_scores_of_grade(cluster_run, tmp_path):
    result, export, out, project = cluster_run
    batch = next(s for s in result["steps"] if s["name"] == "batch")
    assert batch["returncode"] == 0, result["batch_stdout"] + result["batch_stderr"]
    assert "6 submissions: 6 graded (1 flagged), 0 grader error(s)" in result["batch_stdout"]
    with sqlite3.connect(out / "gradebook.sqlite") as db:
        rows = db.execute("SELECT submission_key, error, worker, status FROM runs").fetchall()
    assert len(rows) == 6
    node = result["worker_node_id"][:12]
    assert node
    for key, error, worker, _status in rows:
        assert error is None, (key, error)
        assert f"ray-node={node}" in worker, (key, worker)  # graded on the hidden node
    statuses = {key: json.loads(status)["status"] for key, _, _, status in rows}
    assert statuses["mallory"] == "flagged"  # the sandbox's events came back as content
    assert statuses["carol"] == "not_importable"
    for student in ("alice", "bob", "carol", "mallory", "zoe", "nina"):
        submission = export / student
        if student == "zoe":
            submission = submission / "upload.zip"
        local = grade(submission, "toy", tmp_path / student, Project.at(project, "the course"))
        ray = json.loads((out / "reports" / student / "report.json").read_text())
        assert (ray["score"], ray["max_score"]) == (local.score, local.max_score), student
        assert {t["name"]: (t["status"], t["score"]) for t in ray["tests"]} == \
            {t.name: (t.status, t.score) for t in local.tests}, student
        assert ray["warnings"] == local.warnings, student
        assert ray.get("graded_file") == local.to_json()["graded_file"], student
    nina = json.loads((out / "reports" / "nina" / "report.json").read_text())
    assert any("my work" in w for w in nina["warnings"])  # the nested folder, found there
    assert json.loads((out / "reports" / "alice" / "report.json").read_text())["score"] == 10
