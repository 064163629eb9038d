"""Grade a whole class: `batch(submissions, assignment, out)`, the API behind `autograder batch`.

submissions (export or folders) -> roster -> plan (skip what the gradebook already has; each
student's extension is their due date) -> backend (local warm workers or Ray) -> per outcome:
report folder + gradebook run -> the similarity check -> grades.csv, grades.xlsx,
canvas_grades.csv and index.html from the gradebook (overrides applied).

This process is trusted: it never imports student code, and the only thing it receives from a
worker is a JSON outcome. It alone writes the gradebook and the output folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tqdm import tqdm

from autograder.batch.fingerprints import assignment_version, grader_version, tree_hash
from autograder.batch.gradebook import Gradebook
from autograder.batch.gradesheet import (
    CANVAS_CSV,
    canvas_column,
    write_canvas_csv,
    write_grades,
)
from autograder.batch.overview import write_overview
from autograder.batch.records import (
    Adjustment,
    ClassSubmission,
    GradeOutcome,
    GradeTask,
    LateStatus,
    StoredRun,
    report_folder,
)
from autograder.batch.roster import discover
from autograder.batch.similarity import Similarity, check_similarity
from autograder.batch.submission_status import derive
from autograder.grading.late import SubmissionDates, late_entry, results_shown_at
from autograder.grading.ta_events import take_kept_events
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.inert import label
from autograder.project.late_policy import parse_timestamp
from autograder.project.paths import Project
from autograder.sandbox.isolation import detect
from autograder.sandbox.processes import gpu_device_present

BACKENDS = ("local", "ray")


class BatchError(ValueError):
    """The batch cannot start (bad options, unreadable export); nothing was graded."""


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during grading, after the class outputs were written for what had
    finished (`summary` says how many); the same command resumes."""

    def __init__(self, summary: BatchSummary) -> None:
        super().__init__(summary.line())
        self.summary = summary


@dataclass
class BatchSummary:
    """What one run did. total == graded + failed + skipped + left_out, always."""

    total: int  # submissions found
    graded: int  # graded in this run (the grader did not fail on them)
    skipped: int  # unchanged since their last run
    # The grader itself failed on them, in whole (no report) or in part (a check it could not
    # run: a report with a grader error); they are graded again by the next run.
    failed: int
    seconds: float
    out: Path
    warnings: list[str] = field(default_factory=list)
    left_out: int = 0  # not chosen by --only
    flagged: int = 0  # of those graded in this run, flagged (see submission_status)
    statuses: dict[str, int] = field(default_factory=dict)  # this run's gradings, by status
    failed_in_part: int = 0  # of `failed`, those with a report (some checks not run)
    not_finished: int = 0  # stopped (Ctrl-C, SIGTERM) before these were graded
    # Who the import files left out and why (shown when something was graded).
    export_notes: list[str] = field(default_factory=list)
    similar: int | None = None  # pairs the similarity check listed; None: it is turned off

    @property
    def nothing_to_grade(self) -> bool:
        return self.graded + self.failed == 0

    def line(self) -> str:
        """One line for the TA; its numbers add up to the roster."""
        left_out = f", {self.left_out} left out by --only" if self.left_out else ""
        if self.not_finished:
            done = self.graded + self.failed
            return (f"interrupted: {done} of {done + self.not_finished} submissions to grade "
                    f"finished ({self.graded} graded, {self.failed} grader error(s)), "
                    f"{self.not_finished} not graded, {self.skipped} unchanged{left_out}; the "
                    "class outputs cover every finished one; run the same command again to "
                    "grade the rest")
        if self.nothing_to_grade:
            return f"{self.skipped} unchanged, nothing to grade{left_out}"
        flagged = f" ({self.flagged} flagged)" if self.flagged else ""
        in_part = f" ({self.failed_in_part} graded in part)" if self.failed_in_part else ""
        return (f"{self.total} submissions: {self.graded} graded{flagged}, {self.failed} "
                f"grader error(s){in_part}, {self.skipped} unchanged{left_out}, in "
                f"{self.seconds:g} s")


