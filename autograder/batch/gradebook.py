"""The class gradebook: every grading run of every submission, in SQLite (`OUT/gradebook.sqlite`).

Only the trusted batch process writes it. One run is one transaction (the run, its outcomes and
the submission's latest metadata together), in WAL mode with full syncs, so `kill -9` at any
moment leaves either the whole run or none of it; a re-run grades what is missing. Runs are only
ever added: a regrade is a new row, and history is never overwritten.

Beside the runs, the TAs' adjustments of a student (`adjustments`): score overrides and due-date
extensions, each with who, when and why, only ever added too (a later one replaces an earlier
one of the same kind; clearing is one more row).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

from autograder.batch.records import (
    ADJUSTMENTS,
    Adjustment,
    ClassSubmission,
    GradedSubmission,
    GradeOutcome,
    LateStatus,
    StoredRun,
    Submitter,
)
from autograder.batch.submission_status import SubmissionStatus, derive
from autograder.grading.results import Report
from autograder.grading.visibility import graded_for, release_due
from autograder.project.inert import clip, inert

# One run's stored report: a report is a few hundred KiB at most (report.MAX_FILE_BYTES); one
# from elsewhere (an old worker, Ray) is cut down to fit rather than stored whole.
MAX_REPORT_CHARS = 1 << 20
MAX_TEXT_CHARS = 4000  # the error and each outcome message

SCHEMA_VERSION = 3  # 2: runs.status (a SubmissionStatus as JSON); 3: adjustments
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    key TEXT PRIMARY KEY,
    created_at TEXT,
    submitters TEXT NOT NULL            -- JSON list of {name, sid, email}
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    submission_key TEXT NOT NULL REFERENCES submissions(key),
    assignment TEXT NOT NULL,
    content_hash TEXT NOT NULL,         -- of the submitted files
    grader_version TEXT NOT NULL,       -- of the autograder package
    assignment_version TEXT NOT NULL,   -- of the hidden tests, probes, questions and config
    late TEXT,                          -- JSON LateStatus, or NULL
    graded_at TEXT NOT NULL,            -- ISO 8601, UTC, when the run was recorded
    seconds REAL NOT NULL,
    worker TEXT NOT NULL,
    score REAL,                         -- after the late penalty; NULL when grading failed
    raw_score REAL,
    max_score REAL,
    error TEXT,                         -- the grader's own failure, not the student's
    report TEXT,                        -- report.json's content
    status TEXT                         -- JSON SubmissionStatus: what the TA should know
);
CREATE INDEX IF NOT EXISTS runs_by_submission ON runs (submission_key, id);
CREATE TABLE IF NOT EXISTS outcomes (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    part TEXT NOT NULL,
    item TEXT NOT NULL,
    status TEXT NOT NULL,
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE TABLE IF NOT EXISTS adjustments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sid TEXT NOT NULL,                  -- the student's (a group's members one by one)
    kind TEXT NOT NULL CHECK (kind IN ('override', 'extension')),
    score REAL,                         -- override: the score exported; NULL: cleared
    until TEXT,                         -- extension: ISO 8601 due date; NULL: cleared
    reason TEXT NOT NULL,
    by TEXT NOT NULL,
    at TEXT NOT NULL                    -- ISO 8601, UTC
);
CREATE INDEX IF NOT EXISTS adjustments_by_sid ON adjustments (sid, id);
"""
MAX_REASON_CHARS = 1000


class GradebookError(RuntimeError):
    """The gradebook file is not one this version can use."""


