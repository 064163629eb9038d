"""The Ray backend of `autograder batch` on a real local Ray instance (this machine only, no mocks).

One Ray instance serves most of the module (it takes seconds to start); it declares two logical
GPUs, so GPU-aware scheduling is visible on a machine without CUDA (Ray hands out GPU ids and
sets CUDA_VISIBLE_DEVICES; torch still finds no CUDA, so the GPU policy leaves the GPU test out).
The first test starts and stops its own instance, the path `autograder batch --backend ray`
takes without `--address`, and checks that it listens on loopback only and wants its token.
tests/batch/test_ray_cluster.py grades on a worker node that cannot see the driver's folders.
"""

from __future__ import annotations

import _thread
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from sandbox_view import seen_in, snooping_source

from autograder.batch import ray_grader
from autograder.batch import ray_workers as batch_ray
from autograder.batch.bundles import pack_assignment
from autograder.batch.listeners import descendants, listeners
from autograder.batch.ray_grader import RayGrader
from autograder.batch.ray_workers import gpus_per_task, run_ray
from autograder.batch.records import GradeOutcome, GradeTask
from autograder.grading.grade import grade_loaded
from autograder.grading.late import SubmissionDates
from autograder.project.assignment import load_assignment
from autograder.project.late_policy import parse_timestamp
from autograder.project.paths import Project

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # (first in parallel runs, one unit with the other Ray file)

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
CONFIG = TOY / "grading.yml"
PROJECT = Project.of_config(CONFIG)
GOOD = TOY / "submissions" / "good"


def task(tmp_path: Path, key: str, submission: Path | str, dates: SubmissionDates | None = None,
         config: Path = CONFIG) -> GradeTask:
    return GradeTask(key=key, submission=str(submission), out=str(tmp_path / "ray" / key),
                     assignment="toy", config_path=str(config), dates=dates)


def gone(pid: str, within: float = 30) -> bool:
    """True once process `pid` has ended (a zombie counts): a killed Ray worker exits
    asynchronously, seconds later on a loaded machine."""
    stat = Path(f"/proc/{pid.strip()}/stat")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.2)
    return False


def late_course(tmp_path: Path) -> Path:
    """The toy course with a due date (long past) and 10% off per started day."""
    root = tmp_path / "late_course"
    shutil.copytree(TOY, root)
    config = root / "grading.yml"
    config.write_text(config.read_text().replace(
        "    module: toy\n", '    module: toy\n    due: "2020-01-01T00:00:00Z"\n'
        "    late: {policy: per_day, percent_per_day: 10}\n"))
    return config


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


