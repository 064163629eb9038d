"""A rank of the grader's own in a student's process group: the observer of a scenario.

What a rank scenario reports comes from the student's processes, whose import-time code can
forge it. An observer is one rank of the scenario that the grader runs itself: a fork of the
trusted runner (torch already imported), in the sandbox's network namespace, running a trusted
function (an assignment's observers.py, never copied into the sandbox) as that rank of the
group. What it records of the collectives the student's ranks posted (how many, their sizes,
what they carried, when they came) is written by trusted code only.

gloo treats a peer's mistakes harshly: a rank that receives more bytes than it posted aborts
(SIGABRT, which nothing catches), and a collective that nobody else posts waits until the group's
timeout. So the observer notes what it is about to do before each step (`Seat.note`), so that
an abort says where it happened, and writes its record last, to files of the runner's that the
sandbox cannot reach. What it saw is the scenario's verdict: a failure it saw is the student's
(`Observed.failure`), not a hang or a crash to retry.

The process (`ObserverHost`) serves a sandbox's scenarios one after another: forking a process
that has torch loaded, and ending it, cost more than most observers' own work (~20 ms of CPU a
scenario: page tables, copied pages, teardown). It takes the next scenario only after one whose
record says nothing went wrong and whose observer was reset (`Observer.reset`: its groups
destroyed, no thread of its own left); after anything else (a failure seen, an abort, a kill,
a reset that failed) it ends, and the next scenario gets a fresh one.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import pickle
import re
import resource
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder.project.inert import inert
from autograder.sandbox.isolation import OBSERVER_UID_RANGE, sandbox_ids
from autograder.sandbox.launcher import LINUX_CAPABILITY_VERSION_3, PR_SET_NO_NEW_PRIVS
from autograder.sandbox.rendezvous import AGENT_STORE_ENV, enter_network
from autograder.sandbox_runtime.groups import native_threads

_PR_SET_PDEATHSIG = 1
MAX_RECORD_BYTES = 1 << 20  # what is read back of its notes and record
MAX_OUTPUT_BYTES = 64 << 10  # what is read back of its output (the end of it)
NOTES_KEPT = 3  # the last notes shown with a failure
GRACE_SECONDS = 2.0  # past its time (or its wait, once the student's ranks ended): killed
READY_SECONDS = 2.0  # for a host's reset after a scenario; past it, a fresh host


class ObserverBroken(Exception):
    """The observer's own code raised: the grader's failure, never the student's (what the
    student's ranks do wrong, an observer says in its record, or gloo says by aborting it)."""


@dataclass(frozen=True)
class Seat:
    """What the observer process is told of its scenario."""

    rank: int
    world_size: int
    ports: tuple[int, ...]  # the scenario's rendezvous stores
    host: str  # where they listen
    wait: float  # seconds to wait for any one collective of the student's ranks
    timeout: float  # seconds it has in all (the scenario's)
    note: Callable[[str], None]  # one line on what it is about to do, written at once
    joined: Callable[[], None]  # says it has met the student's ranks (their group is up)
    ranks: tuple[int, ...] = ()  # the student's rank processes (pids here; () unknown)


@dataclass(frozen=True)
class Observer:
    """A rank the grader runs in a scenario (Sandbox.run_ranks(observer=...)): `run` is called
    in the observer process and returns its record (plain JSON data; a str under "failure"
    when it saw the student's ranks do wrong). It is pickled to that process: module-level
    functions (or partials of them) and plain data only.

    `reset`, called there once the record is written when it says nothing went wrong, readies
    the process for another scenario (True); None, False or an exception end it instead."""

    rank: int
    run: Callable[[Seat], dict]
    wait: float = 3.0
    reset: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Observed:
    """How an observer ended, and what it recorded."""

    record: dict | None  # None: it wrote none (it was killed, or raised)
    notes: tuple[str, ...]  # its last notes
    joined: bool  # whether it met the student's ranks (Seat.joined)
    ended: str | None  # how it ended when not by returning its record
    output: str  # the end of what it printed (gloo's message, when gloo aborted it)
    # It waited in vain for the student's ranks: a collective of its own went unanswered (or
    # gloo ended it: a peer gone), or it was still waiting when they had ended. What they
    # raised came first, then; not so when it ended on its own (a wrong value it saw, gloo
    # aborting it), after which their collectives fail for want of it.
    waited_in_vain: bool = False

    def failure(self) -> str | None:
        """What the observer saw go wrong, for the student; None when it saw nothing wrong."""
        if self.record is not None and self.ended is None:
            said = self.record.get("failure")
            return None if said is None else inert(str(said))[:2000]
        where = f" at: {self.notes[-1]}" if self.notes else " before its first collective"
        detail = _gloo_message(self.output)
        return inert(f"the grader's own rank in this scenario {self.ended}{where}"
                      + (f" ({detail})" if detail else ""))[:2000]


