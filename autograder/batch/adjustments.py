"""A TA's adjustments of one student, kept in the class gradebook: `override` (the score every
export gives them: a regrade request, a grader failure graded by hand) and `extend` (their own
due date for the late policy). The API behind `autograder override` and `autograder extend`.

Each is recorded with who, when and why (`Gradebook.adjust`), never overwritten: a later one
replaces it, clearing is one more, and `autograder history` lists them all.

- An override is applied at once: grades.csv, grades.xlsx, canvas_grades.csv and index.html are
  written again from the gradebook (as the last batch made them: its roster, --detail and
  --canvas-id), with the override in force; a regrade does not undo it.
- An extension is applied by grading: the next `autograder batch` regrades that student's
  submission with the late policy (autograder.grading.late, the extension as
  `SubmissionDates.extended_due`), as the late status is part of what makes a run current.
"""

from __future__ import annotations

import getpass
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder.batch.driver import BatchError, exclusive, write_class_outputs
from autograder.batch.gradebook import Gradebook
from autograder.batch.records import Adjustment
from autograder.batch.similarity import load_similarity
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.late_policy import parse_timestamp
from autograder.project.paths import Project

GRADEBOOK = "gradebook.sqlite"


@dataclass
class Adjusted:
    """What `override` or `extend` did."""

    adjustment: Adjustment
    notes: list[str] = field(default_factory=list)  # what follows from it, for the TA


def override(out: Path, assignment: str, sid: str, reason: str, score: float | None = None,
             clear: bool = False, by: str | None = None, *, project: Project) -> Adjusted:
    """Give student `sid` the score `score` in every export of OUT (or, with `clear`, their
    graded score again), for `reason`; then write the class outputs again. Raises BatchError
    for a student not in the gradebook, a score outside 0..the assignment's total, or no
    reason."""
    if (score is None) == (not clear):
        raise BatchError("give either a score (--score) or --clear")
    spec = load_assignment(assignment, project)
    total = spec.config.multiple_choice.points + spec.config.coding.points
    if score is not None and not 0 <= score <= total:
        raise BatchError(f"--score {score:g} is not between 0 and {assignment}'s total, "
                         f"{total:g}")
    with exclusive(_folder(out)), _book(out, spec, must_exist=True) as book:
        if sid not in book.sids():
            raise BatchError(f"no submission of {sid!r} in {out / GRADEBOOK}; an override "
                             "needs a graded (or failed) submission to apply to")
        done = book.adjust("override", sid, _reason(reason), _by(by), score=score)
        notes = _refresh(book, spec, out)
    return Adjusted(done, notes)


def extend(out: Path, assignment: str, sid: str, reason: str, until: str | None = None,
           clear: bool = False, by: str | None = None, *, project: Project) -> Adjusted:
    """Move student `sid`'s due date to `until` (ISO 8601 with a time zone, after the
    assignment's due date) for `reason`, or with `clear` back to the assignment's. Applied by
    the next batch, which regrades their submission; a student not graded yet may be given
    one too (it applies when they are)."""
    if (until is None) == (not clear):
        raise BatchError("give either a due date (--until) or --clear")
    spec = load_assignment(assignment, project)
    due = spec.config.due
    if due is None:
        raise BatchError(f"{assignment} has no due date in grading.yml: there is nothing to "
                         "extend")
    stored = None
    if until is not None:
        try:
            when = parse_timestamp(until)
        except ValueError as exc:
            raise BatchError(f"--until: {exc}") from None
        if when <= parse_timestamp(due):
            raise BatchError(f"--until {until} is not after {assignment}'s due date, {due}")
        stored = when.isoformat()
    with exclusive(_folder(out)), _book(out, spec, must_exist=False) as book:
        known = sid in book.sids()
        done = book.adjust("extension", sid, _reason(reason), _by(by), until=stored)
    notes = [f"run `autograder batch ... --out {out}` again: it regrades {sid}'s submission "
             "with this due date" if known else
             f"{sid} has no submission in {out / GRADEBOOK} yet: the due date applies when "
             "their submission is graded"]
    if spec.config.late.policy == "none":
        notes.append(f"{assignment}'s late policy is 'none': the due date changes no score")
    return Adjusted(done, notes)


def _folder(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return out


def _book(out: Path, spec: Assignment, must_exist: bool) -> Gradebook:
    path = out / GRADEBOOK
    if must_exist and not path.is_file():
        raise BatchError(f"no gradebook in {out}: run `autograder batch ... --out {out}` first")
    book = Gradebook(path)
    graded = book.assignments()
    if graded and spec.name not in graded:
        book.close()
        raise BatchError(f"{path} holds {', '.join(sorted(graded))}, not {spec.name}")
    return book


def _reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise BatchError("--reason is required: say why (it is kept with the change)")
    return reason.strip()


def _by(by: str | None) -> str:
    if by and by.strip():
        return by.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "unknown"


def _refresh(book: Gradebook, spec: Assignment, out: Path) -> list[str]:
    """The class outputs again, as the last batch wrote them, with the overrides in force."""
    made = book.get_meta("class_outputs")
    if made is None:
        return ["no class outputs to write yet: the next `autograder batch` applies it"]
    made = json.loads(made)
    notes = write_class_outputs(book, spec, out, made["keys"], made["detail"],
                                made.get("canvas_id"), load_similarity(out))
    return [*notes, f"written again: {out / 'grades.csv'} (and grades.xlsx), "
                    f"{out / 'canvas_grades.csv'}, {out / 'index.html'}"]