def test_a_local_instance_listens_on_loopback_only_wants_a_fresh_token_and_is_shut_down(
        tmp_path, monkeypatch):
    """The instance `run_ray` starts without an address. In `uid` mode sandboxes share this
    machine's loopback: only the token keeps them from Ray's GCS (a red-team review rewrote the
    pickled actor class there with authentication off). The TA's environment turning it off, or
    naming another token, changes nothing."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 64)
    seen: list = []
    ss_lines: list[str] = []
    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b")]
    shared = Path("/tmp/ray")  # every user may write there (see start_local)
    sessions = set(shared.iterdir()) if shared.is_dir() else set()
    private: set[str] = set()
    for outcome in run_ray(tasks, jobs=1):
        if not seen:  # while the instance, its actor and the runner server are all up
            pids = descendants(os.getpid())
            seen = listeners(pids)
            private = {m.group(0) for pid in pids for arg in _cmdline(pid)
                       if (m := re.search(r"/[^\s=:]*/agray-[^/\s]+", arg))}
            if shutil.which("ss"):
                table = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
                ss_lines = [line for line in table.splitlines()
                            if any(f"pid={pid}," in line for pid in pids)]
            assert len(private) == 1, private  # Ray's processes name one private folder
            _wants_a_fresh_token(Path(next(iter(private))), pids)
        assert outcome.error is None, outcome.error
        assert outcome.report.score == 10
    assert not ray.is_initialized()
    # Its session lived in a private folder (0700), now removed; nothing new in /tmp/ray.
    assert not any(Path(folder).exists() for folder in private)
    assert (set(shared.iterdir()) if shared.is_dir() else set()) <= sessions
    names = {s.process for s in seen}
    assert {"gcs_server", "raylet"} <= names, seen  # Ray's own servers were looked at
    assert [str(s) for s in seen if not s.loopback] == []
    if ss_lines:  # the same from `ss`: every listener of Ray's processes on 127.0.0.0/8
        local = [line.split()[3] for line in ss_lines]
        assert all(a.startswith(("127.", "[::ffff:127.", "[::1]")) for a in local), local
    assert (os.environ["RAY_AUTH_MODE"], os.environ["RAY_AUTH_TOKEN"]) == ("disabled", "0" * 64)
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ


def _wants_a_fresh_token(folder: Path, pids: list[int]) -> None:
    """What a running local instance in `folder` (its processes `pids`) asks of a client."""
    address = ray.get_runtime_context().gcs_address
    token_file = folder / "auth_token"
    token = token_file.read_text()
    assert len(token) == 64 and token != "0" * 64
    assert token_file.stat().st_mode & 0o777 == 0o600
    # Ray makes its own folders 0777: the session is inside ours, which stays 0700.
    assert folder.stat().st_mode & 0o777 == 0o700
    sessions = list((folder / "ray").glob("session_2*"))
    assert sessions and all(p.resolve().is_relative_to(folder) for p in sessions)
    # Without the token, or with another one, a client is refused; with it, it gets in.
    assert _client(address, {"RAY_AUTH_MODE": "disabled"}) == "refused"
    assert _client(address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}) == "refused"
    assert _client(address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}) == "connected"
    # Command lines are world-readable (/proc/PID/cmdline): the token is on none of them.
    assert len(pids) > 2 and not [p for p in pids if token in " ".join(_cmdline(p))]
    if os.geteuid() == 0:  # another user (a sandbox's uid in `uid` mode) cannot read it
        other = subprocess.run(["cat", str(token_file)], user=65534, group=65534,
                               extra_groups=[], capture_output=True, text=True)
        assert other.returncode != 0 and "Permission denied" in other.stderr


def test_listeners_are_read_from_proc():
    with socket.socket() as inside, socket.socket() as outside:
        inside.bind(("127.0.0.1", 0))
        inside.listen()
        outside.bind(("0.0.0.0", 0))  # listens only; nothing is sent anywhere
        outside.listen()
        found = {s.port: s.loopback for s in listeners([os.getpid()])}
        assert found[inside.getsockname()[1]] is True
        assert found[outside.getsockname()[1]] is False
        with pytest.raises(RuntimeError, match="listens beyond this machine"):
            batch_ray.check_loopback_only(ray)


def _client(address: str, env: dict[str, str]) -> str:
    """What a Ray client with `env` (and no home folder) gets from the GCS at `address`."""
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", **env}
    said = subprocess.run([sys.executable, "-I", "-c", batch_ray._NO_TOKEN_CLIENT, address],
                          env=env, capture_output=True, text=True, timeout=120).stdout
    return (said.strip().splitlines() or ["nothing"])[-1]


def test_an_instance_without_authentication_is_refused(monkeypatch, tmp_path):
    """What check_token_required (run by start_local) says of an instance that lets anyone in:
    one started as the TA's environment asks, authentication off."""
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    batch_ray._import_ray()
    for name in batch_ray.AUTH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    batch_ray._reload_auth_settings()
    folder = tempfile.mkdtemp(prefix="agray-")
    try:
        batch_ray.init_on_loopback(ray, num_cpus=1, _temp_dir=folder, include_dashboard=False,
                                   log_to_driver=False, logging_level="ERROR")
        batch_ray.check_loopback_only(ray)  # open to this machine only, and briefly
        with pytest.raises(RuntimeError, match="accepts clients without its token.*--backend"):
            batch_ray.check_token_required(ray)
    finally:
        ray.shutdown()
        monkeypatch.undo()
        batch_ray._reload_auth_settings()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    batch_ray._import_ray()  # usage stats off, as run_ray does
    for attempt in (1, 2):  # Ray gives its processes 30 s to start: a busy machine may miss it
        try:
            local = batch_ray.start_local(ray, 2, num_gpus=2, include_dashboard=False,
                                          log_to_driver=False, logging_level="ERROR")
            break
        except Exception:
            if attempt == 2:
                raise
    yield local
    local.stop(ray)