class ObserverHost:
    """The process that runs a sandbox's observers, one scenario at a time: a fork of this
    (trusted) process, in the sandbox's network namespace (`netns_pid`; None: this one), as
    a fresh unprivileged uid. Told each scenario through a socket (the pickled observer and
    seat, with the runner's files for its record and output); it answers "d" once the record
    is written and "r" once reset for the next."""

    def __init__(self, netns_pid: int | None) -> None:
        self.netns_pid = netns_pid
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.pid = os.fork()
            if self.pid == 0:
                ours.close()
                _host(theirs.fileno(), netns_pid)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._channel = ours
        self._status: int | None = None
        self._ready = True  # it would read a scenario now: fresh, or its "r" read since
        self.busy = False  # a scenario sent, its "d" not yet read
        # How the last scenario ended: None by its "d", else the process's exit code
        self.ended_with: int | None = None

    def ready(self, seconds: float) -> bool:
        """Whether it can take a scenario: fresh, or reset after the last one within
        `seconds` (it is then reused; not otherwise)."""
        if not self._ready and not self.busy:
            self._ready = self._message(seconds) == b"r"
        if self._ready and self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:  # (it ended since: sent a scenario, it would be blamed)
                self._status, self._ready = status, False
        return self._ready

    def observe(self, observer: Observer, world_size: int, ports: list[int], host: str,
                folder: Path, timeout: float, ranks: tuple[int, ...] = ()
                ) -> ObserverProcess:
        """Send it one scenario; the handle to wait for its end and read its record."""
        try:
            spec = pickle.dumps((observer, world_size, tuple(ports), host, timeout,
                                 tuple(ranks)))
        except Exception as exc:  # noqa: BLE001 - the grader's own mistake, said plainly
            raise TypeError(f"an observer goes to its process pickled (a module-level "
                            f"function, data, tensors): {type(exc).__name__}: {exc}") from None
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / name for name in ("observer.spec", "observer.jsonl", "observer.log")]
        fds: list[int] = []
        try:
            for path in paths:
                fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600))
            os.write(fds[0], spec)  # (the file is ours: it reads this very fd, from the start)
            os.lseek(fds[0], 0, os.SEEK_SET)
            try:
                socket.send_fds(self._channel, [b"s"], fds)
            except OSError:
                pass  # (it has ended: the handle finds out how)
        finally:
            for fd in fds:
                os.close(fd)
        self._ready, self.busy = False, True
        return ObserverProcess(self, paths[1], paths[2], timeout)

    def done(self, seconds: float) -> bool:
        """Whether the scenario in flight ended within `seconds`: its "d" read, or the
        process ended."""
        if self.busy:
            message = self._message(seconds)
            if message is None:
                return False
            self.busy = False
            self.ended_with = None if message == b"d" else self.exit_code()
        return True

    def _message(self, seconds: float) -> bytes | None:
        """Its next message within `seconds` (b"" once it ended; None: none yet)."""
        if self._status is not None:
            return b""
        poller = select.poll()
        poller.register(self._channel, select.POLLIN)
        if not poller.poll(max(0, math.ceil(seconds * 1000))):
            return None
        try:
            message = self._channel.recv(1)
        except OSError:
            message = b""
        if not message:
            _, self._status = os.waitpid(self.pid, 0)  # (its channel closes as it ends)
        return message

    def exit_code(self) -> int | None:
        """How it ended (as os.waitstatus_to_exitcode), once it has; None while it runs."""
        return None if self._status is None else os.waitstatus_to_exitcode(self._status)

    def kill(self) -> None:
        if self._status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, self._status = os.waitpid(self.pid, 0)
        if self.busy:
            self.busy, self.ended_with = False, self.exit_code()
        self._channel.close()


