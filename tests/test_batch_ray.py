"""The Ray backend of `autograder batch` on a real local Ray instance (this machine only, no mocks).

One Ray instance serves the module (it takes seconds to start); it declares two logical GPUs, so
GPU-aware scheduling is visible on a machine without CUDA (Ray hands out GPU ids and sets
CUDA_VISIBLE_DEVICES; torch still finds no CUDA, so the GPU policy leaves the GPU test out).
The first test starts and stops its own instance, the path `autograder batch --backend ray`
takes without `--address`.
"""

from __future__ import annotations

import _thread
import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from autograder.batch import ray_workers as batch_ray
from autograder.batch.ray_workers import gpus_per_task, run_ray
from autograder.batch.records import GradeOutcome, GradeTask, LateStatus
from autograder.grading.grade import grade_loaded
from autograder.project.assignment import load_assignment

ray = pytest.importorskip("ray")

TOY = Path(__file__).parent / "fixtures" / "toy"
CONFIG = TOY / "grading.yml"
GOOD = TOY / "submissions" / "good"


def task(tmp_path: Path, key: str, submission: Path | str, assignment: str = "toy",
         late: LateStatus | None = None) -> GradeTask:
    return GradeTask(key=key, submission=str(submission), out=str(tmp_path / "ray" / key),
                     assignment=assignment, config_path=str(CONFIG), late=late)


def submission(tmp_path: Path, name: str, source: str | None, answers: str) -> Path:
    folder = tmp_path / "submissions" / name
    folder.mkdir(parents=True)
    if source is not None:
        (folder / "toy.py").write_text(source)
    (folder / "answers.yml").write_text(answers)
    return folder


def by_key(outcomes) -> dict[str, GradeOutcome]:
    outcomes = list(outcomes)
    assert all(isinstance(o, GradeOutcome) for o in outcomes)
    return {o.key: o for o in outcomes}


def test_without_an_address_a_local_instance_is_started_and_shut_down(tmp_path):
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    [outcome] = run_ray([task(tmp_path, "nope", GOOD, assignment="no_such_assignment")], jobs=1)
    assert outcome.report is None
    assert outcome.error.startswith("the grader failed:") and "no_such_assignment" in outcome.error
    assert "ray-node=" in outcome.worker and outcome.worker.endswith("gpu=none")
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    batch_ray._import_ray()  # usage stats off, as run_ray does
    for attempt in (1, 2):  # Ray gives its processes 30 s to start: a busy machine may miss it
        try:
            ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR")
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()


def test_scores_equal_those_of_grade(cluster, tmp_path):
    source = (GOOD / "toy.py").read_text()
    subs = {
        "good": GOOD,
        "wrong_answers": submission(tmp_path, "wrong", source, "sum_shape: B\nfloat_types: [A]\n"),
        "syntax_error": submission(tmp_path, "broken", "def add(a, b)\n", "sum_shape: A\n"),
    }
    late = LateStatus(minutes_late=90, days_late=1, penalty=0.1, message="1 day late: -10%")
    tasks = [task(tmp_path, key, path, late=late if key == "good" else None)
             for key, path in subs.items()]
    # The toy assignment has a GPU test: each job asks for a GPU of its own. The instance is
    # already running: used as it is.
    outcomes = by_key(run_ray(tasks, jobs=2, needs_gpu=True))
    toy = load_assignment("toy", CONFIG)
    assert ray.is_initialized()
    assert set(outcomes) == set(subs)
    for key, path in subs.items():
        outcome = outcomes[key]
        assert outcome.error is None, outcome.error
        assert outcome.worker.endswith(("gpu=0", "gpu=1")), outcome.worker
        assert outcome.seconds > 0
        json.dumps(asdict(outcome))  # plain JSON
        local = asdict(grade_loaded(path, toy, tmp_path / "local" / key,
                                    late=late if key == "good" else None))
        report = outcome.report
        assert (report["score"], report["max_score"]) == (local["score"], local["max_score"])
        assert [p["score"] for p in report["parts"]] == [p["score"] for p in local["parts"]]
        assert {t["name"]: (t["status"], t["score"]) for t in report["tests"]} == \
            {t["name"]: (t["status"], t["score"]) for t in local["tests"]}
        written = json.loads((tmp_path / "ray" / key / "report.json").read_text())
        assert written["score"] == report["score"]
    assert outcomes["good"].report["score"] == 9.0  # 10, less the late penalty
    assert outcomes["wrong_answers"].report["parts"][0]["score"] < 2
    assert outcomes["syntax_error"].report["parts"][1]["score"] == 0


