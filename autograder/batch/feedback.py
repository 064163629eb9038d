"""What students may see of a class's grading, and nothing else: `release_feedback(out, to)`,
the API behind `autograder release-feedback`.

For each student of the last batch's roster, the report files that grading wrote for them under
OUT/reports/<sid>/ (`report.REPORT_FILES`: results.json, report.json, report.md, report.html,
which follow each test's visibility as of the grading time) are copied to TO/<sid>/, one folder
per student, ready to hand back, with `grade.json` (GRADE_FILE): the score every export gives
them, which is their override when staff set one ("adjusted": true, never the reason). Before
the due date their reports count the coding part alone, so grade.json then holds no score (an
override neither: a total the questions count in would tell the key) and says when it is given.
Nothing else goes there: not the sandbox events or flags (kept for staff, never in a report),
not the statuses, the similarity check, the reasons of adjustments, the gradebook, the CSVs or
the class overview. A student whose submission the grader failed on gets no folder until it is
regraded or given a score by hand (the notes say who).

TO is written whole, then put in place of the previous release (a folder holding the
RELEASE_MARK file); a folder that is not a release is never replaced.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder.batch.driver import BatchError, exclusive, graded_gradebook, swap_folder
from autograder.batch.gradebook import Gradebook
from autograder.batch.gradesheet import members
from autograder.batch.records import GradedSubmission, report_folder
from autograder.grading.report import REPORT_FILES
from autograder.grading.results import ReleaseRecord
from autograder.project.inert import label

GRADE_FILE = "grade.json"
RELEASE_MARK = ".autograder-feedback"  # in TO itself, beside (never inside) the students' folders


@dataclass
class Released:
    """What one release wrote."""

    to: Path
    students: list[str] = field(default_factory=list)  # sids, each with a folder TO/<sid>/
    notes: list[str] = field(default_factory=list)  # who got nothing, and why


def release_feedback(out: Path, to: Path | None = None,
                     assignment: str | None = None) -> Released:
    """Copy every student's report files from OUT/reports/ into TO/<sid>/ (default:
    OUT/feedback); returns who got a folder and notes on who did not. Raises BatchError
    without a gradebook, when OUT's gradebook is not of `assignment` (when given), or when TO
    is a folder that a release did not make."""
    to = (to or out / "feedback").resolve()
    graded_gradebook(out, assignment)
    reports = (out / "reports").resolve()
    if to == out.resolve() or to == reports or reports in to.parents or to in reports.parents:
        raise BatchError(f"{to}: release into a folder of its own, not OUT or its reports")
    if to.exists() and (not to.is_dir() or (any(to.iterdir())
                                            and not (to / RELEASE_MARK).is_file())):
        raise BatchError(f"{to} exists and is not an earlier release (no {RELEASE_MARK}): "
                         "choose another folder, or empty it")
    done = Released(to)
    fresh = to.with_name(f".{to.name}.new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    try:
        _copy(out, fresh, done)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    (fresh / RELEASE_MARK).write_text(json.dumps({
        "released_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "students": len(done.students)}) + "\n", encoding="utf-8")
    swap_folder(fresh, to)
    return done


def _copy(out: Path, fresh: Path, done: Released) -> None:
    with exclusive(out), Gradebook(out / "gradebook.sqlite") as book:
        made = book.get_meta("class_outputs")
        rows = book.latest(json.loads(made)["keys"] if made else None)
        for row, student in members(rows):
            who = label(student.sid or row.submission.key)
            adjusted = row.overrides.get(student.sid)
            if not row.graded and adjusted is None:
                done.notes.append(f"{who}: no feedback, the grader failed on "
                                  f"{label(row.submission.key)} (regrade it first)")
                continue
            target = fresh / report_folder(student.sid)
            if not row.graded:  # graded by hand: the score, no report
                target.mkdir(exist_ok=True)
                _write_grade(target, row, student.sid, None)
                done.students.append(student.sid)
                continue
            source = out / "reports" / report_folder(student.sid)
            files = [source / name for name in REPORT_FILES]
            missing = [p.name for p in files if not p.is_file() or p.is_symlink()]
            if missing:
                done.notes.append(f"{who}: no feedback, {', '.join(missing)} missing from "
                                  f"{source} (run the batch again)")
                continue
            target.mkdir(exist_ok=True)
            for path in files:
                shutil.copyfile(path, target / path.name)  # the content only, no modes
            if not _write_grade(target, row, student.sid, row.report.release) \
                    and adjusted is not None:
                done.notes.append(f"{who}: the override is not shown yet (their reports count "
                                  "the coding part alone until the due date; release again "
                                  "after the regrade)")
            done.students.append(student.sid)


def _write_grade(target: Path, row: GradedSubmission, sid: str,
                 release: ReleaseRecord | None) -> bool:
    """TARGET/grade.json: the score every export gives `sid` when their reports show every
    result (`release`, as report.json recorded it; None: none recorded, or no report, a score
    given by hand), or when it is given; returns whether it holds the score."""
    withheld = release is not None and release.withheld_points > 0
    adjusted = sid in row.overrides
    grade: dict = {"score": None if withheld else row.final_score(sid),
                   "max_score": row.max_score,
                   "adjusted": None if withheld else adjusted}
    if withheld:
        grade["note"] = ("Your total is given once every result is shown, "
                         f"{release.results_shown_at or 'after the due date'} or later.")
    elif adjusted:
        grade["note"] = "Your score was adjusted by the course staff."
    (target / GRADE_FILE).write_text(json.dumps(grade, indent=2) + "\n", encoding="utf-8")
    return not withheld