def test_scores_equal_those_of_grade(cluster, tmp_path):
    source = (GOOD / "toy.py").read_text()
    subs = {
        "good": GOOD,
        "wrong_answers": submission(tmp_path, "wrong", source, "sum_shape: B\nfloat_types: [A]\n"),
        "syntax_error": submission(tmp_path, "broken", "def add(a, b)\n", "sum_shape: A\n"),
        "missing": tmp_path / "no-such-folder",  # not packed: an error outcome of its own
    }
    config = late_course(tmp_path)
    late = SubmissionDates(created_at=parse_timestamp("2020-01-01T01:30:00Z"))  # 1 day: -10%
    tasks = [task(tmp_path, key, path, dates=late if key == "good" else None, config=config)
             for key, path in subs.items()]
    # The toy assignment has a GPU test: each actor holds a GPU of its own. The instance is
    # already running: used as it is.
    outcomes = by_key(run_ray(tasks, jobs=2, needs_gpu=True))
    toy = load_assignment("toy", Project.of_config(config))
    assert ray.is_initialized()
    assert set(outcomes) == set(subs)
    missing = outcomes.pop("missing")
    assert missing.report is None and missing.error.startswith("not sent to Ray: ")
    for key, outcome in outcomes.items():
        assert outcome.error is None, outcome.error
        assert outcome.worker.endswith(("gpu=0", "gpu=1")), outcome.worker
        assert outcome.seconds > 0
        assert GradeOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome
        local = grade_loaded(subs[key], toy, tmp_path / "local" / key,
                             dates=late if key == "good" else None)
        report = outcome.report
        assert (report.score, report.max_score) == (local.score, local.max_score)
        assert [p.score for p in report.parts] == [p.score for p in local.parts]
        assert {t.name: (t.status, t.score) for t in report.tests} == \
            {t.name: (t.status, t.score) for t in local.tests}
        assert report.warnings == local.warnings
        # The reports came back as content and were written here, by the driver.
        written = json.loads((tmp_path / "ray" / key / "report.json").read_text())
        assert written["score"] == report.score
        assert sorted(p.name for p in (tmp_path / "ray" / key).iterdir()) == \
            ["report.html", "report.json", "report.md", "results.json"]
    assert outcomes["good"].report.score == 9.0  # 10, less the late penalty
    assert outcomes["wrong_answers"].report.parts[0].score < 2
    assert outcomes["syntax_error"].report.parts[1].score == 0


def test_actors_stay_warm_and_runners_are_fresh(cluster, tmp_path):
    """One actor grades several submissions in turn (the same worker process), each in a new
    runner: pytest and torch are not imported again, so later ones are quick."""
    tasks = [task(tmp_path, f"s{i}", GOOD) for i in range(3)]
    before = set(Path(tempfile.gettempdir()).glob("autograder-ray-*"))
    outcomes = list(run_ray(tasks, jobs=1, needs_gpu=False))
    # The actor's folders (its bundle, each submission's) are gone with it.
    assert set(Path(tempfile.gettempdir()).glob("autograder-ray-*")) <= before
    assert [o.error for o in outcomes] == [None] * 3
    assert len({o.worker for o in outcomes}) == 1, [o.worker for o in outcomes]
    assert all(o.worker.endswith("gpu=none") for o in outcomes)
    # The first grading waits for the runner server's imports (about 2 s here); the later ones,
    # forked warm, do not: compared side by side, not against a clock a loaded machine moves.
    assert min(o.seconds for o in outcomes[1:]) < outcomes[0].seconds, \
        [o.seconds for o in outcomes]


