"""The sandbox events of one grading, kept for the TA beside its reports.

The runners record what each sandbox sent on its event channel (autograder.sandbox.events) in
the grader's work folder; before that folder goes, `keep_sandbox_events` copies them into the
output folder as `TA_EVENTS_FILE`, and whoever publishes the reports (a batch, Gradescope's entry
point) takes them out with `take_kept_events` first: no student report reads them. What the
events mean for a submission is autograder.batch.submission_status's to say.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from autograder.project.inert import clip, inert
from autograder.sandbox.events import EVENTS_SUFFIX, MAX_PER_KIND

TA_EVENTS_FILE = "ta-sandbox-events.json"  # next to the reports; taken out by the batch
MAX_RECORDS_BYTES = 1 << 20  # read of one records file (what is in it came from a sandbox)
MAX_EVENTS = 40
MAX_DETAIL = 300  # of one event's detail


def read_sandbox_events(workdir: Path) -> list[dict]:
    """The events the sandboxes of one grading sent, as its runners received and recorded them
    (`*-events.jsonl` in the grader's folder, see autograder.sandbox.events). Only our own
    runners write these files (one not ours is not read), but their text came from sandboxes:
    each is opened without following links, read only when it is a regular file, at most
    MAX_RECORDS_BYTES of it; at most MAX_PER_KIND events of a kind are kept (a flood of one
    kind hides no other), MAX_EVENTS in all, clipped and inert."""
    events: list[dict] = []
    kept: dict[str, int] = {}
    try:
        records = sorted(p for p in workdir.iterdir() if p.name.endswith(EVENTS_SUFFIX))
    except OSError:
        return events
    for path in records:
        for raw in _bounded_read(path, owned=True).split(b"\n"):
            try:
                data = json.loads(raw)
            except ValueError:
                continue  # (an empty line; our runner writes nothing else)
            if not isinstance(data, dict) or len(events) >= MAX_EVENTS:
                continue
            kind = clip(inert(str(data.get("kind", ""))), 40)
            if kept.get(kind, 0) >= MAX_PER_KIND:
                continue
            kept[kind] = kept.get(kind, 0) + 1
            events.append({"kind": kind,
                           "detail": clip(inert(str(data.get("detail", ""))), MAX_DETAIL)})
    return events


def _bounded_read(path: Path, owned: bool = False) -> bytes:
    """At most MAX_RECORDS_BYTES of a regular file (`owned`: only one of this user's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or (owned and found.st_uid != os.geteuid()):
            return b""
        return os.read(fd, MAX_RECORDS_BYTES)
    except OSError:
        return b""
    finally:
        os.close(fd)


def keep_sandbox_events(workdir: Path, out: Path) -> None:
    """Before the grader's folder goes: its sandbox events into OUT/TA_EVENTS_FILE (written
    only when there are any), for the batch to record; no student report reads it."""
    events = read_sandbox_events(workdir)
    if not events:
        return
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{TA_EVENTS_FILE}.tmp"
    tmp.write_text(json.dumps(events), encoding="utf-8")
    os.replace(tmp, out / TA_EVENTS_FILE)


def take_kept_events(folder: Path) -> list[dict]:
    """The events keep_sandbox_events left in `folder`, removed from it (so they are never
    published with the student's reports)."""
    path = folder / TA_EVENTS_FILE
    try:
        data = json.loads(_bounded_read(path) or b"[]")
    except ValueError:
        data = [{"kind": "unreadable", "detail": "the sandbox event file could not be read"}]
    path.unlink(missing_ok=True)
    if not isinstance(data, list):
        return []
    return [e for e in data if isinstance(e, dict)][:MAX_EVENTS]