def test_without_gpu_tests_jobs_get_no_gpu(cluster, tmp_path):
    tasks = [task(tmp_path, key, GOOD, assignment="nope") for key in ("a", "b")]
    outcomes = by_key(run_ray(tasks, jobs=2, needs_gpu=False))
    assert all(o.worker.endswith("gpu=none") for o in outcomes.values()), outcomes
    assert all("no assignment 'nope'" in o.error for o in outcomes.values())


def test_gpus_per_task():
    assert gpus_per_task(True, {"CPU": 8, "GPU": 2}) == 1
    assert gpus_per_task(True, {"CPU": 8}) == 0  # no GPU in the cluster: the GPU policy applies
    assert gpus_per_task(False, {"CPU": 8, "GPU": 2}) == 0
    assert list(run_ray([], jobs=2)) == []  # nothing to grade: no Ray started
    with pytest.raises(ValueError):
        list(run_ray([task(Path("/nonexistent"), "x", GOOD)], jobs=0))


def test_a_dead_worker_fails_its_submission_only(cluster, tmp_path):
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def crash_or_grade(task_json: dict) -> dict:  # pickled by value: a test-only task
        if task_json["key"] in ("crash", "raise"):
            with open(attempts / task_json["key"], "a") as f:
                f.write("x")
        if task_json["key"] == "crash":
            os._exit(1)  # as the OOM killer would
        if task_json["key"] == "raise":
            raise RuntimeError("no module named autograder on this node")
        return batch_ray._grade_remote(task_json)

    tasks = [task(tmp_path, "crash", GOOD), task(tmp_path, "raise", GOOD),
             task(tmp_path, "missing", tmp_path / "no-such-folder")]
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, batch_ray._remote(ray, crash_or_grade, 0)))
    assert set(outcomes) == {"crash", "raise", "missing"}
    crash = outcomes["crash"]
    assert crash.report is None and crash.worker == "ray"
    assert crash.error.startswith("grading on Ray failed: WorkerCrashedError")
    assert "retried once" in crash.error
    assert (attempts / "crash").read_text() == "xx"  # max_retries=1
    raised = outcomes["raise"]  # an exception in the task: not retried, its last line shown
    assert raised.error.startswith("grading on Ray failed: RayTaskError"), raised.error
    assert raised.error.endswith("RuntimeError: no module named autograder on this node")
    assert (attempts / "raise").read_text() == "x" and "retried" not in raised.error
    missing = outcomes["missing"]  # graded (no files is the student's problem: 0), not an error
    assert missing.error is None and missing.report["score"] == 0


def test_ctrl_c_cancels_the_tasks_in_flight(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def nap(task_json: dict) -> dict:
        (marks / task_json["key"]).touch()
        for _ in range(600):  # short sleeps, like grading's own 1 s polls: a cancel lands
            time.sleep(0.2)
        raise AssertionError("not cancelled")

    def ctrl_c_once_both_run() -> None:  # Ctrl-C during ray.wait, with two tasks running
        deadline = time.monotonic() + 60
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        _thread.interrupt_main()

    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b", "c")]
    threading.Thread(target=ctrl_c_once_both_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        list(batch_ray._collect(ray, tasks, 2, batch_ray._remote(ray, nap, 0)))
    # Both CPUs come free: the two naps in flight were cancelled, the third never started.
    whole_node = ray.remote(lambda: "free").options(num_cpus=2)
    assert ray.get(whole_node.remote(), timeout=60) == "free"
    assert sorted(p.name for p in marks.iterdir()) == ["a", "b"]