def test_a_worker_that_cannot_grade_says_why_for_each_submission(cluster, tmp_path):
    bundle = pack_assignment("toy", PROJECT)
    bundle["grader_version"] = "0.0.0+someone-elses"  # as a node with another install
    actor = ray.remote(RayGrader).options(num_cpus=1, max_restarts=0)
    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b", "c")]
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, actor, ray.put(bundle)))
    assert set(outcomes) == {"a", "b", "c"}
    for outcome in outcomes.values():
        assert outcome.report is None
        assert "not the driver's (0.0.0+someone-elses)" in outcome.error, outcome.error


def test_a_dead_actor_is_replaced_and_its_submission_retried_once(cluster, tmp_path):
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    class Crashing(RayGrader):  # pickled by value: a test-only actor
        def grade(self, request: dict) -> dict:
            key = request["key"]
            with open(attempts / key, "a") as f:
                f.write("x")
            tries = len((attempts / key).read_text())
            if key == "always" or (key == "once" and tries == 1):
                os._exit(1)  # as the OOM killer would
            return super().grade(request)

    actor = ray.remote(Crashing).options(num_cpus=1, max_restarts=0, max_task_retries=0)
    tasks = [task(tmp_path, key, GOOD) for key in ("always", "once", "fine")]
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, actor,
                                         ray.put(pack_assignment("toy", PROJECT))))
    assert set(outcomes) == {"always", "once", "fine"}
    always = outcomes["always"]
    assert always.report is None and always.worker == "ray"
    assert "its Ray worker died" in always.error and "twice (retried once" in always.error, \
        always.error
    assert (attempts / "always").read_text() == "xx"  # retried once, on a new actor
    assert (attempts / "once").read_text() == "xx"
    assert outcomes["once"].error is None and outcomes["once"].report.score == 10
    assert outcomes["fine"].error is None and outcomes["fine"].report.score == 10
    assert (tmp_path / "ray" / "once" / "report.json").is_file()
    # A killed actor cleans nothing up; the next actor on the node removes what it left.
    left = [d for d in Path(tempfile.gettempdir()).glob("autograder-ray-*")
            if not Path(f"/proc/{d.name.split('-')[2]}").exists()]
    list(batch_ray._collect(ray, [task(tmp_path, "next", GOOD)], 1,
                            ray.remote(RayGrader).options(num_cpus=1),
                            ray.put(pack_assignment("toy", PROJECT))))
    assert not [d for d in left if d.exists()]


def test_folders_of_dead_workers_are_removed_and_no_others(tmp_path):
    root = Path(tempfile.gettempdir())
    dead = root / "autograder-ray-999999999-abc"  # above any pid_max: no such process
    alive = root / f"autograder-ray-{os.getpid()}-abc"
    other = root / "autograder-ray-notapid"
    for folder in (dead, alive, other):
        (folder / "assignments").mkdir(parents=True)
    try:
        ray_grader._remove_left_by_dead_workers()
        assert not dead.exists() and alive.is_dir() and other.is_dir()
    finally:
        for folder in (dead, alive, other):
            shutil.rmtree(folder, ignore_errors=True)
    # The actors were killed at the end: both CPUs are free again.
    whole_node = ray.remote(lambda: "free").options(num_cpus=2)
    assert ray.get(whole_node.remote(), timeout=60) == "free"


