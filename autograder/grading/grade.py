"""Grade one submission end to end: `grade(submission, assignment, out)`.

submission -> (answers graded here, code run by the runner in sandboxes) -> Report -> files.
This is the trusted parent: it never imports torch, student code or the hidden tests.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from autograder.grading.late import SubmissionDates, late_entry
from autograder.grading.report import write_outputs
from autograder.grading.results import (
    GradingEnvironment,
    Report,
    TestResult,
    apply_late,
    build_report,
    coding_results,
)
from autograder.grading.supervisor import SuiteRun, run_hidden_tests
from autograder.grading.ta_events import keep_sandbox_events
from autograder.grading.visibility import release_for
from autograder.inputs.archives import ArchiveError, extract_zip
from autograder.inputs.notebook import NotebookError, extract_module, module_state
from autograder.inputs.submission import GradedFile, SubmissionFiles, locate
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.inert import MAX_MESSAGE, clip, label
from autograder.project.paths import Project
from autograder.protocol.fork_channel import RunnerServer, start_runner_server
from autograder.questions.answers import INVALID, UNANSWERED, grade_answers
from autograder.sandbox_runtime import cells
from autograder.student_files import check as student_check


def grade(submission: Path, assignment: str, out: Path,
          project: Project, dates: SubmissionDates | None = None,
          staff_out: Path | None = None) -> Report:
    """Grade `submission` (a folder or a .zip) for an assignment of `project` and write
    results.json and the reports to `out`
    (what students may see of them; `staff_out`: the full copy too). `dates`: when it was
    submitted (the late policy) and the student's own dates (an extension)."""
    started = time.monotonic()
    # A warm runner server of this grading's own, started first: its imports (torch, pytest,
    # the sandbox runtime) overlap the loading below, and the runner and the zygotes it forks
    # share them, where a cold runner and a cold zygote would each import torch again.
    runners = start_runner_server()
    try:
        spec = load_assignment(assignment, project)
        return grade_loaded(submission, spec, out, started, dates=dates, runners=runners,
                            staff_out=staff_out)
    finally:
        if runners is not None:
            runners.close()


def grade_loaded(submission: Path, assignment: Assignment, out: Path,
                 started: float | None = None, dates: SubmissionDates | None = None,
                 runners: RunnerServer | None = None, graded_at: datetime | None = None,
                 staff_out: Path | None = None) -> Report:
    """Grade with a loaded assignment. `dates` give the late entry (`late_entry`, the same for a
    batch and Gradescope) and, with `graded_at` (now by default), what students are shown
    (`release_for`); `runners`: a batch worker's warm runner server (None: runners start cold).
    Returns the full report (the staff's), as written."""
    return grade_measured(submission, assignment, out, started, dates, runners, graded_at,
                          staff_out)[0]


