"""A warm runner server whose runners time their sandbox work: the profiler's stand-in.

    python bench/_timed_runners.py RECORDS PROFILES CONTROL_FD    (PROFILES "": none)

Exactly autograder.runner.warm's server, after wrapping the methods of the runner's side
of the sandbox (autograder.sandbox.client) that start zygotes, fork workers, wait for a worker's
import, run rank scenarios and stop workers: each call appends one `Span` line to RECORDS, with
the hidden test it ran in. Only the forked runners call these wrappers (zygotes and workers run
the sandbox runtime, never the client), and the events a runner sends its parent are unchanged,
so the parent reads them as in any grading. bench/profile_warm.py reads both. With PROFILES (a
folder), each runner's pytest session is run under cProfile too, its stats written there.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# What a Span's kind says (the runner's side of one sandbox operation):
KINDS = {
    "zygote": "a new zygote started (Sandbox.zygote)",
    "fork": "a worker forked by the zygote (_Process: request sent, pid heard)",
    "serve_start": "a serving worker made ready: fork and its import of the module",
    "call": "a call or probe of the serving worker (its gpus: the test's kind)",
    "ranks": "a rank scenario: its forks, stores, the ranks' imports and work, their stop",
    "stores": "the rendezvous stores of a rank scenario",
    "kill": "a worker killed and reaped (_Process.kill)",
    "strays": "the scan for what ended workers left running (Sandbox._stop_strays)",
    "close": "the sandbox closed at the end of the suite",
    "runner": "the runner, from its start to its Done event; cpu: its own CPU seconds",
    "ready": "the server has imported everything and is about to serve (no duration)",
}


@dataclass
class Span:
    """One timed operation in a runner (time.monotonic, the clock the parent reads too)."""

    kind: str
    start: float
    end: float
    test: str = ""  # the hidden test's nodeid ("" outside tests)
    gpus: int = 0  # what the worker simulates (-1: CUDA hidden)
    mode: str = ""  # a fork's: "serve" (a test's worker) or "rank" (a rank)
    first: bool = False  # a fork that was its zygote's first (it waited for the zygote's start)
    cpu: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def read_spans(path: Path) -> list[Span]:
    """The spans written so far (none when no runner wrote any)."""
    if not path.exists():
        return []
    return [Span(**json.loads(line)) for line in path.read_text().splitlines() if line]


def _current_test() -> str:
    # pytest's own marker of the running test: "NODEID (setup|call|teardown)"
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def instrument(records: Path, profiles: Path | None = None) -> None:
    """Wrap the sandbox client's methods in the runners this server will fork (and their
    pytest sessions in cProfile, with `profiles`)."""
    from autograder.protocol.runner_events import Done
    from autograder.runner import suite as runner
    from autograder.sandbox import client

    def write(span: Span) -> None:
        # Opened per span: a forked runner keeps no descriptor of its server's (see runner.warm).
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(asdict(span)) + "\n").encode())
        finally:
            os.close(fd)

    def timed(cls: type, name: str, kind: str,
              details: Callable[..., dict[str, Any] | None]) -> None:
        """`details(self, *args, **kwargs)` gives the span's fields, None: no span (the call
        did nothing of its kind); it is called before the method runs."""
        original = getattr(cls, name)

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            fields = details(self, *args, **kwargs)
            test = _current_test()
            start = time.monotonic()
            try:
                return original(self, *args, **kwargs)
            finally:
                if fields is not None:
                    write(Span(kind, start, time.monotonic(), test, **fields))

        setattr(cls, name, wrapper)

    sandbox, process = client.Sandbox, client._Process
    timed(sandbox, "zygote", "zygote",
          lambda s: {} if s._zygote is None or not s._zygote.alive else None)
    timed(process, "__init__", "fork",
          lambda p, zygote, module, mode, out, gpus=0: {"mode": mode, "gpus": gpus,
                                                        "first": not zygote.served})
    timed(sandbox, "_ensure_started", "serve_start",
          lambda s, timeout, gpus=0: {"gpus": gpus} if gpus not in s._workers else None)
    timed(sandbox, "_request", "call",
          lambda s, request, what, function, timeout, gpus=0: {"gpus": gpus})
    timed(sandbox, "run_ranks", "ranks",
          lambda s, probe, world, args, timeout, out, function, gpus=0, **_: {"gpus": gpus})
    timed(sandbox, "_stores", "stores", lambda s, count, host: {})
    timed(process, "kill", "kill", lambda p: {"gpus": p.gpus})
    timed(sandbox, "_stop_strays", "strays", lambda s, table=None: {})
    timed(sandbox, "close", "close", lambda s: {})

    original_write_line = runner.write_line

    def write_line(fd: int) -> Callable[[Any], None]:
        emit, start = original_write_line(fd), time.monotonic()

        def timed_emit(event: Any) -> None:
            # Before Done: the parent kills the runner's group as soon as it reads it.
            if isinstance(event, Done):
                times = os.times()  # a fork starts at zero: this runner's own CPU
                write(Span("runner", start, time.monotonic(), cpu=times.user + times.system))
            emit(event)

        return timed_emit

    runner.write_line = write_line  # run() calls it first, for its events' pipe

    if profiles is not None:
        import cProfile

        import pytest

        original_main = pytest.main

        def profiled_main(*args: Any, **kwargs: Any) -> Any:
            profiler = cProfile.Profile()
            try:
                return profiler.runcall(original_main, *args, **kwargs)
            finally:  # (before Done: the parent kills the runner once it reads it)
                profiler.dump_stats(profiles / f"runner-{os.getpid()}.prof")

        pytest.main = profiled_main  # runner.run calls pytest.main

    freeze = gc.freeze

    def frozen() -> None:
        # warm.serve freezes what it imported right before it serves: ready from here (its
        # forks freeze too, as other uids: they get the plain function)
        gc.freeze = freeze
        freeze()
        now = time.monotonic()
        write(Span("ready", now, now))

    gc.freeze = frozen


def main() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, as runner.warm's main
    records, profiles, control_fd = sys.argv[1:4]  # (RunnerServer appends the descriptor)
    instrument(Path(records), Path(profiles) if profiles else None)
    from autograder.runner import warm

    warm.serve(int(control_fd))


if __name__ == "__main__":
    main()