class Gradebook:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # isolation_level=None: transactions are opened explicitly (BEGIN IMMEDIATE).
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        elif int(row[0]) == 1:
            self._migrate_from_1()
        elif int(row[0]) == 2:  # the adjustments table is all that is new: made above
            self.db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                            (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise GradebookError(f"{path} has gradebook schema version {row[0]}; this grader "
                                 f"reads version {SCHEMA_VERSION}")

    def _migrate_from_1(self) -> None:
        """Version 1 had no status: add the column and derive each run's status from its
        stored report and error (the sandbox events of those runs were not kept), in one
        transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}
            if "status" not in columns:
                self.db.execute("ALTER TABLE runs ADD COLUMN status TEXT")
            for run_id, report, error in self.db.execute(
                    "SELECT id, report, error FROM runs").fetchall():
                status = derive(_stored_report(report, version_1=True), error)
                self.db.execute("UPDATE runs SET status=? WHERE id=?",
                                (json.dumps(status.to_json()), run_id))
            self.db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                            (str(SCHEMA_VERSION),))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_current(self, key: str, content_hash: str, grader_version: str,
                   assignment_version: str, late: LateStatus | None,
                   shown_at: datetime | None, gpu_now: bool = False) -> bool:
        """True when the latest run of `key` graded these files, with this grader and
        assignment, under this late status and for results shown at `shown_at` (an extension
        moves both), and the grader did not fail on it, in whole or in part (a check it could
        not run): a re-run can skip it. With `gpu_now`, a run whose GPU tests are pending
        (gpu_policy: pending) is not current; nor is one that withheld `after_due_date` results
        from its students that a grading now would show (as Gradescope's "Regrade all
        submissions" after the due date)."""
        row = self.db.execute(
            "SELECT content_hash, grader_version, assignment_version, late, error, id, status, "
            "report FROM runs WHERE submission_key=? ORDER BY id DESC LIMIT 1", (key,)).fetchone()
        if row is None or row[4] is not None or tuple(row[:4]) != (
                content_hash, grader_version, assignment_version, _late_json(late)):
            return False
        if SubmissionStatus.from_json(json.loads(row[6]) if row[6] else None).grader_failed:
            return False
        report = _stored_report(row[7])
        if not graded_for(report, shown_at) or release_due(report):
            return False
        return not (gpu_now and self.db.execute(
            "SELECT 1 FROM outcomes WHERE run_id=? AND status='pending' LIMIT 1",
            (row[5],)).fetchone())

    def record(self, submission: ClassSubmission, assignment: str, outcome: GradeOutcome,
               content_hash: str, grader_version: str, assignment_version: str,
               late: LateStatus | None, status: SubmissionStatus | None = None) -> int:
        """Add one run (all of it or, if interrupted, none of it); returns its id. `status`
        defaults to what the outcome alone says (no sandbox events)."""
        report = _bounded_report(outcome.report)
        error = clip(inert(outcome.error), MAX_TEXT_CHARS) if outcome.error is not None else None
        if status is None:
            status = derive(outcome.report, error)
        score = raw = max_score = None
        if report is not None:
            score, max_score = report.score, report.max_score
            raw = report.late.raw_score if report.late else score
        submitters = json.dumps([asdict(s) for s in submission.submitters])
        created = submission.created_at.isoformat() if submission.created_at else None
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(
                "INSERT INTO submissions VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                "created_at=excluded.created_at, submitters=excluded.submitters",
                (submission.key, created, submitters))
            run_id = self.db.execute(
                "INSERT INTO runs (submission_key, assignment, content_hash, grader_version, "
                "assignment_version, late, graded_at, seconds, worker, score, raw_score, "
                "max_score, error, report, status) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (submission.key, assignment, content_hash, grader_version, assignment_version,
                 _late_json(late), now, round(outcome.seconds, 3), outcome.worker, score, raw,
                 max_score, error, json.dumps(report.to_json()) if report is not None else None,
                 json.dumps(status.to_json()))).lastrowid
            for position, t in enumerate(report.tests if report is not None else []):
                self.db.execute(
                    "INSERT INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, position, t.name, t.part, t.item, t.status, t.score, t.max_score,
                     clip(t.message, MAX_TEXT_CHARS)))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return run_id

    def latest(self, keys: list[str] | None = None) -> list[GradedSubmission]:
        """The latest run of each submission (of `keys`, in that order; else all, by key)."""
        rows = self.db.execute(
            "SELECT s.key, s.created_at, s.submitters, r.id, r.report, r.score, r.raw_score, "
            "r.max_score, r.late, r.error, r.graded_at, r.seconds, "
            "(SELECT COUNT(*) FROM runs h WHERE h.submission_key = s.key), r.status "
            "FROM submissions s JOIN runs r ON r.id = "
            "(SELECT MAX(id) FROM runs WHERE submission_key = s.key) ORDER BY s.key").fetchall()
        overrides = self.in_force("override")
        found = {row[0]: _graded(row, overrides) for row in rows}
        if keys is None:
            return list(found.values())
        return [found[k] for k in keys if k in found]

    def history(self, key: str) -> list[StoredRun]:
        """Every run of one submission, oldest first (without the full reports)."""
        rows = self.db.execute(
            "SELECT id, graded_at, score, raw_score, max_score, error, content_hash, "
            "grader_version, assignment_version, late, "
            "json_extract(report, '$.release.results_shown_at'), status "
            "FROM runs WHERE submission_key=? ORDER BY id", (key,)).fetchall()
        return [StoredRun(*row[:11], status=SubmissionStatus.from_json(
                              json.loads(row[11]) if row[11] else None),
                          tests={name: (status, score) for name, status, score in
                                 self.db.execute("SELECT name, status, score FROM outcomes "
                                                 "WHERE run_id=? ORDER BY position", (row[0],))})
                for row in rows]

    def keys_of(self, who: str) -> list[str]:
        """The submissions whose key is `who` or whose submitters include the sid `who`."""
        found = []
        for key, submitters in self.db.execute("SELECT key, submitters FROM submissions "
                                               "ORDER BY key"):
            if key == who or any(s.get("sid") == who for s in json.loads(submitters)):
                found.append(key)
        return found

    def run_count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def assignments(self) -> set[str]:
        """The assignments this gradebook's runs graded (one, in a batch's OUT)."""
        return {row[0] for row in self.db.execute("SELECT DISTINCT assignment FROM runs")}

    def sids(self) -> set[str]:
        """Every student of every submission (a submission without submitters: its key)."""
        found = set()
        for key, submitters in self.db.execute("SELECT key, submitters FROM submissions"):
            found |= {s["sid"] for s in json.loads(submitters)} or {key}
        return found

    # ------------------------------------------------------------------------- adjustments

    def adjust(self, kind: str, sid: str, reason: str, by: str, score: float | None = None,
               until: str | None = None) -> Adjustment:
        """Record an override (`score`) or an extension (`until`) of student `sid`; neither
        given clears the one in force. Texts are made inert and clipped."""
        if kind not in ADJUSTMENTS:
            raise ValueError(f"unknown adjustment {kind!r} (one of {', '.join(ADJUSTMENTS)})")
        if (kind == "override" and until is not None) or (kind == "extension"
                                                          and score is not None):
            raise ValueError(f"an {kind} takes {'score' if kind == 'override' else 'until'}")
        by = clip(inert(by, True), 200)  # the sid stays as the roster spells it, to match
        reason = clip(inert(reason, True), MAX_REASON_CHARS)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            new_id = self.db.execute(
                "INSERT INTO adjustments (sid, kind, score, until, reason, by, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sid, kind, score, until, reason, by, now)).lastrowid
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return Adjustment(new_id, sid, kind, score, until, reason, by, now)

    def adjustments(self, sids: list[str] | None = None) -> list[Adjustment]:
        """Every adjustment (of `sids`), oldest first, cleared ones included."""
        rows = self.db.execute("SELECT id, sid, kind, score, until, reason, by, at "
                               "FROM adjustments ORDER BY id").fetchall()
        wanted = None if sids is None else set(sids)
        return [Adjustment(*row) for row in rows if wanted is None or row[1] in wanted]

    def in_force(self, kind: str) -> dict[str, Adjustment]:
        """The latest adjustment of `kind` of each student, unless it cleared the one before."""
        latest: dict[str, Adjustment] = {}
        for adjustment in self.adjustments():
            if adjustment.kind == kind:
                latest[adjustment.sid] = adjustment
        return {sid: a for sid, a in latest.items() if not a.cleared}

    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                        "value=excluded.value", (key, value))