def test_ctrl_c_stops_the_actors_grading_at_once(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    class Napping(RayGrader):
        def grade(self, request: dict) -> dict:
            (marks / request["key"]).touch()
            for _ in range(600):  # short sleeps, like grading's own 1 s polls
                time.sleep(0.2)
            raise AssertionError("not stopped")

    def ctrl_c_once_both_run() -> None:  # Ctrl-C during ray.wait, with two gradings running
        deadline = time.monotonic() + 120
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        _thread.interrupt_main()

    actor = ray.remote(Napping).options(num_cpus=1, max_restarts=0)
    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b", "c")]
    threading.Thread(target=ctrl_c_once_both_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        list(batch_ray._collect(ray, tasks, 2, actor, ray.put(pack_assignment("toy", PROJECT))))
    stopped = time.time()
    # Both CPUs come free: the two actors were stopped, the third submission never started.
    whole_node = ray.remote(lambda: "free").options(num_cpus=2)
    assert ray.get(whole_node.remote(), timeout=60) == "free"
    assert sorted(p.name for p in marks.iterdir()) == ["a", "b"]
    # Counted from both gradings running: about 1 s here (waiting on a cancel took 10 s more).
    assert stopped - max(p.stat().st_mtime for p in marks.iterdir()) < 8


def test_actors_that_nothing_can_schedule_fail_the_rest_within_the_start_up_limit(cluster,
                                                                                  tmp_path):
    """An actor asking for what no node has (a GPU type, a node lost) is never scheduled: the
    batch stops waiting after the start-up limit and says what each actor asks for."""
    actor = ray.remote(RayGrader).options(num_cpus=1, resources={"no_such_node": 1},
                                          max_restarts=0, max_task_retries=0)
    limits = batch_ray.Deadlines(grading=60, start=3, asks={"CPU": 1, "no_such_node": 1})
    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b", "c")]
    started = time.monotonic()
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, actor,
                                         ray.put(pack_assignment("toy", PROJECT)), 1, limits))
    assert time.monotonic() - started < 30
    assert set(outcomes) == {"a", "b", "c"}
    for outcome in outcomes.values():
        assert outcome.report is None and outcome.worker == "ray"
        assert "no Ray worker could be set up within 3 s" in outcome.error, outcome.error
        assert "asks for 1 CPU, 1 no_such_node and the cluster has 2 CPU, 0 no_such_node" \
            in outcome.error, outcome.error
    whole_node = ray.remote(lambda: "free").options(num_cpus=2)  # nothing holds a CPU
    assert ray.get(whole_node.remote(), timeout=60) == "free"


def test_an_actor_not_set_up_in_time_is_replaced_and_its_submission_retried(cluster,
                                                                             tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    class SlowToStart(RayGrader):  # the first actor to start never gets set up
        def __init__(self, bundle: dict, share: int = 1) -> None:
            try:
                (marks / "slow").mkdir()
            except FileExistsError:
                super().__init__(bundle, share)
                return
            (marks / "slow" / "pid").write_text(str(os.getpid()))
            time.sleep(600)

    actor = ray.remote(SlowToStart).options(num_cpus=1, max_restarts=0, max_task_retries=0)
    limits = batch_ray.Deadlines(grading=120, start=30)
    tasks = [task(tmp_path, key, GOOD) for key in ("a", "b")]
    started = time.monotonic()
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, actor,
                                         ray.put(pack_assignment("toy", PROJECT)), 1, limits))
    assert 30 <= time.monotonic() - started < 150
    for key in ("a", "b"):  # the other actor was set up: the stuck one's submission was retried
        assert outcomes[key].error is None and outcomes[key].report.score == 10
    assert gone((marks / "slow" / "pid").read_text())  # killed


