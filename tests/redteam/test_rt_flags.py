"""Red team: erasing or hiding what the sandbox's audit hook noted for the TA.

The hook's events (a refused socket, a write outside the sandbox, a read of the grader's paths,
a signal to PID 1) leave each worker on its own event channel, one end of a socket pair that
only the trusted runner reads, as they arrive (autograder.sandbox.events). A red-team review
found the old channel, a descriptor of the zygote's log inherited by every worker, erasable: one
`ftruncate` of it after the acts, and the submission's status was `ok`. These submissions do
the same acts, then try everything on every descriptor they hold (truncate, rewind, reopen
through /proc/self/fd to drain, flood, close); each must stay `flagged` with the acts' reasons,
and the tampering that shows is a flag of its own. The student's report never says a word.
"""

from __future__ import annotations

import json

import pytest
from red_team import ADD_NUMBERS, ANSWERS, HONEST, assert_sound, legit_max, observation

from autograder.batch.submission_status import EVENT_REASONS, derive
from autograder.grading.results import Report
from autograder.grading.ta_events import TA_EVENTS_FILE

pytestmark = pytest.mark.slow  # each grading takes 5-15 s

# The acts the hook notes, each caught, so that nothing shows in the report; harmless wherever
# they run (signal 0 only asks whether PID 1 exists).
ACTS = """
import os, socket


def _acts():
    for attempt in (lambda: socket.create_connection(("203.0.113.9", 80), timeout=1),
                    lambda: open("/etc/autograder-was-here", "w"),
                    lambda: open("/proc/1/environ", "rb").read(),
                    lambda: os.listdir("/proc/1"),
                    lambda: os.kill(1, 0)):
        try:
            attempt()
        except Exception:
            pass
"""

ERASERS = """
import os, stat, time


def _fds():
    return sorted(int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2)


def _kind(fd):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return "gone"
    return "socket" if stat.S_ISSOCK(mode) else "pipe" if stat.S_ISFIFO(mode) else \\
        "file" if stat.S_ISREG(mode) else "other"


def truncate_everything():
    # Every descriptor held, 0 to 2 included: truncated, rewound, and reopened for reading
    # through /proc/self/fd (a pipe's write end opens that way) to drain what it holds.
    done = {}
    for fd in [0, 1, 2, *_fds()]:
        tried = []
        for name, attempt in (("truncate", lambda: os.ftruncate(fd, 0)),
                              ("rewind", lambda: os.lseek(fd, 0, os.SEEK_SET)),
                              ("drain", lambda: _drain(fd))):
            try:
                attempt()
                tried.append(name)
            except OSError:
                pass
        done[fd] = (_kind(fd), tried)
    return done


def _drain(fd):
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while os.read(other, 1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        os.close(other)


def flood_everything():
    # Forged "all clear" events, malformed ones and plain noise on every socket held; the
    # pipes carry this worker's own replies, which noise would only break.
    sent = 0
    forged = b'autograder-sandbox-event {"kind": "ok", "detail": "all clear"}\\n'
    messages = (forged, b"", b"autograder-sandbox-event {not json", b"x" * 3000)
    for fd in _fds():
        if _kind(fd) != "socket":
            continue
        try:
            for i in range(2000):
                os.write(fd, messages[i % len(messages)])
                sent += 1
        except OSError:
            pass
    return sent


def close_everything():
    # Every socket held (the request and reply pipes are needed to answer), then carry on.
    closed = []
    for fd in _fds():
        if _kind(fd) == "socket":
            os.close(fd)
            closed.append(fd)
    return closed
"""


def submission(*erasers: str) -> dict:
    """The toy's right answers; `add` does the acts, then each eraser in turn."""
    calls = "".join(f"        seen[{name!r}] = {name}()\n" for name in erasers)
    source = f"""
@@GOOD@@
{ACTS}
{ERASERS}
_acts()  # at import too
SEEN = {{}}


def add(a, b):
    global SEEN
    if not SEEN:
        _acts()
        seen = {{"fds": [(fd, _kind(fd)) for fd in [0, 1, 2, *_fds()]]}}
{calls}        SEEN = seen
        time.sleep(0.5)  # still running after the tampering
        print(f"ERASE{{{{{{seen}}}}}}ERASE")
    return a + b
"""
    return dict(files={"toy.py": source, "answers.yml": ANSWERS})