def _bounded_report(report: Report | None) -> Report | None:
    """`report`, or when its JSON is over MAX_REPORT_CHARS a copy without printed output and
    with short messages and notes (scores and statuses are kept)."""
    if report is None or len(json.dumps(report.to_json())) <= MAX_REPORT_CHARS:
        return report
    tests = [replace(t, output="", message=clip(t.message, 500),
                     feedback=[clip(line, 500) for line in t.feedback[:10]])
             for t in report.tests]
    warnings = [clip(w, 500) for w in report.warnings[:40]]
    warnings.append("this stored report was cut down to fit the gradebook; see report.json")
    return replace(report, tests=tests, warnings=warnings)


def _stored_report(text: str | None, version_1: bool = False) -> Report | None:
    """A report as a run stored it (report.json's content), typed again. One stored by an
    earlier grader may lack what was added since: fields take their defaults, and a test from
    before causes were recorded gets the one its status implies (`_implied_cause`); with
    `version_1`, the one that grader's words implied (`_with_v1_causes`: the migration only)."""
    if not text:
        return None
    data = json.loads(text)
    if version_1:
        data = _with_v1_causes(data)
    tests = [t if "cause" in t else {**t, "cause": _implied_cause(t)}
             for t in data.get("tests", [])]
    return Report.from_json({**data, "tests": tests})


