"""A warm grading worker on a Ray node: `RayGrader`, made a Ray actor by
`autograder.batch.ray_workers`.

It holds what a local warm worker holds (`batch.worker.Worker`: a runner server with pytest and
torch imported, which forks a fresh runner and fresh sandbox zygotes for every submission), and
it needs nothing of the driver's file system: the assignment arrives once as a bundle (from
Ray's object store), each submission as packed bytes, and the reports go back as bytes. Its own
folders are temporary folders of its node, readable by the grader's user alone.

This module is imported by Ray before the actor starts, so it imports the grading modules only
in `_set_up`; the worker's project is the unpacked bundle (its grading.yml, which each task
names), never the node's working folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.batch.bundles import read_outputs, unpack_assignment, unpack_submission
from autograder.batch.records import GradeOutcome, GradeTask
from autograder.grading.late import SubmissionDates

if TYPE_CHECKING:  # imported once the bundle is unpacked (see _set_up)
    from autograder.batch.worker import Worker

PREFIX = "autograder-ray-"  # of this worker's temporary folders: PREFIX + pid + "-..."


class RayGrader:
    """One warm worker: `grade(request)` per submission, one at a time."""

    def __init__(self, bundle: dict, share: int = 1) -> None:
        # Never raises: a worker that cannot grade answers every request with the reason, so
        # that the batch reports it once per submission instead of restarting workers forever.
        self.problem: str | None = None
        _remove_left_by_dead_workers()
        # 0700, the grader's alone; named by this process, so that the next worker on this
        # node removes it if this one is killed (a killed actor cleans nothing up).
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")).resolve()
        self.config: Path | None = None
        self.assignment = ""
        self.worker: Worker | None = None
        try:
            self._set_up(bundle, share)
        except Exception as exc:  # noqa: BLE001 - said in every outcome of this worker
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.problem = f"the Ray worker could not be set up: {detail}"

    def _set_up(self, bundle: dict, share: int) -> None:
        # Ray starts its workers at nice 15 (worker_niceness); a grader is as urgent as a local
        # worker: its tests' time limits are wall-clock, and on a loaded node a niced grader
        # (and its sandboxes, which inherit the value) would be starved into timeouts. Lowering
        # it back needs CAP_SYS_NICE (root, as graders with namespaces are): tried, not needed.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        self.assignment = str(bundle.get("assignment"))
        self.config = unpack_assignment(bundle, self.root)
        # The project root of this worker is the bundle: grading.yml, schemas/, assignments/.
        # Whatever AUTOGRADER_ROOT the node's Ray processes inherited (a local instance inherits
        # the driver's environment) names a folder of another machine.
        os.environ["AUTOGRADER_ROOT"] = str(self.root)
        # Sandboxes of the workers on this node share its memory (sandbox.sandbox_memory_bytes).
        os.environ["AUTOGRADER_SANDBOX_SHARE"] = str(max(1, share))
        os.chdir(self.root)
        from autograder.batch.fingerprints import assignment_version, grader_version
        from autograder.batch.worker import Worker, _assignment

        spec = _assignment(self.assignment, str(self.config))
        # The driver's gradebook records its own versions: grading here must be the same.
        if grader_version() != bundle.get("grader_version"):
            raise RuntimeError(f"this node's autograder ({grader_version()}) is not the "
                               f"driver's ({bundle.get('grader_version')}); install the same "
                               "version on every node")
        if assignment_version(spec) != bundle.get("assignment_version"):
            raise RuntimeError("the assignment unpacked here is not the driver's version")
        self.worker = Worker()

    def ready(self) -> str:
        """Where this worker runs, once it is set up (or why it cannot grade)."""
        return self.problem or f"ready on {socket.gethostname()}:{os.getpid()}"

    def grade(self, request: dict) -> dict:
        """Grade one packed submission: {"key", "dates", "submission"} in, {"outcome":
        GradeOutcome.to_json(), "files": {name: bytes}} out. Never raises."""
        started = time.monotonic()
        key = str(request.get("key"))
        worker = f"{socket.gethostname()}:{os.getpid()}"
        if self.problem or self.worker is None:
            return _answer(GradeOutcome(key, None, self.problem or "not set up", 0.0, worker),
                           {})
        job = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-job-"))
        try:
            (job / "in").mkdir()
            submission = unpack_submission(request["submission"], job / "in")
            dates = request.get("dates")
            task = GradeTask(key=key, submission=str(submission), out=str(job / "out"),
                             assignment=self.assignment, config_path=str(self.config),
                             dates=SubmissionDates.from_json(dates) if dates else None)
            outcome = self.worker.grade(task)
            files = read_outputs(job / "out")  # sandbox events too, after a failure
            return _answer(outcome, files)
        except Exception as exc:  # noqa: BLE001 - this submission only; the batch goes on
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return _answer(GradeOutcome(key, None, f"the Ray worker failed: {detail}",
                                        time.monotonic() - started, worker), {})
        finally:
            shutil.rmtree(job, ignore_errors=True)

    def close(self) -> None:
        """Stop the runner server and remove this worker's folder (before a planned exit)."""
        if self.worker is not None:
            self.worker.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _remove_left_by_dead_workers() -> None:
    """Remove the folders of this node's workers that died without cleaning up: ours (by
    name and owner) whose process is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = folder.name[len(PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.is_symlink() or \
                    folder.stat().st_uid != os.getuid() or Path(f"/proc/{pid}").exists():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _answer(outcome: GradeOutcome, files: dict[str, bytes]) -> dict:
    try:
        import ray

        context = ray.get_runtime_context()
        gpus = ",".join(str(i) for i in ray.get_gpu_ids()) or "none"
        outcome.worker = f"{outcome.worker} ray-node={context.get_node_id()[:12]} gpu={gpus}"
    except Exception:  # noqa: BLE001, S110 - outside Ray (tests): the host and pid say enough
        pass
    return {"outcome": outcome.to_json(), "files": files}
