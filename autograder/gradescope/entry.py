"""Gradescope's entry point: grade one submission inside Gradescope's container.

`run_autograder` (written by autograder.release.gradescope_bundle, which builds the bundle) calls
`python -m autograder.gradescope.entry`, which grades with `autograder grade` in a child process
and ALWAYS leaves a valid results.json: when grading fails for any reason, a fallback with score 0
tells the student to contact the instructor.

It grades as `autograder batch` does: the late entry from the submission's `created_at` under
grading.yml's policy (`--metadata`, autograder.gradescope.metadata), and results.json holds what
the student may see as of the grading time (autograder.grading.visibility); the full report goes
to a private folder outside /autograder/results, read for the staff's status line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from autograder.inputs.submission import upload_path
from autograder.project.paths import Project
from autograder.release.gradescope_bundle import FALLBACK_MESSAGE, GRADESCOPE_ROOT_ENV

TIMEOUT_ENV = "AUTOGRADER_GRADE_TIMEOUT"
# What `autograder grade` may take beyond timeouts.submission (start-up, multiple choice,
# reports; Ray's batches allow the same): with a submission limit of 300 s, 7 minutes in all,
# inside Gradescope's default autograder timeout of 10 minutes (tests/gradescope checks each
# assignment's).
GRADING_MARGIN_S = 120.0
GRADESCOPE_DEFAULT_TIMEOUT_S = 600.0
STATUS_PREFIX = "submission status (for staff): "


def error_summary(error: str) -> str:
    """The one line that says what failed: `autograder grade` says "error: ..." first; a
    traceback ends with the exception."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("error:")]
    return (said[0] if said else lines[-1] if lines else "unknown error")[:500]


@dataclass(frozen=True)
class GradingFailed:
    """Why `autograder grade` left no results: its error text (for staff), and whether it was
    refused because student code cannot be isolated here (its exit status says so)."""

    error: str
    not_isolated: bool = False


def _for_students(failed: GradingFailed) -> str:
    """What the student reads of the error: a set-up that cannot isolate their code is named as
    such (its details, paths and uids, are for staff: extra_data and run_autograder's output)."""
    if failed.not_isolated:
        return ("the autograder is misconfigured: it cannot run submissions isolated here, so "
                "it graded nothing. The course staff must fix its set-up.")
    return error_summary(failed.error)


def fallback_results(failed: GradingFailed, elapsed: float = 0.0) -> dict:
    """results.json for a submission the grader could not grade: valid, score 0, says why."""
    return {
        "score": 0.0, "execution_time": round(max(elapsed, 0.0), 3),
        "output": f"{FALLBACK_MESSAGE}\n\nError: {_for_students(failed)}",
        "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden",
        "tests": [], "extra_data": {"autograder_error": failed.error[-4000:]},
    }


def submitter_names(metadata_path: Path) -> str:
    """'Ada Lovelace, Alan Turing' from Gradescope's submission_metadata.json; '' if unknown."""
    try:
        users = json.loads(metadata_path.read_text(encoding="utf-8")).get("users") or []
        return ", ".join(u["name"] for u in users if isinstance(u, dict) and u.get("name"))
    except (OSError, ValueError, AttributeError, TypeError):
        return ""


def _grade_timeout(assignment: str, project: Project) -> float:
    if os.environ.get(TIMEOUT_ENV):
        return float(os.environ[TIMEOUT_ENV])
    try:
        from autograder.project.config import assignment_config

        return assignment_config(assignment, project).submission_timeout + GRADING_MARGIN_S
    except Exception:  # a broken config is reported by `autograder grade` itself
        return 1800.0


def _write_json(path: Path, document: dict) -> None:
    # Write then rename: Gradescope never reads a half-written results.json.
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document, indent=2), encoding="utf-8")
    partial.replace(path)


