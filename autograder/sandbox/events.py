"""The sandbox's events, received by the trusted side on channels only it reads.

The sandbox's audit hook (sandbox_runtime.worker._refuse_network) notes attempts the trusted
side cannot see itself: a refused socket the student's code caught, a write outside the sandbox,
a read of the grader's paths, a signal to the zygote. Each worker sends them on its own event
channel: one end of a SOCK_SEQPACKET socket pair made here for that worker, passed with the
request that forks it (the zygote closes its copy), one message per event. The other end never
leaves the trusted process, where a thread (`EventRecorder.watch`) reads each message as it
arrives and appends what it keeps to the grading's records file (`*EVENTS_SUFFIX`, next to the
zygote's log, written by this process only), which autograder.grading.ta_events reads.

So what a worker sent is out of its reach at once: a socket cannot be truncated, rewound or
reopened for reading through /proc/self/fd (a pipe's write end can: it would drain the events),
and nothing in the sandbox holds the records file. What student code can still do with its
channel, and what each earns (observed here, never taken from the sandbox):

- send more events: each is a flag on itself (kinds other than the hook's are "unexpected");
- send too much: over MAX_MESSAGES messages or MAX_BYTES bytes on one channel is a `flood`; the
  channel is then closed on our side (its later events are not read: the flag says so);
- send what is not an event (not the mark and one JSON object with a string kind and detail,
  longer than MAX_MESSAGE, empty, or carrying descriptors): `malformed`;
- close its end, or shut it down, while the worker still runs: `closed` (what it did after that
  was not seen). A worker's channel ends normally when the worker ends (exits, is killed, dies
  with its zygote): every holder of that end is then gone or exiting.

One more kind is the sandbox client's, not the channel's: `left_running`, processes a worker
left behind once it ended, which the client stopped (Sandbox._stop_strays).

Student code can also stop its hook from sending at all (rebinding what it calls), which hides
its later attempts and nothing more: these events are hints beside what the trusted side
observes itself, never the wall.

Kept: at most MAX_PER_KIND events of each kind, so a flood of one kind never pushes another
out. Only the standard library and processes' /proc entries.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

from autograder.sandbox.processes import PF_EXITING, process_start_time

EVENT_MARK = b"autograder-sandbox-event "  # sandbox_runtime.worker.EVENT_MARK
EVENTS_SUFFIX = "-events.jsonl"  # the records file: `<sandbox output stem>-events.jsonl`
# What the hook sends (`kind`); any other kind is kept as "unexpected", with the kind said.
SANDBOX_KINDS = ("network", "write", "read", "signal")
# What this side observes about a channel itself.
TRUSTED_KINDS = ("flood", "malformed", "closed", "left_running")
MAX_PER_KIND = 5  # events kept per kind (and per recorder)
MAX_DETAIL = 300
MAX_MESSAGE = 4096  # one event: the hook's are under 2 KiB
# One channel (a worker and what it starts): the hook sends at most 50 events per process.
MAX_MESSAGES = 200
MAX_BYTES = 256 << 10
# How long an ending channel waits to learn its worker's pid (the spawn that made it ends first).
PID_WAIT_SECONDS = 10.0


class EventRecorder:
    """Reads the event channels of one sandbox's workers and records what they say in `path`
    (a file created on the first event only, 0600, appended one JSON line per event kept)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._kept: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self.events: list[dict] = []  # what was kept, as written (for this process's readers)

    def channel(self) -> tuple[Channel, int]:
        """A new worker's channel: ours, already read by a thread, and the descriptor to pass
        to the worker (the caller closes it once passed on)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.shutdown(socket.SHUT_WR)  # nothing goes to the sandbox on it
        channel = Channel(ours, self.record)
        thread = threading.Thread(target=channel.drain, daemon=True, name="sandbox-events")
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()
        return channel, theirs.detach()

    def record(self, kind: str, detail: str) -> None:
        """Keep one event (the first MAX_PER_KIND of its kind) in the records file."""
        event = {"kind": kind, "detail": detail[:MAX_DETAIL]}
        line = (json.dumps(event) + "\n").encode()
        with self._lock:
            if self._kept.get(kind, 0) >= MAX_PER_KIND:
                return
            self._kept[kind] = self._kept.get(kind, 0) + 1
            self.events.append(event)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
            except OSError:
                return  # (the grader's own folder: only gone when grading is over)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def settle(self, timeout: float) -> None:
        """Wait (at most `timeout` in all) for the channels of ended workers to be read out."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class Channel:
    """Our end of one worker's event channel, read by `drain` (in its own thread)."""

    def __init__(self, sock: socket.socket, record: Callable[[str, str], None]) -> None:
        self._socket, self._record = sock, record
        self._pid: int | None = None
        self._started: str | None = None
        self._known = threading.Event()
        self.messages = self.size = 0
        self.malformed = 0

    def known(self, pid: int | None) -> None:
        """The worker's host pid (None: it was never forked, or ended before it could be
        looked up), which tells a channel closed early from a worker that ended."""
        if pid is not None and pid > 0:
            self._pid, self._started = pid, process_start_time(pid)
        self._known.set()

    def drain(self) -> None:
        try:
            while self._read_one():
                pass
        finally:
            # Shut down, not only closed: a fork of this process (a rank scenario's store)
            # may hold a copy of our end, and the worker's writes must fail, not block.
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._socket.close()

    def _read_one(self) -> bool:
        """Read one message and judge it; False when the channel is done."""
        try:
            data, _, flags, _ = self._socket.recvmsg(MAX_MESSAGE)
        except OSError:
            return False
        if not data and self._hung_up() and not self._queued():
            if self._still_running():
                self._record("closed", "its worker closed the channel and ran on: what it "
                                       "did after that was not seen")
            return False
        self.messages += 1
        self.size += len(data)
        if self.messages > MAX_MESSAGES or self.size > MAX_BYTES:
            self._record("flood", f"more than {MAX_MESSAGES} events or {MAX_BYTES >> 10} KiB "
                                  "from one worker (the rest were not read)")
            return False
        event = None
        if not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) and data.startswith(EVENT_MARK):
            event = _parse(data[len(EVENT_MARK):])
        if event is None:
            self.malformed += 1
            if self.malformed == 1:
                self._record("malformed", f"a message of {len(data)} bytes that is not one "
                                          "event")
            return True
        kind, detail = event
        if kind not in SANDBOX_KINDS:
            kind, detail = "unexpected", f"{kind[:40]}: {detail}"
        self._record(kind, detail)
        return True

    def _hung_up(self) -> bool:
        """An empty read is the end of the channel, or an empty message (which leaves the
        channel open): the end only when every holder of the other end closed or shut it."""
        poll = select.poll()
        poll.register(self._socket, select.POLLRDHUP | select.POLLHUP)
        return any(events & (select.POLLRDHUP | select.POLLHUP)
                   for _, events in poll.poll(0))

    def _queued(self) -> int:
        """Bytes still to read (of every message queued: a SEQPACKET socket counts them all),
        so that an empty message never hides the events sent after it."""
        try:
            raw = fcntl.ioctl(self._socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int.from_bytes(raw, sys.byteorder)

    def _still_running(self) -> bool:
        """Whether the worker is still there and not ending (any of its threads)."""
        self._known.wait(PID_WAIT_SECONDS)
        pid = self._pid
        if pid is None or self._started is None or process_start_time(pid) != self._started:
            return False
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return False
        return any(_task_running(pid, task) for task in tasks)


def _task_running(pid: int, task: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        fields = stat[stat.rfind(")") + 2:].split()
        state, flags = fields[0], int(fields[6])
    except (OSError, ValueError, IndexError):
        return False
    return state not in ("Z", "X", "x") and not flags & PF_EXITING


def _parse(raw: bytes) -> tuple[str, str] | None:
    """`(kind, detail)` of one event's JSON, or None when it is not one."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if type(data) is not dict or type(data.get("kind")) is not str \
            or type(data.get("detail", "")) is not str or not data["kind"]:
        return None
    return data["kind"], data.get("detail", "")
