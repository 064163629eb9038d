"""What a batch does when a worker dies with a submission: one policy for every backend.

A worker (a local process, a Ray actor) runs trusted grader code only, so its death is the
grader's failure, not the student's: killed for memory, its node lost, never set up. The
submission it held is graded once more on a new worker; a second loss makes it an error outcome.
Workers that die one after another with nothing graded between cannot work here (a broken
install, a node that keeps dying): the rest of the batch fails at once rather than start one
more worker per submission.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

MAX_ATTEMPTS = 2  # workers one submission may lose: retried once
MAX_DEATHS_IN_A_ROW = 4  # workers lost with nothing graded between: the batch stops

Task = TypeVar("Task")


@dataclass
class Retries:
    """Counts lost workers, per submission and in a row, and says what follows each loss."""

    lost_by: dict[str, int] = field(default_factory=dict)  # task key -> workers it lost
    in_a_row: int = 0
    last: str = ""  # why the last worker was lost

    def graded(self) -> None:
        """A worker answered: the losses so far were not every worker's fate."""
        self.in_a_row = 0

    def lost(self, key: str, why: str) -> str | None:
        """A worker was lost grading `key`, for `why`: None to grade it again on a new worker,
        or its outcome's error."""
        self.lost_by[key] = self.lost_by.get(key, 0) + 1
        self.in_a_row += 1
        self.last = why
        if self.lost_by[key] < MAX_ATTEMPTS:
            return None
        return f"{why}, twice (retried once, on a new worker)"

    def hopeless(self) -> str | None:
        """The error for every submission left once too many workers were lost in a row
        (None while the batch should go on)."""
        if self.in_a_row < MAX_DEATHS_IN_A_ROW:
            return None
        return f"{self.in_a_row} grading workers were lost in a row, the last one: {self.last}"


class Queue(Generic[Task]):
    """The tasks waiting for a worker, and the policy above applied to them: what a batch's
    worker loop (local processes, Ray actors) asks when it hands out a task or loses a worker."""

    def __init__(self, tasks: Iterable[Task], key: Callable[[Task], str]) -> None:
        self.waiting: deque[Task] = deque(tasks)
        self._retries = Retries()
        self._key = key
        self.stopped: str | None = None  # why the rest of the batch failed at once, if it did

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.waiting)

    def next(self) -> Task:
        return self.waiting.popleft()

    def graded(self) -> None:
        """A worker answered (see Retries.graded)."""
        self._retries.graded()

    def lost(self, task: Task, why: str, running: Iterable[Task] = ()) -> list[tuple[Task, str]]:
        """`task`'s worker was lost, for `why`: it waits first in line again (for a new worker),
        or fails. When that loss makes the batch hopeless, every task waiting or `running` (on
        the other workers) fails too, and `stopped` says why: the loop ends. Returns each failed
        task with its error."""
        failed = []
        error = self._retries.lost(self._key(task), why)
        if error is None:
            self.waiting.appendleft(task)
        else:
            failed.append((task, error))
        self.stopped = self._retries.hopeless()
        if self.stopped:
            failed += [(left, self.stopped) for left in [*self.waiting, *running]]
            self.waiting.clear()
        return failed
