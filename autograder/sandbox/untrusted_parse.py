"""Run the reading of untrusted input (zips, answers files, notebooks) in a limited child process.

Parsers are trusted code, but what they read is not: a 5,000-digit number, JSON nested ten
thousand deep, code of 5,000 nested lambdas (compile() raises MemoryError, or overflows the C
stack), a decompressor fed garbage. Each such read runs as `run_limited(fn, *args)`: `fn` runs in
a forked child under an address-space limit (what it inherits plus `Limits.memory_bytes`), a CPU
limit, a file-size limit and a wall-clock timeout; it dies with the parent; its result comes back
as JSON through a pipe, read with a size cap. Whatever goes wrong there (an exception, a signal,
the limits) reaches the caller as one `ChildFailed`, whose `reason` lets it tell the student what
happened. The trusted parent only ever parses that bounded JSON reply.

A fork, not a fresh interpreter: the child needs no imports (a few milliseconds, so the fuzzing
tests can run thousands of cases), and it runs nothing but the parser it was handed.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 768 << 20  # address space the child may add to what it inherits
    cpu_seconds: int = 20
    timeout_s: float = 30.0
    file_bytes: int = 0  # the largest file the child may write (0: none at all)
    reply_bytes: int = 64 << 20  # the JSON reply, read by the trusted parent


DEFAULT_LIMITS = Limits()


class ChildFailed(Exception):
    """The child did not return a result. `reason` is one of:

    memory   it ran out of its memory allowance (MemoryError, or killed by it)
    depth    RecursionError: the input is nested too deeply
    time     it ran past its CPU or wall-clock limit
    size     it wrote a file over its limit, or its reply was over the cap
    crash    it died of a signal (a C stack overflow in compile(), say) or exited without reply
    error    `fn` raised another exception (`detail` names it)
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def run_limited(fn: Callable[..., T], *args: Any, limits: Limits = DEFAULT_LIMITS) -> T:
    """`fn(*args)` run in a limited child; its result, which must be JSON-serialisable."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(fn, args, limits, write_fd)
    os.close(write_fd)
    try:
        reply, cut = _read(read_fd, pid, limits)
    finally:
        os.close(read_fd)
        status = _reap(pid)
    if cut == "time":
        raise ChildFailed("time", f"no answer within {limits.timeout_s:g} s")
    if cut == "size":
        raise ChildFailed("size", f"its answer was over {limits.reply_bytes} bytes")
    if os.WIFSIGNALED(status):
        raise _signalled(os.WTERMSIG(status), limits)
    try:
        message = json.loads(reply)
    except (ValueError, RecursionError):
        raise ChildFailed("crash", f"no usable answer (exit status "
                                   f"{os.waitstatus_to_exitcode(status)})") from None
    if "result" in message:
        return message["result"]
    raise ChildFailed(str(message.get("reason", "error")), str(message.get("detail", "")))


def _child(fn: Callable[..., Any], args: tuple, limits: Limits, write_fd: int) -> None:
    code = 0
    try:
        faulthandler.disable()  # a crash is the parent's to report, not a traceback on stderr
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        except (OSError, AttributeError):
            pass
        _limit(resource.RLIMIT_AS, address_space() + limits.memory_bytes)
        _limit(resource.RLIMIT_CPU, limits.cpu_seconds)
        _limit(resource.RLIMIT_FSIZE, limits.file_bytes)
        try:
            reply = json.dumps({"result": fn(*args)})
        except MemoryError:
            reply = json.dumps({"reason": "memory", "detail": "MemoryError"})
        except RecursionError:
            reply = json.dumps({"reason": "depth", "detail": "RecursionError"})
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, briefly
            reply = json.dumps({"reason": "error", "detail": _describe(exc)})
        data = memoryview(reply.encode("utf-8", "surrogatepass"))
        while data:
            data = data[os.write(write_fd, data[: 1 << 20]):]
    except BaseException:  # noqa: BLE001 - out of memory even to reply: the parent sees no answer
        code = 70
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    except Exception:  # noqa: BLE001 - a message that cannot even be shown
        return type(exc).__name__


def _limit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, hard))


def address_space() -> int:
    """This process's address space now, in bytes."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 4 << 30  # unknown: a generous base, the CPU limit and timeout still hold


def _read(fd: int, pid: int, limits: Limits) -> tuple[bytes, str | None]:
    # A list of chunks, joined once: linear in the reply's size.
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + limits.timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            _kill(pid)
            return b"", "time"
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks), None
        size += len(chunk)
        if size > limits.reply_bytes:
            _kill(pid)
            return b"", "size"
        chunks.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:  # reaped by someone else (a SIGCHLD handler): say "crash"
            return 70 << 8


def _signalled(number: int, limits: Limits) -> ChildFailed:
    name = signal.Signals(number).name if number in signal.Signals._value2member_map_ \
        else str(number)
    if number == signal.SIGXCPU:
        return ChildFailed("time", f"over {limits.cpu_seconds} s of CPU time")
    if number == signal.SIGXFSZ:
        return ChildFailed("size", f"a file over {limits.file_bytes} bytes")
    if number == signal.SIGKILL:  # the kernel's OOM killer, or a cgroup's limit
        return ChildFailed("memory", "killed (SIGKILL), most likely out of memory")
    return ChildFailed("crash", f"died of {name}")