@dataclass
class _Planned:
    submission: ClassSubmission
    content_hash: str
    late: LateStatus | None
    shown_at: datetime | None  # when its after_due_date results may be shown (visibility)
    task: GradeTask


def batch(submissions: Path, assignment: str, out: Path, jobs: int = 2,
          backend: str = "local", address: str | None = None, force: bool = False,
          only: list[str] | None = None, *, project: Project,
          progress: bool = True, detail: bool = False,
          canvas_id: str | None = None) -> BatchSummary:
    """Grade every submission under `submissions` that needs it, for an assignment of
    `project`; write the class outputs (`detail`: grades.csv gets a column per hidden test;
    `canvas_id`: the Canvas assignment that canvas_grades.csv's column names).

    Ctrl-C or SIGTERM while grading writes the class outputs for what has finished, then
    raises BatchInterrupted.

    Refused at once (IsolationUnavailable) where gradings would run on this machine (local
    workers, or a local Ray instance) and student code cannot be isolated here; on a Ray
    cluster each worker proves it, and a worker that cannot gives each of its submissions a
    grader error."""
    started = time.monotonic()
    if backend not in BACKENDS:
        raise BatchError(f"unknown backend {backend!r} (use one of: {', '.join(BACKENDS)})")
    if jobs < 1:
        raise BatchError("--jobs must be at least 1")
    if canvas_id is not None and not canvas_id.isdigit():
        raise BatchError(f"--canvas-id must be the number at the end of the Canvas "
                         f"assignment's address (.../assignments/12345), not {canvas_id!r}")
    if backend == "local" or address is None:
        detect()  # before anyone is graded: not N grader errors for one set-up problem
    spec = load_assignment(assignment, project)
    out.mkdir(parents=True, exist_ok=True)
    with exclusive(out), _sigterm_interrupts():
        return _batch(submissions, spec, out, jobs, backend, address, force, only,
                      progress, started, detail, canvas_id)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the batch as Ctrl-C does (its default would end the process at once,
    writing nothing); only where signals can be handled (the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """One batch per output folder: a second one would re-extract the export under the first
    (and an override must not rewrite the class outputs while a batch writes them)."""
    with open(out / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(f"another autograder batch is writing to {out}; wait for it to "
                             "finish (or stop it), then run this one") from None
        yield


def _batch(submissions: Path, spec: Assignment, out: Path, jobs: int, backend: str,
           address: str | None, force: bool, only: list[str] | None,
           progress: bool, started: float, detail: bool,
           canvas_id: str | None = None) -> BatchSummary:
    assignment = spec.name
    roster = discover(submissions, out / ".export")
    warnings = list(roster.warnings)
    chosen = _select(roster.submissions, only)
    versions = (grader_version(), assignment_version(spec))
    with Gradebook(out / "gradebook.sqlite") as book:
        plan, skipped = [], 0
        gpu_now = backend == "local" and gpu_device_present()
        extensions = book.in_force("extension")
        for submission in chosen:
            planned = _plan(submission, spec, out, extensions)
            if not (force or only) and _reports_in_place(submission, out) and book.is_current(
                    submission.key, planned.content_hash, *versions, planned.late,
                    planned.shown_at, gpu_now):
                skipped += 1
                continue
            plan.append(planned)
        by_key = {p.task.key: p for p in plan}
        labels = {p.task.key: progress_label(p.submission) for p in plan}
        graded = failed = in_part = flagged = 0
        statuses: dict[str, int] = {}
        interrupted = False
        outcomes = _run([p.task for p in plan], jobs, backend, address, spec) if plan else []
        bar = tqdm(total=len(plan), unit="submission", disable=not progress or not plan)
        waiting = [p.task.key for p in plan]  # workers take tasks in this order
        _show_current(bar, waiting, jobs, labels)
        try:
            for outcome in outcomes:
                planned = by_key[outcome.key]
                # The sandbox's events (TA only) leave the staging folder before it is published.
                events = take_kept_events(Path(planned.task.out))
                if outcome.error is None:
                    try:
                        _publish(planned, out)
                    except OSError as exc:  # e.g. a Ray worker without the shared folder
                        outcome.error = f"its reports could not be put in place: {exc}"
                status = derive(outcome.report, outcome.error, events)
                if outcome.error is not None:
                    failed += 1
                elif status.grader_failed:  # a report, but checks the grader could not run
                    failed += 1
                    in_part += 1
                flagged += status.status == "flagged"
                statuses[status.status] = statuses.get(status.status, 0) + 1
                book.record(planned.submission, assignment, outcome, planned.content_hash,
                            *versions, planned.late, status)
                graded += 1
                waiting.remove(outcome.key)
                _show_current(bar, waiting, jobs, labels)
                bar.set_postfix({"errors": failed, "flagged": flagged}, refresh=False)
                bar.update(1)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what finished is in the gradebook
            interrupted = True
        finally:
            bar.close()
            if hasattr(outcomes, "close"):
                outcomes.close()  # stops the workers (Ctrl-C included)
        similar = _similarity(roster.submissions, spec, out, warnings)
        keys = [s.key for s in roster.submissions]
        # What the class outputs were made of, so that an override can make them again.
        book.set_meta("class_outputs", json.dumps({"keys": keys, "detail": detail,
                                                   "canvas_id": canvas_id}))
        export_notes = write_class_outputs(book, spec, out, keys, detail, canvas_id, similar)
    shutil.rmtree(out / ".staging", ignore_errors=True)
    summary = BatchSummary(len(roster.submissions), graded - failed, skipped, failed,
                           round(time.monotonic() - started, 2), out, warnings,
                           left_out=len(roster.submissions) - len(chosen), flagged=flagged,
                           statuses=statuses, failed_in_part=in_part,
                           not_finished=len(plan) - graded, export_notes=export_notes,
                           similar=None if similar is None else len(similar.pairs) + similar.more)
    if interrupted:
        raise BatchInterrupted(summary)
    return summary


def _similarity(submissions: list[ClassSubmission], spec: Assignment, out: Path,
                warnings: list[str]) -> Similarity | None:
    """The class's similarity check; a failure of it is a note, never a batch without its
    grades."""
    try:
        similar = check_similarity(submissions, spec, out)
    except Exception as exc:  # noqa: BLE001 - the grades matter more than this staff aid
        warnings.append(f"similarity: the check failed ({type(exc).__name__}: {exc}); no "
                        "pairs are listed")
        return None
    if similar is not None:
        warnings += [f"similarity: {note}" for note in similar.notes]
    return similar


def progress_label(submission: ClassSubmission, limit: int = 40) -> str:
    """Who a submission is, for the progress bar: the submitters' names (their sids when
    nameless), else its folder's name; one short inert line (names come from the export)."""
    names = [s.name or s.sid for s in submission.submitters] or [submission.key]
    return label(" & ".join(names), limit)


def _show_current(bar: tqdm, waiting: list[str], jobs: int, labels: dict[str, str]) -> None:
    """Who is being graded, on the bar (the oldest in flight; `+N` more at once)."""
    now = waiting[:jobs]
    more = f" +{len(now) - 1}" if len(now) > 1 else ""
    bar.set_description(f"grading {labels.get(now[0], now[0])}{more}" if now else "graded",
                        refresh=False)


def write_class_outputs(book: Gradebook, assignment: Assignment, out: Path,
                        keys: list[str], detail: bool = False,
                        canvas_id: str | None = None,
                        similar: Similarity | None = None) -> list[str]:
    """grades.csv and grades.xlsx (with a column per hidden test when `detail`),
    canvas_grades.csv (its column named with `canvas_id` when given) and index.html (with the
    similarity check's pairs), from the latest run of each key and the overrides in force;
    returns notes on students left out of the Canvas import."""
    rows = book.latest(keys)
    write_grades(rows, assignment, out, detail=detail)
    notes = write_canvas_csv(rows, assignment, out / CANVAS_CSV,
                             canvas_column(assignment, canvas_id))
    write_overview(rows, assignment, out, similar)
    said = [f"{CANVAS_CSV}: {note}" for note in notes]
    # An earlier version wrote a Gradescope import whose format was never verified.
    stale = out / "gradescope_scores.csv"
    if stale.is_file():
        stale.unlink()
        said.append("gradescope_scores.csv removed (its format was never verified against "
                    f"Gradescope's); {CANVAS_CSV} is Canvas's import")
    return said


def _reports_in_place(submission: ClassSubmission, out: Path) -> bool:
    # A run killed while swapping report folders leaves one missing: grade it again.
    owners = [s.sid for s in submission.submitters] or [submission.key]
    return all((out / "reports" / report_folder(sid) / "results.json").is_file()
               for sid in owners)


def _select(submissions: list[ClassSubmission], only: list[str] | None) -> list[ClassSubmission]:
    if not only:
        return submissions
    wanted = set(only)
    chosen = [s for s in submissions
              if s.key in wanted or any(p.sid in wanted for p in s.submitters)]
    found = {s.key for s in chosen} | {p.sid for s in chosen for p in s.submitters}
    missing = sorted(wanted - found)
    if missing:
        raise BatchError(f"--only: no submission of {', '.join(missing)} in this export")
    return chosen


def _plan(submission: ClassSubmission, spec: Assignment, out: Path,
          extensions: dict[str, Adjustment]) -> _Planned:
    # The same late entry as grading computes from the same dates (and as a Gradescope run
    # of this submission does): kept for the gradebook's record and currency check. A TA's
    # extension (gradebook adjustments) is the student's own due date; a group's submission
    # is due when its latest-extended member's is (it is graded once).
    granted = [extensions[s.sid] for s in submission.submitters if s.sid in extensions]
    extended = max((parse_timestamp(e.until) for e in granted), default=None)
    dates = SubmissionDates(created_at=submission.created_at, extended_due=extended)
    late = late_entry(spec.config, dates)
    staging = out / ".staging" / submission.key
    task = GradeTask(key=submission.key, submission=str(submission.path), out=str(staging),
                     assignment=spec.name, config_path=str(spec.project.config), dates=dates)
    return _Planned(submission, tree_hash(submission.path), late,
                    results_shown_at(spec.config, dates), task)


def _run(tasks: list[GradeTask], jobs: int, backend: str, address: str | None,
         spec: Assignment) -> Iterator[GradeOutcome]:
    if backend == "ray":
        from autograder.batch.ray_workers import run_ray  # Ray is an optional extra

        return run_ray(tasks, jobs, address, needs_gpu=_needs_gpu(spec))
    from autograder.batch.local_workers import run_local

    return run_local(tasks, jobs)


def _needs_gpu(spec: Assignment) -> bool:
    text = "\n".join(p.read_text() for p in spec.hidden_tests.rglob("test_*.py"))
    return "mark.gpu" in text


def _publish(planned: _Planned, out: Path) -> None:
    """Move the staged reports to reports/<sid>/ for each submitter (replacing older ones)."""
    staged = Path(planned.task.out)
    owners = [s.sid for s in planned.submission.submitters] or [planned.submission.key]
    for sid in owners:
        target = out / "reports" / report_folder(sid)
        fresh = target.with_name(f".{target.name}.new")
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(staged, fresh)
        swap_folder(fresh, target)
    shutil.rmtree(staged, ignore_errors=True)


def swap_folder(fresh: Path, to: Path) -> None:
    """Put `fresh` where `to` is, the previous folder removed only once the new one is in."""
    old = to.with_name(f".{to.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if to.exists():
        os.replace(to, old)
    os.replace(fresh, to)
    shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------- history


@dataclass
class RunChange:
    """One run of a submission, and what changed since the run before it."""

    run_id: int
    graded_at: str
    score: float | None  # after the late penalty; None when the grader failed
    max_score: float | None
    status: str
    detail: str
    why: list[str]  # what was different about this run: files, grader, hidden tests
    score_change: float | None  # against the previous run; None for the first
    tests: list[tuple[str, str, str]]  # (test, before, now) for each test whose outcome changed


@dataclass
class SubmissionHistory:
    key: str
    students: list[str]  # "name (sid)"
    runs: list[RunChange]
    adjustments: list[Adjustment] = field(default_factory=list)  # its students', oldest first


def graded_gradebook(out: Path, assignment: str | None = None) -> Path:
    """OUT's gradebook; raises BatchError when there is none, or when its runs did not grade
    `assignment` (when given: commands that read a batch's OUT take `-a` as every command does,
    and this catches the wrong OUT before anything is read or written)."""
    path = out / "gradebook.sqlite"
    if not path.is_file():
        raise BatchError(f"no gradebook in {out}: run `autograder batch ... --out {out}` first")
    if assignment is not None:
        with Gradebook(path) as book:
            graded = book.assignments()
        if assignment not in graded:
            raise BatchError(f"{path} holds {', '.join(sorted(graded)) or 'no run'}, "
                             f"not {assignment}")
    return path


def history(out: Path, who: str, since_run: int | None = None,
            assignment: str | None = None) -> list[SubmissionHistory]:
    """The runs of each submission of `who` (a sid or a submission key) in OUT's gradebook,
    oldest first, each with what changed since the one before (score, status, tests), from
    run `since_run` on when given. Raises BatchError when the gradebook or the student is
    not there, or when the gradebook is not of `assignment` (when given)."""
    path = graded_gradebook(out, assignment)
    found = []
    with Gradebook(path) as book:
        keys = book.keys_of(who)
        if not keys:
            raise BatchError(f"no submission of {who!r} in {path}")
        latest = {row.submission.key: row for row in book.latest(keys)}
        for key in keys:
            submitters = latest[key].submission.submitters if key in latest else []
            changes, before = [], None
            for run in book.history(key):
                changes.append(_change(run, before))
                before = run
            if since_run is not None:
                changes = [c for c in changes if c.run_id >= since_run]
            sids = [s.sid for s in submitters] or [key]
            found.append(SubmissionHistory(key, [f"{s.name} ({s.sid})" for s in submitters],
                                           changes, book.adjustments(sids)))
    return found


def _change(run: StoredRun, before: StoredRun | None) -> RunChange:
    why, tests, delta = [], [], None
    if before is not None:
        for field_name, text in (("content_hash", "new files"),
                                 ("assignment_version", "hidden tests or config changed"),
                                 ("grader_version", "grader changed"),
                                 ("late", "late status changed (an extension?)"),
                                 ("results_shown_at", "results shown from another date "
                                                      "(an extension?)")):
            if getattr(run, field_name) != getattr(before, field_name):
                why.append(text)
        if not why:
            why.append("regraded (--only or --force, or its withheld results now due)")
        if run.score is not None and before.score is not None:
            delta = round(run.score - before.score, 4)
        for name in dict.fromkeys([*before.tests, *run.tests]):
            old, new = before.tests.get(name), run.tests.get(name)
            if (old and old[0]) != (new and new[0]):
                tests.append((name, old[0] if old else "absent", new[0] if new else "absent"))
    return RunChange(run.id, run.graded_at, run.score, run.max_score,
                     run.status.status, run.status.detail or (run.error or ""),
                     why, delta, tests)
