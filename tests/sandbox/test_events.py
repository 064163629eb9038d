"""The sandbox's event channels (autograder.sandbox.events), with real sandbox processes: what a
worker's audit hook sends reaches the trusted side at once and nothing in the sandbox takes it
back; flooding, malformed messages and closing the channel early are flags of their own; a
clean worker, ending or killed, leaves nothing."""

from __future__ import annotations

import json
import stat
import time

import pytest

from autograder.sandbox.client import SandboxFailure
from autograder.sandbox.events import EVENT_MARK, MAX_MESSAGES, MAX_PER_KIND

STUDENT = """
import json, os, socket, stat, time

MARK = b"autograder-sandbox-event "


def _held(kind=None):
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            mode = os.fstat(int(name)).st_mode
        except OSError:
            continue  # (the listing's own descriptor)
        if kind is None or kind(mode):
            found.append(int(name))
    return found


def add(a, b):
    return a + b


def acts():
    # What the hook notes: a refused connection (caught) and a listing of PID 1's folder.
    try:
        socket.create_connection(("203.0.113.9", 80), timeout=1)
    except OSError:
        pass
    os.listdir("/proc/1")
    return len(_held(stat.S_ISSOCK))


def erase():
    # Every descriptor: truncated, rewound, reopened for reading (a pipe's write end opens
    # that way) and drained.
    done = []
    for fd in _held():
        for attempt in (lambda: os.ftruncate(fd, 0), lambda: os.lseek(fd, 0, 0),
                        lambda: _drain(fd)):
            try:
                attempt()
                done.append(fd)
            except OSError:
                pass
    return sorted(set(fd for fd in done if stat.S_ISSOCK(os.fstat(fd).st_mode)))


def _drain(fd):
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while os.read(other, 1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        os.close(other)


def send(*messages):
    for fd in _held(stat.S_ISSOCK):
        for message in messages:
            os.write(fd, message)
    return True


def send_a_descriptor():
    for fd in _held(stat.S_ISSOCK):
        event = MARK + json.dumps({"kind": "network", "detail": "with a descriptor"}).encode()
        socket.send_fds(socket.socket(fileno=os.dup(fd)), [event], [0])
    return True


def flood():
    started, sent = time.monotonic(), 0
    event = MARK + json.dumps({"kind": "network", "detail": "again"}).encode()
    for fd in _held(stat.S_ISSOCK):
        try:
            while sent < 100000:
                os.write(fd, event)
                sent += 1
        except OSError:
            pass
    return sent, time.monotonic() - started


def close_channel():
    for fd in _held(stat.S_ISSOCK):
        os.close(fd)
    return True


def shut_channel():
    for fd in _held(stat.S_ISSOCK):
        socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_WR)
    return True


def empty_then_acts_then_exit():
    send(b"")  # an empty message reads like the channel's end: it must hide nothing after it
    acts()
    os._exit(0)
"""


def recorded(sandbox) -> list[dict]:
    """The events kept, once the sandbox is closed (its channels read out)."""
    sandbox.close()
    path = sandbox.events.path
    on_disk = [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []
    assert on_disk == sandbox.events.events
    if path.exists():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return on_disk


def kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


def test_events_reach_the_grader_and_nothing_in_the_sandbox_takes_them_back(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call("acts", (), {}) == 1  # its own channel: its one socket
    assert sandbox.call("erase", (), {}) == []  # a socket cannot be truncated, rewound, opened
    assert sandbox.call("add", (2, 3), {}) == 5
    events = recorded(sandbox)
    assert kinds(events) == ["network", "read"]
    assert "203.0.113.9" in events[0]["detail"] and "/proc/1" in events[1]["detail"]


def test_a_clean_worker_leaves_nothing_however_it_ends(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call("add", (2, 3), {}) == 5
    sandbox.restart()  # killed by the grader
    assert sandbox.call("add", (1, 1), {}) == 2
    with pytest.raises(SandboxFailure):
        sandbox.call("empty_then_acts_then_exit", (), {})  # ends on its own (the events: below)
    assert sandbox.call("add", (1, 2), {}) == 3
    events = recorded(sandbox)
    assert "closed" not in kinds(events)
    # What it sent after an empty message still arrived, though it exited right after.
    assert kinds(events) == ["malformed", "network", "read"]


@pytest.mark.parametrize("how", ["close_channel", "shut_channel"])
def test_closing_the_channel_while_running_is_a_flag(make_sandbox, how):
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call(how, (), {}) is True
    assert sandbox.call("acts", (), {}) == (0 if how == "close_channel" else 1)  # unseen now
    # The channel's reader judges the worker while it runs on: on a loaded machine, give its
    # thread the time to (closing the sandbox first would end the worker it must see running).
    deadline = time.monotonic() + 10
    while "closed" not in kinds(sandbox.events.events) and time.monotonic() < deadline:
        time.sleep(0.01)
    events = recorded(sandbox)
    assert kinds(events) == ["closed"]
    assert "ran on" in events[0]["detail"]


def test_a_flood_is_a_flag_cut_short_and_pushes_no_other_kind_out(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call("acts", (), {}) == 1
    sent, seconds = sandbox.call("flood", (), {})
    assert sent < 100000 and seconds < 5  # our end shut: its writes fail, they never block
    events = recorded(sandbox)
    assert kinds(events).count("network") == MAX_PER_KIND  # kept: a few of each kind
    assert set(kinds(events)) == {"network", "read", "flood"}
    assert str(MAX_MESSAGES) in next(e for e in events if e["kind"] == "flood")["detail"]


def test_what_is_not_an_event_is_a_flag_and_a_made_up_kind_is_kept_as_unexpected(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    forged = EVENT_MARK + json.dumps({"kind": "all-clear", "detail": "\x1b[2Jnothing"}).encode()
    messages = [b"no mark", EVENT_MARK + b"{not json", EVENT_MARK + b'["a list"]',
                EVENT_MARK + b'{"kind": 3}', EVENT_MARK + b"x" * 5000, forged]
    assert sandbox.call("send", tuple(messages), {}) is True
    sandbox.restart()  # a new worker, a new channel: one malformed flag per channel
    assert sandbox.call("send_a_descriptor", (), {}) is True  # an event, with a descriptor
    events = recorded(sandbox)
    assert kinds(events) == ["malformed", "unexpected", "malformed"]  # (no "network")
    assert events[1]["detail"] == "all-clear: \x1b[2Jnothing"  # (made inert where it is read)