SUBMISSIONS = {
    "clean_reference": dict(files={"toy.py": "@@GOOD@@", "answers.yml": ANSWERS}),
    "acts_only": submission(),
    "acts_then_truncate": submission("truncate_everything"),
    "acts_then_flood": submission("flood_everything"),
    "acts_then_close": submission("close_everything"),
    "acts_then_everything": submission("truncate_everything", "flood_everything",
                                       "close_everything"),
    "acts_then_everything_uid": {**submission("truncate_everything", "flood_everything",
                                              "close_everything"), "isolation": "uid"},
}

# What the acts earn, in whichever isolation (the reasons' first words, as derive gives them).
ACT_REASONS = ("network", "write", "read", "signal")


def status_of(graded):
    """The submission's status as a batch records it, from the TA's events file (left in
    place: the batch takes it out, the single grading leaves it next to the reports)."""
    path = graded.out / TA_EVENTS_FILE
    events = json.loads(path.read_text()) if path.exists() else []
    return derive(Report.from_json(graded.report), None, events)


def reasons(found) -> set[str]:
    by_text = {text: kind for kind, text in EVENT_REASONS.items()}
    return {next((kind for text, kind in by_text.items() if flag.startswith(text)), flag)
            for flag in found.flags}


def assert_flagged_quietly(graded, secrets, *tampering: str) -> None:
    assert_sound(graded, legit_max(HONEST), secrets)
    assert graded.passed() >= set(HONEST)  # tampering costs no points: the TA decides
    found = status_of(graded)
    assert found.status == "flagged", found
    assert reasons(found) >= {*ACT_REASONS, *tampering}, found.flags
    for word in ("flag", "event channel", "tried the network", "outside its sandbox"):
        assert word not in graded.everything(), word  # the student's report says nothing


@pytest.mark.submission("clean_reference")
def test_a_clean_reference_stays_ok(graded, secrets):
    assert_sound(graded, legit_max(HONEST), secrets)
    found = status_of(graded)
    assert (found.status, found.flags) == ("ok", [])


@pytest.mark.submission("acts_only")
def test_the_acts_alone_are_flagged_with_their_reasons(graded, secrets):
    assert_flagged_quietly(graded, secrets)
    assert reasons(status_of(graded)) == set(ACT_REASONS)  # nothing else


@pytest.mark.submission("acts_then_truncate")
def test_truncating_rewinding_and_draining_every_descriptor_erases_nothing(graded, secrets):
    assert_flagged_quietly(graded, secrets)
    seen = observation(graded, ADD_NUMBERS, "ERASE")
    assert "socket" in seen and "truncate_everything" in seen, seen
    # A socket cannot be truncated, rewound or reopened: what was sent is the grader's.
    assert reasons(status_of(graded)) == set(ACT_REASONS)


@pytest.mark.submission("acts_then_flood")
def test_flooding_the_channel_is_a_flag_and_hides_no_other(graded, secrets):
    # The forged "all clear" is one more flag on itself, under a kind it cannot choose.
    assert_flagged_quietly(graded, secrets, "flood", "malformed", "unexpected")


@pytest.mark.submission("acts_then_close")
def test_closing_the_channel_while_running_is_a_flag(graded, secrets):
    assert_flagged_quietly(graded, secrets, "closed")


@pytest.mark.submission("acts_then_everything")
def test_every_eraser_at_once_still_leaves_every_flag(graded, secrets):
    assert_flagged_quietly(graded, secrets, "flood", "malformed")


@pytest.mark.submission("acts_then_everything_uid")
def test_every_eraser_at_once_in_uid_mode(graded, secrets):
    if graded.refused:
        pytest.skip(f"uid mode does not start here: {graded.refused}")
    assert graded.isolation == "uid"
    assert_flagged_quietly(graded, secrets, "flood", "malformed")
