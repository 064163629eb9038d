"""The torch half of a scenario's observer (autograder.sandbox.observer): what an assignment's
trusted observers.py builds on.

    results = student.run_ranks(probes.naive_step, 2, shapes, per_rank=shards,
                                observer=observe(observers.naive_step, expected, rank=0))
    assert results.observed["steps"] == 3

`observe(fn, *args, rank=...)` makes the `Observer` of one scenario: in the grader's observer
process (one serves a sandbox's scenarios in turn: sandbox.observer.ObserverHost),
`fn(seat, *args)` runs as rank `rank` and returns its record (JSON data). It joins the
scenario's group with `join_group(seat)`, says what it is about to do with `seat.note(...)`
before each collective, posts collectives asynchronously and waits for each with
`posted(seat, work)`, and returns `{"failure": "..."}` for what the student's ranks did wrong.
A collective that fails or is not answered within `wait` seconds is such a failure too; any
other exception is the observer's own mistake (the grader's failure, never the student's).
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import signal
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autograder.sandbox.observer import Observer, Seat, until_blocked
from autograder.sandbox_runtime.groups import destroy_process_groups, woken


class Unanswered(Exception):
    """A collective of the observer's that the student's ranks did not match in time, or that
    gloo ended (a peer that left, a size it refused)."""


def observe(fn: Callable[..., dict], *args: Any, rank: int, wait: float = 3.0) -> Observer:
    """The observer that runs `fn(seat, *args)` as rank `rank` of a scenario, waiting at most
    `wait` seconds for any one collective of the student's ranks. `fn` and `args` go to the
    observer's process pickled: a module-level function, plain data and tensors."""
    # Imported here, in the runner that forks the observers' process, once: torch's
    # optimizers import it on first use (0.5 s of CPU), which each such process would do
    # again. Not in every runner (suite.preload): a cold one that forks none would pay in vain.
    import torch._dynamo  # noqa: F401
    return Observer(rank, functools.partial(_observed, fn, args), wait, _reset)


def _observed(fn: Callable[..., dict], args: tuple, seat: Seat) -> dict:
    """`fn(seat, *args)`'s record; a collective of the student's ranks not answered, a
    failure of theirs (the record says where); anything else raised, the observer's own."""
    last: list[str] = []

    def note(text: str) -> None:
        last[:] = [text]
        seat.note(text)

    try:
        record = fn(replace(seat, note=note), *args)
    except Exception as exc:
        if not (isinstance(exc, Unanswered) or _from_torch_distributed(exc)):
            raise  # the observer's own mistake: the grader's failure
        where = f" at: {last[0]}" if last else ""
        return {"failure": f"the grader's own rank in this scenario got no matching "
                           f"collective from your ranks{where} ({_first_line(exc)})",
                "unanswered": True}
    if type(record) is not dict:
        raise TypeError(f"an observer returns a dict, not {type(record).__name__}")
    return record


# What an observer may change for the next scenario of its process, as the runner had it.
_RNG = torch.get_rng_state()
_DTYPE = torch.get_default_dtype()


def _reset() -> bool:
    """Ready the observer's process for the next scenario: every process group destroyed (the
    default one and any new_group), grad mode, default dtype and random generator as the
    runner had them (`join_group` sets the thread count again). False (its process ends) when
    an alarm was left set. (A gloo device still alive, its thread counted, ends the process
    too: sandbox.observer's `_reset`.)"""
    destroy_process_groups()
    if signal.alarm(0) or signal.setitimer(signal.ITIMER_REAL, 0)[0]:
        return False
    torch.set_grad_enabled(True)
    torch.set_default_dtype(_DTYPE)
    torch.set_rng_state(_RNG)
    return not dist.is_initialized()


def join_group(seat: Seat, backend: str = "gloo") -> None:
    """Join the scenario's default process group as the seat's rank, at its first store (as
    the student's ranks do: a client of the grader's store). Meeting may take as long as the
    student's ranks take to start (the scenario's time); each collective then gets `wait`
    seconds through `posted`."""
    torch.set_num_threads(1)
    seat.note("joining the scenario's process group")
    dist.init_process_group(backend, init_method=f"tcp://{seat.host}:{seat.ports[0]}",
                            rank=seat.rank, world_size=seat.world_size,
                            timeout=datetime.timedelta(seconds=seat.timeout))
    seat.joined()


def new_group(seat: Seat) -> dist.ProcessGroup:
    """A second group over every rank of the scenario (`dist.new_group`), made without waiting
    on gloo's idle ticks (autograder.sandbox_runtime.groups). The student's ranks must make
    theirs at the same point."""
    with woken():
        return dist.new_group(list(range(seat.world_size)))


def wait_at_most(seat: Seat) -> None:
    """From now on, each blocking collective of the default group waits at most `seat.wait`
    seconds: for an observer that runs torch's own DDP or FSDP2, whose collectives cannot go
    through `posted`. Call it once the group is joined (meeting may take longer)."""
    # (a private function of torch's, the one torchelastic uses to the same end)
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=seat.wait))


def posted(seat: Seat, work: dist.Work) -> None:
    """Wait for an asynchronous collective (`async_op=True`) at most `seat.wait` seconds:
    Unanswered when the student's ranks did not match it in time or gloo ended it."""
    try:
        work.wait(timeout=datetime.timedelta(seconds=seat.wait))
    except Exception as exc:  # noqa: BLE001 - gloo says all of it with RuntimeError
        raise Unanswered(_first_line(exc)) from exc


def hold_until_waiting(seat: Seat, at_most: float) -> bool:
    """Hold this rank back (before posting its next collective) until every student's rank of
    the scenario is blocked, at most `at_most` seconds: True when they blocked. Blocked while
    this rank holds back, a rank either waits for the collective held back (right) or has
    gone on without it and waits on a later one (its next step then shows it); one that still
    runs is given up to `at_most`. Decided from the kernel's view of their threads
    (sandbox.observer.until_blocked), not from anything they say."""
    return until_blocked(seat.ranks, at_most)


# torch.distributed, and DDP's forward (torch.nn.parallel), which runs collectives too
_DISTRIBUTED = tuple(str(Path(module.__file__).parent) + os.sep
                     for module in (dist, torch.nn.parallel))


def _from_torch_distributed(exc: BaseException) -> bool:
    """Whether `exc` is gloo's, out of torch's distributed code (a collective, the group's
    start): gloo says a peer never came or left with a plain RuntimeError, so its way through
    torch.distributed tells, not its class. (Through it, not from it: a DTensor's collective
    is raised from torch's operator dispatch, called from torch.distributed.)"""
    if isinstance(exc, dist.DistError):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return isinstance(exc, RuntimeError) and any(
        frame.filename.startswith(_DISTRIBUTED) for frame in frames)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    found = next((line for line in lines if "Timed out" in line or "by peer" in line), None)
    line = _SOURCE.sub("", found or (lines[0] if lines else type(exc).__name__))
    # gloo's first sentence; not its source file and line, nor its advice to read the logs
    return re.split(r"(?<=\.)\s", line, maxsplit=1)[0][:300]


_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")
