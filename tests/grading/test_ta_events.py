"""The sandbox events kept for the TA (autograder.grading.ta_events): the runners' records are
read as untrusted data, kept beside the reports and taken out before those are published."""

from __future__ import annotations

import json
import os

from autograder.grading.ta_events import (
    MAX_EVENTS,
    TA_EVENTS_FILE,
    keep_sandbox_events,
    read_sandbox_events,
    take_kept_events,
)
from autograder.sandbox.events import EVENTS_SUFFIX, MAX_PER_KIND


def test_the_records_are_read_as_untrusted_data(tmp_path):
    """The runners' records of what sandboxes sent (autograder.sandbox.events): written by the
    grader alone, but their text came from a sandbox."""
    work = tmp_path / "work"
    work.mkdir()
    line = json.dumps({"kind": "network", "detail": "\x1b[2Jcleared"}).encode()
    (work / f"sandbox-1{EVENTS_SUFFIX}").write_bytes(
        line + b"\n" + b"{not json\n" + b"[1]\n\n"
        + json.dumps({"kind": "read", "detail": "x" * 5000}).encode() + b"\n")
    secret = tmp_path / "secret"
    secret.write_bytes(json.dumps({"kind": "secret", "detail": "linked"}).encode() + b"\n")
    os.symlink(secret, work / f"sandbox-2{EVENTS_SUFFIX}")  # never followed
    os.mkfifo(work / f"sandbox-3{EVENTS_SUFFIX}")  # never blocks
    (work / f"sandbox-4{EVENTS_SUFFIX}").write_bytes((line + b"\n") * 100000)  # bounded
    flood = b"".join(json.dumps({"kind": f"kind-{i}", "detail": ""}).encode() + b"\n"
                     for i in range(100))
    (work / f"sandbox-5{EVENTS_SUFFIX}").write_bytes(flood)
    if os.geteuid() == 0:  # a file not the grader's user's (read first, were it read)
        foreign = work / f"sandbox-0{EVENTS_SUFFIX}"
        foreign.write_bytes(json.dumps({"kind": "foreign", "detail": ""}).encode() + b"\n")
        os.chown(foreign, 12345, 12345)
    # The zygote's log is no channel: a marked line there is nobody's event.
    (work / "sandbox-7-zygote.log").write_bytes(
        b"autograder-sandbox-event " + json.dumps({"kind": "write", "detail": "log"}).encode())
    events = read_sandbox_events(work)
    assert events[0] == {"kind": "network", "detail": "\\x1b[2Jcleared"}  # made inert
    assert events[1]["kind"] == "read" and len(events[1]["detail"]) <= 300  # clipped
    # A few of each kind (one kind's flood pushes no other out), a bounded number in all.
    assert [e["kind"] for e in events].count("network") == MAX_PER_KIND
    assert len(events) == MAX_EVENTS
    seen = {e["kind"] for e in events}
    assert not seen & {"secret", "write", "foreign"}
    out = tmp_path / "out"
    keep_sandbox_events(work, out)
    assert (out / TA_EVENTS_FILE).is_file()
    assert take_kept_events(out) == events
    assert not (out / TA_EVENTS_FILE).exists()  # taken out, never published
    assert take_kept_events(out) == []
    keep_sandbox_events(tmp_path / "nothing", out)
    assert not (out / TA_EVENTS_FILE).exists()  # no events, no file