def _implied_cause(test: dict) -> str:
    """The cause of a stored test that has none, from its part and status alone (never its
    message). Nothing that reads a stored report tells these apart: only the overview reads a
    cause, to find `import_failed`, which none of them is."""
    if test.get("part") == "multiple_choice":
        return "answered"
    return {"passed": "passed", "withheld": "withheld", "excluded": "gpu_unavailable",
            "pending": "gpu_unavailable"}.get(str(test.get("status")), "wrong_result")


# Version 1's reports had no causes (statuses.TestCause): its runs' statuses are derived once,
# when the gradebook is migrated, from the messages that grader's runner wrote, as it worded
# them then (first match wins). Nothing else reads a message.
_V1_CAUSES = (
    ("your module could not be imported:", "import_failed"),
    ("the grader could not run this check", "grader_error"),
    ("the grading process was killed during this test", "runner_killed"),
    ("ended when its sandbox's parent process was killed", "sandbox_killed"),
    ("its parent process ended after your code ran in it", "sandbox_killed"),
    ("sent back an unreadable reply", "unreadable_reply"),
    ("the result was too large to check", "too_large"),
    ("is not allowed in the sandbox", "network_refused"),
    ("the sandbox allows only IP and Unix sockets", "network_refused"),
    ("importing your module took longer than", "import_hang"),
    ("during the import of your module", "import_hang"),
    ("timed out after", "timed_out"), ("time limit ran out", "timed_out"),
    ("took longer than", "timed_out"),
    ("your code was killed by", "crashed"), ("your code exited with status", "crashed"),
    ("your code called sys.exit", "crashed"), ("your code stopped answering", "crashed"),
    ("NotImplementedError", "not_implemented"), ("has no function named", "missing_function"),
)


def _with_v1_causes(report: dict) -> dict:
    """A version-1 report with each coding test's cause as that grader's words implied."""
    no_module = any(str(w).startswith("coding part: ") for w in report.get("warnings", []))
    tests = []
    for t in report.get("tests", []):
        if "cause" not in t and t.get("part") == "coding":
            message = str(t.get("message", ""))
            cause = "passed" if t.get("status") == "passed" else "no_module" if no_module \
                else next((c for words, c in _V1_CAUSES if words in message), "wrong_result")
            t = {**t, "cause": cause}
        tests.append(t)
    return {**report, "tests": tests}


def _late_json(late: LateStatus | None) -> str | None:
    return json.dumps(asdict(late), sort_keys=True) if late is not None else None


def _graded(row: tuple, overrides: dict[str, Adjustment]) -> GradedSubmission:
    (key, created, submitters, run_id, report, score, raw, max_score, late, error, graded_at,
     seconds, runs, status) = row
    submission = ClassSubmission(
        key=key, path=Path(), submitters=[Submitter(**s) for s in json.loads(submitters)],
        created_at=datetime.fromisoformat(created) if created else None)
    sids = [s.sid for s in submission.submitters] or [key]
    stored = _stored_report(report)
    return GradedSubmission(
        submission=submission, run_id=run_id, report=stored,
        score=score or 0.0, raw_score=raw or 0.0, max_score=max_score or 0.0,
        late=LateStatus(**json.loads(late)) if late else None, error=error,
        graded_at=graded_at, seconds=seconds, history=runs,
        status=SubmissionStatus.from_json(json.loads(status) if status else None)
        if status else derive(stored, error),
        overrides={sid: overrides[sid] for sid in sids if sid in overrides})
