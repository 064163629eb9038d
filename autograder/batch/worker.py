"""Grade one task of a batch, in a worker process (local pool or Ray): `grade_task(task)`.

A worker is trusted grader code, like `autograder grade`: student code runs only in the sandbox
processes that grading starts. What goes back is plain JSON (`GradeOutcome`), so whatever
carries it (a pipe, Ray's object store) never carries an object made by student code.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from autograder.batch.records import GradeOutcome, GradeTask
from autograder.grading.grade import grade_loaded
from autograder.project.assignment import Assignment, load_assignment
from autograder.protocol.fork_channel import RunnerServer

# This worker process's warm runner server (`warm_up`), handed to each grading it does.
_runners: RunnerServer | None = None


@lru_cache(maxsize=4)
def _assignment(name: str, config_path: str) -> Assignment:
    # Loaded once per worker: the bank and config are the same for every task of a batch.
    return load_assignment(name, Path(config_path))


def grade_task(task: GradeTask) -> GradeOutcome:
    """Grade `task.submission` into `task.out`; never raises (an error is in the outcome)."""
    started = time.monotonic()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if _runners is not None and not _runners.alive:
        warm_up()  # the server died (killed, out of memory): a new one for what follows
    try:
        assignment = _assignment(task.assignment, task.config_path)
        report = grade_loaded(Path(task.submission), assignment, Path(task.out), dates=task.dates,
                              runners=_runners)
        data = json.loads(json.dumps(asdict(report)))
        return GradeOutcome(task.key, data, None, time.monotonic() - started, worker)
    except Exception as exc:  # noqa: BLE001 - the batch goes on; the TA sees why
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return GradeOutcome(task.key, None, f"the grader failed: {detail}",
                            time.monotonic() - started, worker)


def warm_up() -> None:
    """Load once per worker what every grading needs (a warm worker's head start)."""
    global _runners
    from autograder.grading import (  # noqa: F401 - templates and schemas, imported now
        report,
        results,
        supervisor,
    )

    # Runners forked from a warm server skip ~1.8 s of imports each; the sandboxes they start
    # are as fresh as ever.
    _runners = RunnerServer()