def test_a_grading_past_its_deadline_is_stopped_and_the_batch_goes_on(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    class Hanging(RayGrader):  # one grading that never ends (a node that hangs, say)
        def grade(self, request: dict) -> dict:
            if request["key"] != "hangs":
                return super().grade(request)
            (marks / "started").write_text(str(os.getpid()))
            for _ in range(3000):
                time.sleep(0.2)
            raise AssertionError("not stopped")

    actor = ray.remote(Hanging).options(num_cpus=1, max_restarts=0, max_task_retries=0)
    limits = batch_ray.Deadlines(grading=20, start=120, basis="a test's 20 s")
    tasks = [task(tmp_path, key, GOOD) for key in ("hangs", "fine", "after")]
    started = time.monotonic()
    outcomes = by_key(batch_ray._collect(ray, tasks, 2, actor,
                                         ray.put(pack_assignment("toy", PROJECT)), 1, limits))
    assert time.monotonic() - started < 120
    hangs = outcomes["hangs"]
    assert hangs.report is None and 20 <= hangs.seconds < 40, hangs
    assert hangs.error == ("grading on Ray did not finish within 20 s (a test's 20 s); its Ray "
                           "worker was stopped")
    assert (marks / "started").exists()
    for key in ("fine", "after"):  # the batch went on
        assert outcomes[key].error is None and outcomes[key].report.score == 10
    assert gone((marks / "started").read_text())  # killed
    whole_node = ray.remote(lambda: "free").options(num_cpus=2)  # its CPU is free again
    assert ray.get(whole_node.remote(), timeout=60) == "free"


def test_gpus_per_task():
    assert gpus_per_task(True, {"CPU": 8, "GPU": 2}) == 1
    assert gpus_per_task(True, {"CPU": 8}) == 0  # no GPU in the cluster: the GPU policy applies
    assert gpus_per_task(False, {"CPU": 8, "GPU": 2}) == 0
    assert list(run_ray([], jobs=2)) == []  # nothing to grade: no Ray started
    with pytest.raises(ValueError):
        list(run_ray([task(Path("/nonexistent"), "x", GOOD)], jobs=0))


def test_warm_ray_sandboxes_are_as_walled_off_as_cold_ones(cluster, tmp_path):
    """The wall test of local warm workers (tests/batch/test_batch.py), through Ray actors: what a
    submission sees from inside its sandbox: no grader environment (Ray's included), no hidden
    tests in memory or on disk, no grader processes, its own user and PID namespace."""
    canary = "CANARY-" + os.urandom(8).hex()
    hidden = TOY / "assignments" / "toy" / "tests" / "hidden" / "test_toy.py"

    class Planted(RayGrader):  # the worker process's environment holds a secret
        def __init__(self, bundle: dict, share: int = 1) -> None:
            os.environ["AUTOGRADER_TEST_SECRET"] = canary
            super().__init__(bundle, share)

    # The actors' bundles (hidden tests, the key) and the driver's copy of them are hidden.
    source = snooping_source(hidden, "/tmp/autograder-ray-*")
    folder = submission(tmp_path, "eve", source, (GOOD / "answers.yml").read_text())
    actor = ray.remote(Planted).options(num_cpus=1, max_restarts=0)
    [outcome] = batch_ray._collect(ray, [task(tmp_path, "eve", folder)], 1, actor,
                                   ray.put(pack_assignment("toy", PROJECT)))
    assert outcome.error is None, outcome.error
    observed = seen_in(outcome.report.tests)
    names = {entry.split("=", 1)[0] for entry in observed["environ"].split("\0") if entry}
    assert canary not in observed["environ"] and "AUTOGRADER_TEST_SECRET" not in names
    assert not [n for n in names if n.startswith("RAY")], names
    assert (Path(cluster.folder) / "auth_token").read_text() not in observed["environ"]
    assert observed["test_modules"] == []
    assert not observed["hidden_visible"] and not observed["canary_in_memory"]
    assert observed["foreign_processes"] == []
    assert observed["uid"] != 0 and observed["pid"] < 10  # own user, own PID namespace
    cold = grade_loaded(folder, load_assignment("toy", PROJECT), tmp_path / "cold")
    assert outcome.report.environment.protections == cold.environment.protections
    assert outcome.report.score == cold.score


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