def _grade(submission: Path, assignment: str, project: Project, results_dir: Path,
           metadata_path: Path, staff_dir: Path) -> GradingFailed | None:
    """Run `autograder grade` in a child process; why it failed, or None when it succeeded."""
    command = [sys.executable, "-m", "autograder.cli", "grade", str(submission),
               "--assignment", assignment, "--out", str(results_dir),
               "--staff-out", str(staff_dir)]
    if metadata_path.is_file():  # the late policy and the release dates, as a batch has them
        command += ["--metadata", str(metadata_path)]
    timeout = _grade_timeout(assignment, project)
    # Own session, so a timeout ends the grader's whole process tree.
    # The child acts on this process's project (AUTOGRADER_ROOT, as run_autograder sets it).
    env = {**os.environ, "AUTOGRADER_ROOT": str(project.root)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stderr += f"\ngrading did not finish within {timeout:g} s"
    # Gradescope keeps run_autograder's output for instructors (results/stdout).
    print(stdout, end="")
    print(stderr, end="", file=sys.stderr)
    from autograder.sandbox.isolation import IsolationUnavailable

    if proc.returncode != 0:
        return GradingFailed(
            stderr.strip() or f"autograder grade exited with status {proc.returncode}",
            proc.returncode == IsolationUnavailable.EXIT_STATUS)
    if not (results_dir / "results.json").is_file():
        return GradingFailed("autograder grade wrote no results.json")
    return None


def run_in_container(root: Path, assignment: str, project: Project) -> int:
    """Grade `root`/submission for an assignment of `project` (the bundle's source folder) into
    `root`/results/results.json; always leaves a valid file."""
    started = time.monotonic()
    results = root / "results" / "results.json"
    # The staff's full report: private (0700), outside what Gradescope shows students.
    staff = Path(tempfile.mkdtemp(prefix="autograder-staff-"))
    try:
        return _run(root, assignment, project, results, staff, started)
    finally:
        shutil.rmtree(staff, ignore_errors=True)


def _run(root: Path, assignment: str, project: Project, results: Path, staff: Path,
         started: float) -> int:
    try:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.unlink(missing_ok=True)
        metadata_path = root / "submission_metadata.json"
        names = submitter_names(metadata_path)
        failed = _grade(upload_path(root / "submission"), assignment, project, results.parent,
                        metadata_path, staff)
        if failed is None:
            from autograder.project.schemas import validate

            document = json.loads(results.read_text(encoding="utf-8"))
            if names:
                document["output"] = f"Submitted by {names}.\n\n{document.get('output', '')}"
            validate(document, "gradescope_results.schema.json", "results.json", project.schemas)
            _write_json(results, document)
            _print_status(results.parent, staff, None)
            return 0
    except Exception:  # anything at all: the student must still get a results.json
        failed = GradingFailed(traceback.format_exc())
    print(f"run_autograder: grading failed, writing a fallback results.json:\n{failed.error}",
          file=sys.stderr)
    _write_json(results, fallback_results(failed, time.monotonic() - started))
    _print_status(results.parent, staff, failed.error)
    return 1


def _print_status(results_dir: Path, staff_dir: Path, error: str | None) -> None:
    """The submission's status for staff (ok, flagged and why, grader_error...), as a batch
    records it (from the full report): on run_autograder's stdout, which Gradescope shows
    instructors only."""
    from autograder.batch.submission_status import derive
    from autograder.grading.results import Report
    from autograder.grading.ta_events import take_kept_events

    try:
        try:
            report = Report.from_json(
                json.loads((staff_dir / "report.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError):
            report = None
        status = derive(report if error is None else None,
                        None if error is None else error_summary(error),
                        take_kept_events(results_dir))
        said = f"{status.status}: {status.detail}" if status.detail else status.status
    except Exception as exc:  # results.json is written already: never fail it now
        said = f"unknown (the status could not be derived: {exc})"
    print(f"{STATUS_PREFIX}{said}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope.entry",
                                     description="Grade a Gradescope submission (run_autograder).")
    parser.add_argument("--root", type=Path,
                        default=Path(os.environ.get(GRADESCOPE_ROOT_ENV) or "/autograder"))
    parser.add_argument("--assignment", required=True)
    args = parser.parse_args(argv)
    # This process's one project: run_autograder sets AUTOGRADER_ROOT to the bundle's source.
    return run_in_container(args.root, args.assignment, Project.find())


if __name__ == "__main__":
    sys.exit(main())
