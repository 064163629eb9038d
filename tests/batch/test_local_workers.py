"""autograder.batch.local_workers: the pool of warm worker processes on this machine, whose
workers are SIGKILLed here from outside (as the kernel's OOM killer would) while they hold a
submission."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from autograder.batch.local_workers import run_local
from autograder.batch.records import GradeTask
from autograder.batch.retries import MAX_DEATHS_IN_A_ROW

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
GOOD = TOY / "submissions" / "good"


def task(tmp_path: Path, key: str) -> GradeTask:
    return GradeTask(key=key, submission=str(GOOD), out=str(tmp_path / key), assignment="toy",
                     config_path=str(TOY / "grading.yml"))


class Killer(threading.Thread):
    """SIGKILLs the first `count` workers this process starts, each as soon as it is seen."""

    def __init__(self, count: int) -> None:
        super().__init__(daemon=True)
        self.count, self.killed, self.done = count, [], threading.Event()

    def run(self) -> None:
        while len(self.killed) < self.count and not self.done.is_set():
            for pid in _workers() - set(self.killed):
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
                break
            time.sleep(0.005)


def _workers() -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            line = Path(f"/proc/{name}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if (int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()
                and b"autograder.batch.local_workers" in line):
            found.add(int(name))
    return found


def graded(tasks: list[GradeTask], kills: int) -> tuple[dict, Killer]:
    killer = Killer(kills)
    killer.start()
    try:
        return {o.key: o for o in run_local(tasks, jobs=1)}, killer
    finally:
        killer.done.set()
        killer.join()


def test_a_submission_whose_worker_died_is_graded_again_on_a_new_worker(tmp_path):
    outcomes, killer = graded([task(tmp_path, "alice"), task(tmp_path, "bob")], kills=1)
    assert len(killer.killed) == 1
    for key in ("alice", "bob"):
        assert outcomes[key].error is None and outcomes[key].report.score > 0, outcomes[key]


def test_a_submission_that_loses_two_workers_is_a_grader_error(tmp_path):
    outcomes, _ = graded([task(tmp_path, "alice"), task(tmp_path, "bob")], kills=2)
    error = outcomes["alice"].error
    assert "the grading worker died (signal SIGKILL)" in error and "twice" in error, error
    assert outcomes["bob"].error is None and outcomes["bob"].report.score > 0


def test_workers_that_keep_dying_fail_the_rest_at_once(tmp_path):
    keys = ["a", "b", "c", "d"]
    outcomes, killer = graded([task(tmp_path, key) for key in keys], kills=MAX_DEATHS_IN_A_ROW)
    assert len(killer.killed) == MAX_DEATHS_IN_A_ROW  # and no worker was started for c or d
    assert "twice" in outcomes["a"].error and "twice" in outcomes["b"].error
    for key in ("c", "d"):
        assert f"{MAX_DEATHS_IN_A_ROW} grading workers were lost in a row" in outcomes[key].error
    assert not _workers()
