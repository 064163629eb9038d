"""Grading many submissions of a real assignment, as the acceptance tests here do."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder.grading.grade import grade_loaded
from autograder.grading.results import Report
from autograder.project.assignment import Assignment
from autograder.protocol.fork_channel import RunnerServer

JOBS = 2  # the CI machine's cores; gradings mostly wait on their subprocesses


def grade_all(submissions: dict[str, tuple[Path, Assignment]], out: Path,
              warm: bool = True) -> dict[str, Report | Exception]:
    """Each submission folder graded once into `out / name`, JOBS at a time. `warm`: each thread
    on its own warm runner server, as a batch worker grades (runners forked warm skip the
    imports; the sandboxes they start are as fresh as a cold grading's); otherwise every runner
    starts cold, as `autograder grade` does. A grading that raised is kept as its exception, so
    that one broken grading does not hide the others' results."""
    servers: list[RunnerServer] = []
    local = threading.local()

    def grade_one(name: str) -> Report | Exception:
        if warm and (not getattr(local, "server", None) or not local.server.alive):
            local.server = RunnerServer()
            servers.append(local.server)
        folder, assignment = submissions[name]
        try:
            return grade_loaded(folder, assignment, out / name,
                                runners=local.server if warm else None)
        except Exception as exc:  # noqa: BLE001 - reported by the test that reads it
            return exc

    try:
        with ThreadPoolExecutor(JOBS) as pool:
            return dict(zip(submissions, pool.map(grade_one, submissions), strict=True))
    finally:
        for server in servers:
            server.close()