class ObserverProcess:
    """One scenario's observer, run by an ObserverHost."""

    def __init__(self, host: ObserverHost, record_path: Path, output_path: Path,
                 timeout: float) -> None:
        self.host = host
        self.record_path, self.output_path = record_path, output_path
        self.deadline = time.monotonic() + timeout + GRACE_SECONDS

    def finish(self, grace: float) -> Observed:
        """Wait for it to end, once the student's ranks have ended: at most `grace` seconds
        (nothing can answer its collectives any more), then kill it; read what it left."""
        ended, waiting = None, False
        if not self.ends_within(min(self.deadline, time.monotonic() + grace) - time.monotonic()):
            self.kill()
            ended, waiting = "was still waiting when your ranks had ended", True
        notes, joined, raised, record = self._read_records()
        if raised is not None:
            raise ObserverBroken(f"the grader's own rank raised {raised}"
                                 + (f" at: {notes[-1]}" if notes else ""))
        if ended is None:
            code = self.host.ended_with
            if code is not None and code < 0:
                ended = f"was killed by {signal.Signals(-code).name}"
            elif record is None:
                ended = "ended without a record"
        output = _tail(self.output_path, MAX_OUTPUT_BYTES)
        unanswered = ended is None and record is not None and record.get("unanswered") is True
        return Observed(record, tuple(notes[-NOTES_KEPT:]), joined, ended, output,
                        waiting or unanswered)

    def ends_within(self, seconds: float) -> bool:
        """Whether it ends within `seconds` (not killed meanwhile)."""
        return self.host.done(seconds)

    def ended(self) -> bool:
        """Whether it has ended, as far as can be told at once."""
        return self.host.done(0.0)

    def kill(self) -> None:
        """Kill it, unless it has ended (its host then serves the next scenario)."""
        if self.host.busy:
            self.host.kill()

    def _read_records(self) -> tuple[list[str], bool, str | None, dict | None]:
        """Its notes, whether it joined, what it raised (None: nothing) and its record (None:
        none)."""
        notes: list[str] = []
        joined, raised, record = False, None, None
        try:
            with open(self.record_path, "rb") as f:
                data = f.read(MAX_RECORD_BYTES + 1)
        except OSError:
            data = b""
        if len(data) > MAX_RECORD_BYTES:
            raise ObserverBroken(f"the grader's own rank wrote more than "
                                 f"{MAX_RECORD_BYTES >> 20} MB of notes and record")
        lines = data.decode(errors="replace").splitlines()
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # (a last line cut at the cap)
            if type(entry) is not dict:
                continue
            if type(entry.get("note")) is str:
                notes.append(entry["note"][:500])
            elif entry.get("joined") is True:
                joined = True
            elif type(entry.get("raised")) is str:
                raised = entry["raised"][:1000]
            elif type(entry.get("record")) is dict:
                record = entry["record"]
        return notes, joined, raised, record

def _host(channel_fd: int, netns_pid: int | None) -> None:
    """The host process: never returns. Set up once (no channel of the runner's but its own,
    the sandbox's network, no root), then one scenario per message until one leaves it unfit."""
    broken = None
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = sorted({0, 1, 2, channel_fd})
        for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
            os.closerange(low + 1, high)  # none of the runner's channels stays open here
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the runner
        enter_network(netns_pid)
        if os.geteuid() == 0:
            _drop_root()
        os.environ.update(AGENT_STORE_ENV)
    except BaseException as exc:  # noqa: BLE001 - said in the first scenario's record
        broken = f"{type(exc).__name__}: {exc}"[:1000]
    try:
        gc.freeze()  # (a reset's collection walks what scenarios made, not the runner's pages)
        threads = threading.active_count(), native_threads()
        channel = socket.socket(fileno=channel_fd)
        while True:
            _, fds, _, _ = socket.recv_fds(channel, 1, 3)
            if len(fds) != 3:
                break  # (the runner closed its end)
            reset = _scenario(*fds, broken)
            channel.sendall(b"d")
            if reset is None or not _reset(reset, threads):
                break
            channel.sendall(b"r")
    finally:
        os._exit(0)  # no interpreter teardown: gloo's, with a peer's state, may abort


def _scenario(spec_fd: int, record_fd: int, output_fd: int, broken: str | None
              ) -> Callable[[], bool] | None:
    """Run one scenario's observer in the host: its reset when the host may serve another
    (its record says nothing went wrong), else None."""
    try:
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        with os.fdopen(spec_fd, "rb", closefd=False) as spec:
            observer, world_size, ports, host, timeout, ranks = pickle.load(spec)
        if broken is not None:
            raise OSError(broken)
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        cpu = math.ceil(used + timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (
            cpu if hard == resource.RLIM_INFINITY else min(cpu, hard), hard))

        def note(text: str) -> None:
            _write(record_fd, {"note": str(text)[:500]})

        def joined() -> None:
            _write(record_fd, {"joined": True})

        seat = Seat(observer.rank, world_size, ports, host, observer.wait, timeout, note, joined,
                    ranks)
        record = observer.run(seat)
        _write(record_fd, {"record": record})
    except BaseException as exc:  # noqa: BLE001 - said in its record, for the runner
        try:
            _write(record_fd, {"raised": f"{type(exc).__name__}: {exc}"[:1000]})
        except BaseException:  # noqa: BLE001, S110 - nothing more can be said
            pass
        return None
    finally:
        for fd in (spec_fd, record_fd, output_fd):
            os.close(fd)
        # No limit between scenarios (its reset and wait are bounded by the runner's kill): a
        # limit run out meanwhile would kill it in the next scenario, the student's verdict.
        resource.setrlimit(resource.RLIMIT_CPU, (resource.getrlimit(resource.RLIMIT_CPU)[1],) * 2)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # (what it printed is this scenario's)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)  # (a reset's messages are no scenario's)
        os.close(null)
    return None if type(record) is not dict or "failure" in record else observer.reset


