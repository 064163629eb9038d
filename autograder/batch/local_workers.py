"""The local backend of `autograder batch`: a pool of warm worker processes on this machine.

Each worker is `python -I -m autograder.batch.local_workers` (trusted grader code, like `autograder
grade`), started once and fed one task at a time as a JSON line on stdin; it answers one JSON line
on stdout. Student code never runs in a worker: grading starts fresh sandbox processes for every
submission. A worker that dies is replaced, and its submission graded once more on the new one
(`batch.retries`, as on Ray); the batch goes on.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from autograder.batch.records import GradeOutcome, GradeTask
from autograder.batch.retries import Queue

STOP_SECONDS = 10.0  # how long stopped workers get to kill their sandboxes before SIGKILL
# One outcome line: a report is at most a few hundred KiB (report.MAX_FILE_BYTES per file).
MAX_OUTCOME_BYTES = 16 << 20


class LineTooLong(ValueError):
    """A worker sent more than the cap without ending its line."""


class LineReader:
    """Splits a byte stream into lines in time linear in its length (a growable buffer, each
    byte searched once), refusing a line longer than `limit`."""

    def __init__(self, limit: int = MAX_OUTCOME_BYTES) -> None:
        self.buffer = bytearray()
        self.scanned = 0  # bytes of `buffer` known to hold no newline
        self.limit = limit

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (without their newlines)."""
        self.buffer += chunk
        lines = []
        while (end := self.buffer.find(b"\n", self.scanned)) >= 0:
            lines.append(bytes(self.buffer[:end]))
            del self.buffer[: end + 1]
            self.scanned = 0
        self.scanned = len(self.buffer)
        if self.scanned > self.limit:
            raise LineTooLong(f"a line over {self.limit} bytes")
        return lines


class _Worker:
    def __init__(self, jobs: int = 1) -> None:
        # Sandboxes of `jobs` workers share this machine's (or container's) memory: each one's
        # cgroup limit is its share (see sandbox.sandbox_memory_bytes).
        env = {**os.environ, "AUTOGRADER_SANDBOX_SHARE": str(max(1, jobs))}
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-m", "autograder.batch.local_workers"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, env=env)
        self.task: GradeTask | None = None
        self.lines = LineReader()
        self.failure: str | None = None  # why the batch stopped it, if it did

    def give(self, task: GradeTask) -> None:
        self.task = task
        try:
            self.process.stdin.write(json.dumps(task.to_json()).encode() + b"\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it died: its stdout ends, and the task fails there like any other

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: the grading in progress cleans up its sandboxes


def run_local(tasks: list[GradeTask], jobs: int) -> Iterator[GradeOutcome]:
    """Grade `tasks` on `jobs` warm workers, yielding each outcome as it finishes."""
    pending = Queue(tasks, key=lambda task: task.key)
    selector = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def start() -> _Worker:
        worker = _Worker(max(1, min(jobs, len(tasks))))
        workers.append(worker)
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        return worker

    def feed(worker: _Worker) -> None:
        if pending:
            worker.give(pending.next())
        else:
            worker.task = None

    try:
        for _ in range(max(1, min(jobs, len(tasks)))):
            feed(start())
        while any(w.task is not None for w in workers):
            for key, _ in selector.select():
                worker: _Worker = key.data
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:  # the worker died: a new worker takes over
                    selector.unregister(worker.process.stdout)
                    workers.remove(worker)
                    code = worker.process.wait()
                    task, worker.task = worker.task, None
                    if task is not None and worker.failure:  # (its answer: no retry helps)
                        yield GradeOutcome(task.key, None, worker.failure, 0.0)
                    elif task is not None:  # first in line again, on the new worker
                        running = [w.task for w in workers if w.task]
                        for failed, error in pending.lost(
                                task, f"the grading worker died ({_ended(code)})", running):
                            yield GradeOutcome(failed.key, None, error, 0.0)
                        if pending.stopped:  # every worker dies: the rest failed at once
                            return
                    if pending:
                        feed(start())
                    continue
                if worker.failure:
                    continue  # stopped: read to the end, keep nothing
                try:
                    lines = worker.lines.feed(chunk)
                except LineTooLong:  # stop it: its task fails, a new worker takes over
                    worker.failure = (f"the grading worker's answer was over "
                                      f"{MAX_OUTCOME_BYTES >> 20} MiB; it was stopped")
                    worker.lines = LineReader()
                    try:
                        os.killpg(worker.process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    continue
                for line in lines:
                    if worker.task is None:
                        continue  # nothing was asked: not an outcome
                    outcome = _outcome(worker.task, line)
                    worker.task = None
                    pending.graded()
                    yield outcome  # recorded before the worker gets more
                    feed(worker)
    finally:  # also on Ctrl-C, or when the caller stops early
        for worker in workers:
            worker.stop()
        deadline = time.monotonic() + STOP_SECONDS
        for worker in workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait()
        selector.close()


def _outcome(task: GradeTask, line: bytes) -> GradeOutcome:
    try:
        outcome = GradeOutcome.from_json(json.loads(line))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return GradeOutcome(task.key, None, "the grading worker sent an unreadable answer", 0.0)
    if outcome.key != task.key:
        return GradeOutcome(task.key, None, "the grading worker answered for another task", 0.0)
    return outcome


def _ended(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


def _serve() -> None:
    """The worker's loop: one task per line in, one outcome per line out."""
    # SIGTERM (from the batch, or the kernel when the batch dies) unwinds the grading in
    # progress, whose clean-up kills its runner and sandboxes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the batch's to handle
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        sys.exit(0)  # the batch died before we could arm the death signal
    from autograder.batch.worker import Worker

    # Outcomes go to a private copy of stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    worker = Worker()
    for line in sys.stdin.buffer:
        outcome = worker.grade(GradeTask.from_json(json.loads(line)))
        out.write(json.dumps(outcome.to_json()).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