def grade_measured(submission: Path, assignment: Assignment, out: Path,
                   started: float | None = None, dates: SubmissionDates | None = None,
                   runners: RunnerServer | None = None, graded_at: datetime | None = None,
                   staff_out: Path | None = None) -> tuple[Report, SuiteRun]:
    """`grade_loaded`, and the run of the hidden tests behind it (the release self-check
    records the reference's time per test from it)."""
    started = time.monotonic() if started is None else started
    release = release_for(assignment.config, dates, graded_at)
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    os.chmod(workdir, 0o711)  # sandbox users may pass through to their own folder, not list
    try:
        graded, suite = _grade(submission, assignment, workdir, started, runners)
        report = apply_late(graded, late_entry(assignment.config, dates))
    finally:
        keep_sandbox_events(workdir, out)  # for the TA only (see ta_events)
        # AUTOGRADER_KEEP_WORKDIR=1 keeps runner.log (pytest's own output) for instructors.
        if os.environ.get("AUTOGRADER_KEEP_WORKDIR"):
            print(f"autograder: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report.release = release.record(report.tests)
    if staff_out is not None:
        write_outputs(report, staff_out, assignment.project.schemas, students=False)
    return write_outputs(report, out, assignment.project.schemas), suite


def _grade(submission: Path, assignment: Assignment, workdir: Path, started: float,
           runners: RunnerServer | None) -> tuple[Report, SuiteRun]:
    config = assignment.config
    try:
        files = _submission_files(submission, workdir / "upload", config.module,
                                  list(config.functions))
    except Exception as exc:  # noqa: BLE001 - a last line: the student still gets a report
        problem = f"your submission could not be read ({type(exc).__name__}); tell your instructor"
        files = SubmissionFiles(workdir / "upload", None, problem, None, [])
    warnings = list(files.warnings)

    mc = grade_answers(assignment.bank, files.answers)
    warnings += mc.warnings
    tests = [_question_result(r, assignment) for r in mc.results]

    suite = run_hidden_tests(assignment, files, workdir, runners)
    if files.module_problem:
        warnings.append(f"coding part: {files.module_problem}")
    warnings += suite.warnings
    tests += coding_results(suite.outcomes, config, warnings, internal_names(assignment))
    environment = GradingEnvironment(**suite.environment, gpu_policy=config.gpu_policy)
    return build_report(config, submission.name, tests, warnings, environment,
                        time.monotonic() - started, files.graded_file), suite


def internal_names(assignment: Assignment) -> list[str]:
    """The classes of the grader's probes and hidden tests: never shown to students (PyTorch
    names a model's class in its errors; a test's scenario model is the grader's business)."""
    sources = [assignment.probes, *sorted(assignment.hidden_tests.glob("*.py"))] \
        if assignment.hidden_tests.is_dir() else [assignment.probes]
    files = []
    for path in sources:
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((str(path), stat.st_mtime_ns, stat.st_size))
    return list(_class_names(tuple(files)))


# Parsing the hidden tests took 80 ms of the parent's 0.2 CPU-seconds per grading (profile_warm):
# parsed once per version of the files (path, mtime, size), so an edit is still seen.
@functools.lru_cache(maxsize=16)
def _class_names(files: tuple[tuple[str, int, int], ...]) -> tuple[str, ...]:
    names: list[str] = []
    for path, _, _ in files:
        try:
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        names += [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    return tuple(names)


def graded_module(submission: Path, assignment: Assignment, workdir: Path) -> Path | None:
    """The module file that `grade` would run for `submission` (a zip extracted safely, a
    notebook converted, under the empty folder `workdir`), or None when it has none. For
    reading as text (the class's similarity check); nothing here imports it."""
    try:
        files = _submission_files(submission, workdir / "upload", assignment.config.module,
                                  list(assignment.config.functions))
    except Exception:  # noqa: BLE001 - as in _grade: an unreadable upload has no module
        return None
    return files.module if files.module_problem is None else None


def _submission_files(submission: Path, unpack_to: Path, module: str,
                      functions: list[str] | None = None) -> SubmissionFiles:
    """Locate the files of a folder, or of a zip upload extracted safely; then choose between
    the module and a notebook as check.py does (student_check.choose_graded): the notebook,
    extracted next to `unpack_to`, when the module is missing or still the template's stub
    (`graded_file` says which file was graded and why)."""
    if not (submission.is_file() and submission.suffix.lower() == ".zip"):
        files = locate(submission, module)
    else:
        unpack_to.mkdir()
        try:
            extract_zip(submission, unpack_to)
        except ArchiveError as exc:
            problem = f"{label(submission.name)}: {exc}"
            return SubmissionFiles(unpack_to, None, problem, None, [problem])
        files = locate(unpack_to, module)
    if files.notebook is not None and not (files.module is None and files.module_problem):
        files.graded_file = _choose(files, unpack_to.parent / "notebook", module, functions)
    return files


def _choose(files: SubmissionFiles, folder: Path, module: str,
            functions: list[str] | None) -> dict:
    # JSON only, here in the trusted parent: the notebook's code runs in the sandbox, as a module.
    notebook = files.notebook
    extracted, problem = None, None
    try:
        extracted = extract_module(notebook, module, functions)
    except (NotebookError, OSError) as exc:
        problem = str(exc)
    state = module_state(files.module, functions) if files.module else None
    chosen, why = student_check.choose_graded(
        module, files.module.name if files.module else None, state, notebook.name,
        extracted.state if extracted else student_check.BROKEN, problem)
    graded = GradedFile(chosen or notebook.name, why or "")
    if chosen != notebook.name:
        return graded
    files.warnings += files.notebook_warnings
    if extracted is None:  # the notebook's problem, and why it mattered when a stub is there
        files.module, files.module_problem = None, why if files.module else problem
        return graded
    folder.mkdir(exist_ok=True)
    files.module, files.module_problem = folder / f"{module}.py", None
    # surrogatepass: a lone surrogate from the notebook's JSON becomes bytes that the import
    # in the sandbox reports, rather than an error here.
    files.module.write_bytes(extracted.source.encode("utf-8", "surrogatepass"))
    # Beside the module into the sandbox, so that errors name the notebook's cells.
    (folder / cells.map_name(module)).write_text(json.dumps(extracted.cells))
    files.warnings += extracted.warnings
    return graded


def _question_result(r, assignment: Assignment) -> TestResult:
    config = assignment.config
    feedback = []
    if config.reveal_key:
        feedback = [f"Correct answer: {', '.join(r.key)}", r.explanation]
    # Right or wrong shows when the part's visibility says (after the due date by default, so
    # resubmissions do not give the key away); an answer left out or malformed at once, so that
    # it can be fixed in time. Neither says which answer is right.
    # The key shown with an unanswered question still waits for the key's own visibility.
    problem = r.status in (UNANSWERED, INVALID)
    # Whether it was answered, never whether rightly: that is the status's (and may be hidden).
    cause = {UNANSWERED: "not_answered", INVALID: "invalid_answer"}.get(r.status, "answered")
    return TestResult(
        name=r.title, part="multiple_choice", item=r.id, score=r.score, max_score=r.max_score,
        status="passed" if r.status == "correct" else "failed", cause=cause,
        # (the heading says the question's title already)
        message=clip(r.message.removeprefix(f"{r.title}: "), MAX_MESSAGE),
        visibility=config.answer_problems_visibility if problem
        else config.multiple_choice.visibility, feedback=feedback,
        feedback_visibility=config.multiple_choice.visibility if problem and feedback else None)
