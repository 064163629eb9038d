"""Making and destroying torch.distributed's gloo groups without waiting on gloo's idle ticks.

A gloo group's loop thread (`gloo_tcp_loop`) waits for its sockets in `epoll_wait` with a
10 ms timeout, and some of a group's work waits for that loop's next turn (a socket's
unregistration does, to be sure its handler is no longer called): destroying a group waits
for it twice (the unregistration, then the loop's end), and making a second group beside a
first one waits too. That is ~20 ms of idle wall time per group destroyed and ~15 ms per
`new_group`, in every scenario and on both sides of it (the student's rank, the grader's
observer). A signal to those threads, with a handler that does nothing, ends their wait at
once (`epoll_wait` returns EINTR and the loop turns): see bench/gloo_ticks.py.

Used by the sandbox's rank workers (sandbox_runtime/worker.py), probes, and the grader's
observer process (autograder.runner.observe); imports torch only when called.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

_LOOP_THREAD = b"gloo_tcp_loop"
_WAKE = signal.SIGURG  # ignored by default, used by nothing here: its handler does nothing
_EVERY = 0.0005  # seconds between two rounds of signals while the teardown runs


def destroy_process_groups() -> None:
    """`torch.distributed.destroy_process_group()` (every group: the default one and any
    new_group), then what keeps a destroyed group's gloo device (its thread and sockets)
    alive, with gloo's loop threads woken meanwhile."""
    import torch.distributed as dist

    with woken():
        if dist.is_initialized():
            dist.destroy_process_group()
        _release_devices()


def _release_devices() -> None:
    """FSDP2's sharded parameters are DTensors: DTensor's caches keep their specs, which name
    the device mesh, which holds its groups; FSDP2's modules are reference cycles, freed by a
    collection (done only while a device is still alive: it costs ~20 ms)."""
    if "torch.distributed.tensor" in sys.modules:
        import torch
        from torch.distributed.tensor import DTensor, _redistribute

        torch._C._clear_DTensor_sharding_propagator_cache()
        propagator = DTensor._op_dispatcher.sharding_propagator
        propagator.propagate_op_sharding.cache_clear()  # (this thread's: the scenario's)
        type(propagator)._propagate_tensor_meta_cached.cache_clear()
        _redistribute._gen_transform_infos.cache_clear()
        _redistribute.clear_redistribute_planner_cache()
    if gloo_loop_threads():
        gc.collect()


@contextlib.contextmanager
def woken() -> Iterator[None]:
    """While inside, gloo's loop threads of this process (those there on entry: the ones a
    new group or a teardown waits on) are signalled every _EVERY seconds. Outside the main
    thread (where no handler can be set), or with no such thread, nothing is done."""
    tgkill = getattr(ctypes.CDLL(None), "tgkill", None)  # (glibc 2.30 on; else no waking)
    threads = gloo_loop_threads()
    if tgkill is None or not threads or threading.current_thread() is not threading.main_thread():
        yield
        return
    done = threading.Event()

    def wake() -> None:
        pid = os.getpid()
        while not done.wait(_EVERY):
            for tid in threads:
                if _name(pid, tid) == _LOOP_THREAD:  # (not a later thread given its id)
                    tgkill(pid, tid, _WAKE)

    previous = signal.getsignal(_WAKE)
    waker = threading.Thread(target=wake, daemon=True)
    try:
        signal.signal(_WAKE, _nothing)
        waker.start()  # (may fail: a process limit reached; then no waking, as elsewhere)
    except (OSError, RuntimeError, ValueError):
        pass
    try:
        yield
    finally:
        done.set()
        if waker.ident is not None:
            waker.join()
            _until_gone(waker.native_id)
        signal.signal(_WAKE, signal.SIG_DFL if previous is None else previous)


def _until_gone(tid: int, seconds: float = 0.1) -> None:
    """Wait (briefly) until the thread `tid` has left the process, not only Python: a count of
    the process's threads right after (the observer's reset) must not see it."""
    task = f"/proc/{os.getpid()}/task/{tid}"
    deadline = time.monotonic() + seconds
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.0002)


def native_threads() -> int:
    """How many threads this process has, native ones included (gloo's, whose names they
    set themselves only once running, torch's pools)."""
    try:
        return len(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        return threading.active_count()


def _nothing(signum: int, frame: object) -> None:
    """The wake signal's handler: its only work is interrupting the thread's wait."""


def gloo_loop_threads() -> list[int]:
    """The ids of this process's gloo loop threads (one per gloo device alive)."""
    pid = os.getpid()
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []
    return [tid for tid in tids if _name(pid, tid) == _LOOP_THREAD]


def _name(pid: int, tid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", "rb") as comm:
            return comm.read().strip()
    except OSError:
        return None