def _reset(reset: Callable[[], bool], threads: tuple[int, int]) -> bool:
    """Whether `reset` readied the host for another scenario, leaving no more threads than
    `threads` (the host's own: Python's, and all of them), so none of gloo's (a device still
    alive, named or not yet) or another thread of the scenario's."""
    try:
        return reset() is True and threading.active_count() <= threads[0] \
            and native_threads() <= threads[1]
    except BaseException:  # noqa: BLE001 - not fit for another scenario, that is all
        return False


# Of root's capabilities, the observer keeps one where it has it: reading any file. torch
# imports modules lazily, and the interpreter may live where another uid cannot read (/root,
# 0700); in a container, where the capability is not granted, it lives where all may read.
_CAP_DAC_READ_SEARCH = 2
_PR_SET_KEEPCAPS = 8


def _drop_root() -> None:
    """Become a fresh unprivileged uid (it reads what the student's ranks send, through gloo's
    C++: not as root, nor as the sandbox's uid, which could signal it) that may still read
    files, and gain no privilege again."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = sandbox_ids(OBSERVER_UID_RANGE)
    _check(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)  # (the effective capabilities go; with KEEPCAPS the permitted ones stay)
    kept = (1 << _CAP_DAC_READ_SEARCH) & _permitted()  # (Docker's default set lacks it)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)(kept, kept, 0, 0, 0, 0)), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _permitted() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapPrm:"):
                return int(line.split()[1], 16)
    return 0


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _write(fd: int, entry: dict) -> None:
    data = (json.dumps(entry, default=str) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def until_blocked(pids: tuple[int, ...], at_most: float, interval: float = 0.002) -> bool:
    """Wait until no thread of the processes `pids` runs or can run: every one asleep (or
    stopped, or ended) at two looks `interval` apart, none having run in between. True when
    they blocked; False after `at_most` seconds, and when they cannot be seen (no pid, a /proc
    that hides them), after `at_most` seconds too: as long as a caller would wait without this.

    Read from the kernel (/proc/PID/task/*/stat and schedstat), never from the processes: what
    they report of themselves can be forged, their scheduling state cannot."""
    deadline = time.monotonic() + at_most
    try:
        last = _run_time(pids)
        while time.monotonic() < deadline:
            time.sleep(interval)
            now = _run_time(pids)
            if now is not None and now == last:
                return True
            last = now
    except _Unseen:
        time.sleep(max(0.0, deadline - time.monotonic()))
    return False


class _Unseen(Exception):
    """The processes' threads cannot be read here."""


def _run_time(pids: tuple[int, ...]) -> int | None:
    """The summed run time (ns) of the processes' threads while every one of them sleeps; None
    while one runs or waits to run (or is in the kernel's uninterruptible wait)."""
    if not pids:
        raise _Unseen()
    total = 0
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue  # ended: it runs nothing more
        except OSError:
            raise _Unseen() from None
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
                    state = stat.read().rsplit(b")", 1)[1].split(None, 1)[0]
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as schedstat:
                    total += int(schedstat.read().split(None, 1)[0])
            except FileNotFoundError:
                continue  # the thread ended
            except (OSError, ValueError, IndexError):
                raise _Unseen() from None
            if state not in _ASLEEP:
                return None
    return total


_ASLEEP = (b"S", b"T", b"t", b"Z", b"X", b"I")  # (of /proc's states: not R, nor D)


def _tail(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - limit))
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


# gloo's words for what a peer did: a size mismatch (the abort), a wait in vain, a peer gone.
_GLOO_LINE = re.compile(r"(Received data size doesn't match expected size[^\n]*|"
                        r"op\.preamble\.length <= op\.nbytes[^\n]*|Timed out waiting[^\n]*|"
                        r"Connection (?:closed|reset) by peer[^\n]*)")


def _gloo_message(output: str) -> str:
    found = _GLOO_LINE.findall(output)
    return found[-1].strip()[:300] if found else ""
