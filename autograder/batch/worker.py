"""Grade the tasks of a batch in a worker process (local pool or Ray): `Worker().grade(task)`.

A worker is trusted grader code, like `autograder grade`: student code runs only in the sandbox
processes that grading starts. What goes back is a `GradeOutcome`, sent as plain JSON
(`GradeOutcome.to_json`), so whatever carries it (a pipe, Ray's object store) never carries an
object made by student code.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from functools import lru_cache
from pathlib import Path

from autograder.batch.records import GradeOutcome, GradeTask
from autograder.grading.grade import grade_loaded
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.paths import Project
from autograder.protocol.fork_channel import start_runner_server


@lru_cache(maxsize=4)
def _assignment(name: str, config_path: str) -> Assignment:
    # Loaded once per worker: the bank and config are the same for every task of a batch. The
    # project is the one whose grading.yml the driver (or the Ray bundle) named.
    return load_assignment(name, Project.of_config(Path(config_path), "named by the batch's task"))


class Worker:
    """One worker process's grader: loads once what every grading needs and keeps a warm
    runner server (runners forked from it skip ~1.8 s of imports each; the sandboxes they
    start are as fresh as ever), handed to each grading."""

    def __init__(self) -> None:
        from autograder.grading import (  # noqa: F401 - templates and schemas, imported now
            report,
            results,
            supervisor,
        )

        self.runners = start_runner_server()

    def grade(self, task: GradeTask) -> GradeOutcome:
        """Grade `task.submission` into `task.out`; never raises (an error is in the outcome)."""
        started = time.monotonic()
        worker = f"{socket.gethostname()}:{os.getpid()}"
        if self.runners is not None and not self.runners.alive:
            self.runners.close()  # killed, or out of memory: a new one for what follows
            self.runners = start_runner_server()
        try:
            assignment = _assignment(task.assignment, task.config_path)
            report = grade_loaded(Path(task.submission), assignment, Path(task.out),
                                  dates=task.dates, runners=self.runners)
            return GradeOutcome(task.key, report, None, time.monotonic() - started, worker)
        except Exception as exc:  # noqa: BLE001 - the batch goes on; the TA sees why
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return GradeOutcome(task.key, None, f"the grader failed: {detail}",
                                time.monotonic() - started, worker)

    def close(self) -> None:
        """Stop the runner server (before a planned exit)."""
        if self.runners is not None:
            self.runners.close()
