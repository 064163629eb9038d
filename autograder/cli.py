"""The `autograder` command: a thin face over the Python API of the same shape.

Every command that reads or writes a project takes it the same way (`--root`, or
`AUTOGRADER_ROOT`, or found from the working folder as git finds a repository; `--config` for
another grading.yml), says on its first line of output (stderr) which project it uses, takes an
assignment as `-a NAME`, and ends with one of the exit codes below, from one error handler.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autograder.project.inert import inert
from autograder.project.paths import Project

if TYPE_CHECKING:
    from autograder.grading.late import SubmissionDates

EXIT_CODES = """\b
Exit status:
  0    done; what was checked passed
  1    what was checked fails: generated files or templates out of date, a key
       mismatch, a release self-check, a student folder's check, grader errors in
       a batch, a generator that failed
  2    usage, configuration or assignment error (bad grading.yml, question bank,
       hidden tests, missing folder), a sandbox that cannot start, or
       --require-gpu without a GPU
  3    student code cannot be isolated on this machine: nothing was graded (the
       error says how to fix the set-up)
  130  interrupted (Ctrl-C); run the same command again to resume a batch"""


def _usage_errors() -> tuple[type[BaseException], ...]:
    """The engine's errors that mean "fix the configuration or the sources" (exit 2)."""
    from autograder.batch.driver import BatchError
    from autograder.batch.gradebook import GradebookError
    from autograder.batch.roster import RosterError
    from autograder.grading.supervisor import GradingError
    from autograder.project.config import ConfigError
    from autograder.project.markers import MarkerError
    from autograder.project.question_bank import QuestionBankError
    from autograder.project.schemas import SchemaError

    return (BatchError, ConfigError, GradebookError, GradingError, MarkerError,
            QuestionBankError, RosterError, SchemaError)


class _Face(click.Group):
    """One error handler for every command: a known error is one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        from autograder.release.build import ReleaseError
        from autograder.sandbox.isolation import IsolationUnavailable

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("stopped: run the same command again to carry on", err=True)
            sys.exit(130)
        except ReleaseError as exc:
            click.echo(f"error: {inert(str(exc))}", err=True)
            sys.exit(1)
        except IsolationUnavailable as exc:
            click.echo(f"error: {inert(str(exc))}", err=True)
            sys.exit(IsolationUnavailable.EXIT_STATUS)
        except _usage_errors() as exc:
            click.echo(f"error: {inert(str(exc))}", err=True)
            sys.exit(2)


def project_options(command: Callable) -> Callable:
    """`--root` and `--config`, the same on every command that uses a project (and before the
    command's name, on `autograder` itself)."""

    @click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path),
                  help="The project's folder (default: AUTOGRADER_ROOT, else the nearest "
                       "folder holding a grading.yml from here upward).")
    @click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                  help="The grading.yml to use (default: the project's); the folder "
                       "holding it is the project.")
    @click.pass_context
    @functools.wraps(command)
    def with_project(ctx: click.Context, *args: Any, root: Path | None,
                     config_path: Path | None, **kwargs: Any) -> Any:
        chosen = _choose(ctx, root, config_path)
        click.echo(f"project: {chosen.root} ({chosen.how})", err=True)
        return ctx.invoke(command, *args, project=chosen, **kwargs)

    return with_project


def _choose(ctx: click.Context, root: Path | None, config: Path | None) -> Project:
    """The command's one Project, made here and passed down to everything it calls."""
    parent = ctx.find_root().params
    root = root or parent.get("root")
    config = config or parent.get("config_path")
    if config is not None:
        config = config.resolve()
        if not config.is_file():
            raise click.BadParameter(f"{config} does not exist", param_hint="--config")
        if root is not None and root.resolve() != config.parent:
            # (child processes find the project again from its root alone)
            raise click.UsageError(f"--config {config} makes its folder the project, not "
                                   f"--root {root}: give one of them (a grading.yml's project is "
                                   "the folder holding it, with its assignments/)")
        chosen = Project.of_config(config, "from --config")
    elif root is not None:
        chosen = Project.at(root, "from --root")
    else:
        chosen = Project.find()
    # Child processes (runners, batch workers, self-checks) act on the same project.
    os.environ["AUTOGRADER_ROOT"] = str(chosen.root)
    return chosen


def _assignment(value: str | None, positional: str | None = None) -> str:
    if value and positional and value != positional:
        raise click.UsageError(f"ASSIGNMENT {positional!r} and -a {value!r} name different "
                               "assignments: give one")
    name = value or positional
    if not name:
        raise click.UsageError("which assignment? give it as -a NAME")
    return name


ASSIGNMENT_OPTION = click.option("--assignment", "-a", "assignment",
                                 help="Assignment name, e.g. hw1.")
# For commands that read a batch's OUT, whose gradebook knows its assignment: optional.
GRADED_ASSIGNMENT_OPTION = click.option(
    "--assignment", "-a", "assignment",
    help="Check that OUT graded this assignment (its gradebook knows which).")
UNSAFE_OPTION = click.option(
    "--unsafe-no-isolation", "unsafe", is_flag=True,
    help="Run student code WITHOUT isolation, as this user (root included): only to debug the "
         "engine, never to grade students. Sets AUTOGRADER_UNSAFE_NO_ISOLATION=1; reports say "
         "so. Without it, a grader that cannot isolate student code refuses to grade.")


def _unsafe_opt_in(unsafe: bool) -> None:
    """--unsafe-no-isolation: for this process and every process it starts."""
    if unsafe:
        from autograder.sandbox.isolation import UNSAFE_ENV

        os.environ[UNSAFE_ENV] = "1"
        click.echo("warning: --unsafe-no-isolation: student code runs WITHOUT isolation "
                   "(debugging only; never grade students this way)", err=True)


@click.group(cls=_Face, epilog=EXIT_CODES)
@click.version_option(package_name="autograder")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The project's folder, for every command (see the commands' --root).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The grading.yml to use, for every command.")
def main(root: Path | None, config_path: Path | None) -> None:
    """Sandboxed autograder for the PyTorch multi-GPU unit."""


@main.command(epilog=EXIT_CODES)
@click.argument("submission", type=click.Path(exists=True, path_type=Path))
@ASSIGNMENT_OPTION
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for results.json and the reports.")
@click.option("--require-gpu", is_flag=True,
              help="Fail (exit 2) unless torch sees a CUDA device, instead of applying gpu_policy.")
@click.option("--metadata", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Gradescope's submission_metadata.json: the submission time (the late policy "
                   "counts from it), the student's own due date (an extension) and Gradescope's "
                   "due dates (after_due_date results are not shown before them).")
@click.option("--submitted-at", metavar="TIME",
              help="When it was submitted (ISO 8601 with a time zone): apply the late policy "
                   "as a batch would (overrides --metadata's time).")
@click.option("--staff-out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the staff's full copy of the four files (OUT holds what the "
                   "student may see: nothing of a result before its visibility allows).")
@UNSAFE_OPTION
@project_options
def grade(submission: Path, assignment: str | None, out: Path, require_gpu: bool,
          metadata: Path | None, submitted_at: str | None, staff_out: Path | None,
          unsafe: bool, project: Project) -> None:
    """Grade one SUBMISSION (a folder or a .zip) into OUT: results.json, report.json/.md/.html,
    as the student may see them when graded (results shown after the due date are withheld
    before it, and counted in no total).

    Refused (exit 3, nothing written) when student code cannot be isolated here, or exit 2
    when its sandbox cannot start: the error says what failed and how to fix it."""
    from autograder.grading.grade import grade as grade_submission

    assignment = _assignment(assignment)
    _unsafe_opt_in(unsafe)
    dates = _submission_dates(assignment, project, metadata, submitted_at)

    if require_gpu:
        count, problem = _cuda_device_count()
        if not count:
            click.echo("error: --require-gpu: torch sees no CUDA device "
                       f"({problem or 'torch.cuda.device_count() == 0'}); grade on a GPU machine, "
                       "or leave out --require-gpu to apply grading.yml's gpu_policy", err=True)
            sys.exit(2)
    report = grade_submission(submission, assignment, out, project, dates, staff_out)
    from autograder.grading.report import points

    if report.graded_file:
        click.echo(f"graded file: {inert(report.graded_file.file)} "
                   f"({inert(report.graded_file.why)})")
    for part in report.parts:
        click.echo(f"{part.name:<16} {points(part.score):>7} / {points(part.max_score)}")
    if report.late and report.late.raw_score != report.score:  # the parts add up to raw
        penalty = report.score - report.late.raw_score
        click.echo(f"{'late penalty':<16} {points(penalty):>7}   ({inert(report.late.message)})")
    click.echo(f"{'total':<16} {points(report.score):>7} / {points(report.max_score)}")
    for warning in report.warnings:  # inert already; again, as this is a terminal
        click.echo(f"note: {inert(warning)}")
    click.echo(f"isolation: {report.environment.isolation}; "
               + "; ".join(report.environment.protections))
    click.echo(f"reports: {out / 'report.html'} (and report.md, report.json, results.json)")
    release = report.release
    if release is not None and release.withheld:
        click.echo(f"withheld from the student's files: {release.withheld} result(s) worth "
                   f"{points(release.withheld_points)} points (the totals above count them; "
                   f"shown from {release.results_shown_at or 'a due date, once one is set'})")


def _submission_dates(assignment: str, project: Project, metadata: Path | None,
                      submitted_at: str | None) -> SubmissionDates | None:
    """`grade`'s SubmissionDates from --metadata and --submitted-at (None: neither given)."""
    from dataclasses import replace

    from autograder.grading.late import SubmissionDates
    from autograder.project.config import assignment_config
    from autograder.project.late_policy import parse_timestamp

    if metadata is None and submitted_at is None:
        return None
    dates = SubmissionDates()
    if metadata is not None:
        from autograder.gradescope.metadata import submission_dates

        due = assignment_config(assignment, project).due
        dates, notes = submission_dates(metadata, due)
        for note in notes:  # the grader's terminal (on Gradescope: stdout, for staff)
            click.echo(f"note (staff): {inert(note)}", err=True)
    if submitted_at is not None:
        try:
            dates = replace(dates, created_at=parse_timestamp(submitted_at))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--submitted-at") from None
    return dates


@main.command(epilog=EXIT_CODES)
@click.argument("positional", metavar="[ASSIGNMENT]", required=False)
@ASSIGNMENT_OPTION
@project_options
def validate(positional: str | None, assignment: str | None, project: Project) -> None:
    """Check an assignment's sources: config, question bank, hidden tests' names and points."""
    import tempfile

    from autograder.grading.supervisor import collect_hidden_tests
    from autograder.project.assignment import load_assignment
    from autograder.release.validation import check_assignment, check_warnings

    assignment = _assignment(assignment, positional)
    problems = check_assignment(assignment, project)
    for line in check_warnings(assignment, project):  # legal, but wrong or a leak
        click.echo(f"warning: {assignment}: {inert(line)}", err=True)
    if problems:  # every problem of every file in one run, by file
        count = sum(len(found) for found in problems.values())
        click.echo(f"error: {assignment}: {count} problem{'s' * (count != 1)}", err=True)
        for label, found in problems.items():
            click.echo(f"  {label}:", err=True)
            for line in found:
                click.echo(f"    - {inert(line)}", err=True)
        sys.exit(2)
    spec = load_assignment(assignment, project)
    with tempfile.TemporaryDirectory() as workdir:
        tests = collect_hidden_tests(spec, Path(workdir))
    def count(n: float, word: str) -> str:
        return f"{n:g} {word}{'' if n == 1 else 's'}"

    click.echo(f"{assignment}: {count(len(spec.bank.questions), 'question')}, "
               f"{count(spec.bank.total_points, 'point')}")
    for function, points in spec.config.functions.items():
        mine = [t for t in tests if t["function"] == function]
        gpu = sum(1 for t in mine if t["gpu"])
        click.echo(f"  {function:<28} {count(points, 'point'):>10}  {count(len(mine), 'test'):>9}"
                   + (f" ({gpu} need{'s' if gpu == 1 else ''} a GPU)" if gpu else ""))
    click.echo(f"{count(len(tests), 'hidden test')}, "
               f"{count(sum(t['points'] for t in tests), 'point')}: OK")


@main.command(epilog=EXIT_CODES)
@click.option("--assignment", "-a", "named", multiple=True,
              help="Assignment whose template to cover (repeatable; default: every assignment "
                   "of grading.yml). The docs and the generators are covered either way.")
@click.option("--check", is_flag=True,
              help="Write nothing: list every generated file that is out of date (exit 1).")
@project_options
def generate(named: tuple[str, ...], check: bool, project: Project) -> None:
    """Make every generated file the project commits from its sources: student templates (with
    each assignment's answers schema), docs/grading.md, and the files of grading.yml's
    `generators`. Reference timings are listed when stale; `autograder release` records them."""
    from autograder.release.build import assignment_names
    from autograder.release.generate import generate as generate_files
    from autograder.release.generate import generators

    names = list(named) or assignment_names(project)
    outcome = generate_files(project, names, check)
    for line in outcome.said:
        click.echo(line)
    for line in outcome.written:
        click.echo(f"wrote {line}")
    for line in [*outcome.stale, *outcome.problems]:
        click.echo(line, err=True)
    if outcome.stale:
        click.echo(f"{len(outcome.stale)} generated file(s) out of date: run `autograder "
                   f"generate`" + (" (timings: `autograder release`)" if any(
                       "timings" in line for line in outcome.stale) else ""), err=True)
    if outcome.stale or outcome.problems:
        sys.exit(1)
    click.echo("generated files up to date" if check else
               f"templates and docs: {len(outcome.written)} file(s) written, the rest up to "
               f"date; generators run: {len(generators(project))}")


def _cuda_device_count() -> tuple[int, str]:
    """CUDA devices torch sees, asked in a child process: the trusted parent never imports torch."""
    import subprocess

    try:
        proc = subprocess.run([sys.executable, "-c",
                               "import torch; print(torch.cuda.device_count())"],
                              capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"could not ask torch: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return 0, f"torch failed: {lines[-1] if lines else proc.returncode}"
    return int(proc.stdout.split()[-1]), ""


@main.command(epilog=EXIT_CODES)
@click.argument("positional", metavar="[ASSIGNMENT]...", nargs=-1)
@click.option("--assignment", "-a", "named", multiple=True,
              help="Assignment name (repeatable; default: every assignment of grading.yml).")
@click.option("--check", is_flag=True,
              help="Only list template files that differ from what the sources give (exit 1); "
                   "writes nothing, runs no self-check.")
@click.option("--skip-self-check", is_flag=True,
              help="Regenerate without grading the reference and the template first.")
@click.option("--notebook", type=click.Choice(["nbgrader", "otter"]), default="nbgrader",
              show_default=True,
              help="otter: also write an otter-grader master notebook and its files to "
                   "OUT/ASSIGNMENT/, for `otter assign` (it holds the solution: instructors "
                   "only). The student template's notebook is nbgrader's either way.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="With --notebook otter: where to write (default: dist/otter).")
@project_options
def release(positional: tuple[str, ...], named: tuple[str, ...], check: bool,
            skip_self_check: bool, notebook: str, out: Path | None,
            project: Project) -> None:
    """Generate student_templates/ASSIGNMENT/ and dist/ASSIGNMENT-student.zip (default: all)."""
    from autograder.release.build import assignment_names, check_templates
    from autograder.release.build import release as release_assignment

    assignments = (*named, *positional)
    if out is not None and notebook != "otter":
        raise click.UsageError("--out is the otter master's folder: use it with --notebook otter")
    otter_root = (out or project.dist / "otter") if notebook == "otter" else None
    names = list(assignments) or assignment_names(project)
    if check:
        drift = check_templates(names, project)
        for line in drift:
            click.echo(line, err=True)
        if drift:
            command = " ".join(["autograder release", *(f"-a {n}" for n in assignments)])
            click.echo(f"{len(drift)} template file(s) out of date: run `{command}`", err=True)
            sys.exit(1)
        click.echo(f"student templates up to date: {', '.join(names)}")
        return
    for name in names:
        click.echo(f"{name}: " + ("generating (self-check skipped)" if skip_self_check
                                  else "self-check, then generating"))
        done = release_assignment(name, project, not skip_self_check, click.echo,
                                  otter_dir=otter_root / name if otter_root else None)
        for line in done.changed:
            click.echo(f"  changed: {line}")
        click.echo(f"  {project.templates / name}/ "
                   f"({'unchanged' if not done.changed else 'written'}); {done.zip_path}")
        if done.otter_dir is not None:
            click.echo(f"  {done.otter_dir}/: otter master notebook (holds the solution; "
                       f"next: otter assign {done.otter_dir / (name + '.ipynb')} OUTPUT)")


@main.command("verify-key", epilog=EXIT_CODES)
@click.argument("positional", metavar="[ASSIGNMENT]", required=False)
@ASSIGNMENT_OPTION
@project_options
def verify_key(positional: str | None, assignment: str | None, project: Project) -> None:
    """Run every snippet question on this machine and compare with the key's expectations."""
    from autograder.project.assignment import load_assignment
    from autograder.release.build import verify_key as verify

    bank = load_assignment(_assignment(assignment, positional), project).bank
    try:
        checks = verify(bank)
    except RuntimeError as exc:  # a snippet could not be run at all here
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for c in checks:
        verdict = "OK" if not c.problems else "MISMATCH " + "; ".join(
            p.removeprefix(f"{c.question} ({c.environment}): ") for p in c.problems)
        click.echo(f"{c.question:<32} {c.environment:<10} {verdict}")
    bad = sum(1 for c in checks if c.problems)
    click.echo(f"{len(checks)} snippet questions, {bad} mismatch(es)")
    sys.exit(1 if bad else 0)


@main.command(epilog=EXIT_CODES)
@click.argument("folder", default=".", type=click.Path(exists=True, file_okay=False,
                                                      path_type=Path))
@click.option("--assignment", "-a", "assignment",
              help="The assignment the folder is for (default: the one whose module it holds).")
@click.option("--module", help="The module to check (default: the assignment's, else found "
                               "from grading.yml).")
@click.option("--no-tests", is_flag=True, help="Check the files only; do not run the tests.")
@project_options
def check(folder: Path, assignment: str | None, module: str | None, no_tests: bool,
          project: Project) -> None:
    """Check a student's FOLDER as check.py does: answers' form (no key), public tests."""
    from autograder.release.build import check_student_folder

    sys.exit(check_student_folder(folder, module, project, not no_tests,
                                  assignment=assignment))


@main.command(epilog=EXIT_CODES)
@click.argument("positional", metavar="[ASSIGNMENT]", required=False)
@ASSIGNMENT_OPTION
@click.option("--out", "-o", type=click.Path(path_type=Path),
              help="The zip to write (a path ending in .zip), or a folder to write "
                   "ASSIGNMENT-gradescope.zip in (default: dist/).")
@click.option("--try", "tries", multiple=True, metavar="SUBMISSION",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Then grade this submission folder in a Gradescope-like Docker container "
                   "(768 MB, half a CPU, no network, Docker's default confinement); repeatable.")
@click.option("--self-hosted", is_flag=True,
              help="With --try: add --cap-add SYS_ADMIN (the self-hosted recipe: namespaces).")
@click.option("--base-image", metavar="IMAGE",
              help="With --try: the image to build on (default: gradescope/autograder-base if "
                   "present, else a Debian stand-in made once with debootstrap).")
@project_options
def gradescope(positional: str | None, assignment: str | None, out: Path | None,
               tries: tuple[Path, ...], self_hosted: bool, base_image: str | None,
               project: Project) -> None:
    """Build the Gradescope autograder zip of an assignment (setup.sh, run_autograder, sources),
    and with --try grade submissions with it in a container, as Gradescope would."""
    from autograder.release.gradescope_bundle import build_bundle

    name = _assignment(assignment, positional)
    if out is not None and out.suffix != ".zip":  # a folder, as every other command's --out
        out = out / f"{name}-gradescope.zip"
    path = build_bundle(name, project, out)
    click.echo(f"wrote {path}: upload it as the assignment's autograder (Configure Autograder -> "
               "Zip file upload), base image Ubuntu 22.04")
    if tries:
        from autograder.gradescope import container

        limits = container.SELF_HOSTED if self_hosted else container.GRADESCOPE
        try:
            runs = container.try_bundle(path, list(tries), limits, base_image,
                                        say=lambda line: click.echo(inert(line)))
        except container.ContainerError as exc:
            raise click.ClickException(str(exc)) from None
        sys.exit(1 if any(run.problems() for run in runs) else 0)


@main.command(epilog=EXIT_CODES)
@click.argument("submissions", type=click.Path(exists=True, path_type=Path))
@ASSIGNMENT_OPTION
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for gradebook.sqlite, grades.csv, index.html and reports/<sid>/.")
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(min=1),
              help="Submissions graded at once (each uses about one core).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="Warm workers on this machine, or a Ray cluster.")
@click.option("--address", help="Ray cluster address (default: start a local Ray instance, "
                                 "listening on 127.0.0.1 only, for this batch).")
@click.option("--force", is_flag=True, help="Regrade every submission, changed or not.")
@click.option("--only", multiple=True, metavar="SID",
              help="Regrade only this student (sid or submission key); repeatable.")
@click.option("--detail", is_flag=True,
              help="grades.csv and grades.xlsx: also a column per hidden test.")
@click.option("--canvas-id", metavar="ID",
              help="The Canvas assignment canvas_grades.csv fills in: the number at the end of "
                   "its address (.../assignments/ID). Default: the column is the assignment's "
                   "title, which Canvas matches exactly or makes a new assignment of.")
@UNSAFE_OPTION
@project_options
def batch(submissions: Path, assignment: str | None, out: Path, jobs: int, backend: str,
          address: str | None, force: bool, only: tuple[str, ...], detail: bool,
          canvas_id: str | None, unsafe: bool, project: Project) -> None:
    """Grade a class: SUBMISSIONS is a Gradescope export (zip or folder) or a folder of
    per-student folders. Re-runs skip unchanged submissions; Ctrl-C stops, a re-run resumes.
    Refused at once (exit 3) when student code cannot be isolated on this machine."""
    from autograder.batch.driver import BatchInterrupted
    from autograder.batch.driver import batch as run_batch

    _unsafe_opt_in(unsafe)

    try:
        summary = run_batch(submissions, _assignment(assignment), out, jobs=jobs,
                            backend=backend, address=address, force=force, only=list(only),
                            project=project, detail=detail, canvas_id=canvas_id)
    except BatchInterrupted as stop:
        _batch_said(stop.summary, out)
        sys.exit(130)
    except KeyboardInterrupt:  # before grading began, or again while the outputs were written
        click.echo("stopped: every finished submission is in the gradebook; run the same "
                   "command again to grade the rest", err=True)
        sys.exit(130)
    _batch_said(summary, out)
    if summary.failed:
        sys.exit(1)


def _batch_said(summary: Any, out: Path) -> None:
    for warning in summary.warnings:  # roster notes name the export's folders
        click.echo(f"note: {inert(warning)}")
    if not summary.nothing_to_grade:  # a re-run with nothing to do says one line
        for note in summary.export_notes:
            click.echo(f"note: {inert(note)}")
    click.echo(summary.line(), err=bool(summary.not_finished))
    if not summary.nothing_to_grade or summary.not_finished:
        click.echo(f"class overview: {out / 'index.html'}; grades: {out / 'grades.csv'} "
                   f"(and grades.xlsx); Canvas import: {out / 'canvas_grades.csv'}")
    if summary.similar:
        click.echo(f"similar code: {summary.similar} pair(s) listed in the overview "
                   f"({out / 'index.html'}#similarity)")


@main.command(epilog=EXIT_CODES)
@click.argument("who", metavar="SID")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder a batch wrote (its gradebook.sqlite).")
@click.option("--since-run", type=click.IntRange(min=1), metavar="N",
              help="Only runs from run N on (ids as shown).")
@GRADED_ASSIGNMENT_OPTION
def history(who: str, out: Path, since_run: int | None, assignment: str | None) -> None:
    """A student's grading runs (SID, or a submission key) and what changed between them:
    score, status and the tests whose outcome changed."""
    from autograder.batch.driver import history as read_history

    found = read_history(out, who, since_run, assignment)
    for entry in found:
        students = ", ".join(entry.students)
        click.echo(inert(f"{entry.key}" + (f": {students}" if students else "")))
        if not entry.runs:
            click.echo("  no run in that range")
        for run in entry.runs:
            score = "no score" if run.score is None else f"{run.score:g}/{run.max_score:g}"
            change = "" if run.score_change is None else f" ({run.score_change:+g})"
            why = f"; {', '.join(run.why)}" if run.why else ""
            detail = f": {run.detail}" if run.detail and run.status != "ok" else ""
            click.echo(inert(f"  run {run.run_id}  {run.graded_at}  {score}{change}  "
                             f"{run.status}{detail}{why}"))
            for name, before, now in run.tests:
                click.echo(inert(f"      {name}: {before} -> {now}"))
        for adjustment in entry.adjustments:
            click.echo(inert(f"  {adjustment.sid}: {adjustment.describe()}"))


OUT_OPTION = click.option("--out", "-o", required=True,
                          type=click.Path(file_okay=False, path_type=Path),
                          help="The folder a batch wrote (its gradebook.sqlite).")
REASON_OPTION = click.option("--reason", required=True,
                             help="Why (a regrade request, a medical note): kept with it.")
BY_OPTION = click.option("--by", metavar="WHO",
                         help="Who decided (default: this machine's user name).")


def _adjusted(done: Any) -> None:
    click.echo(inert(f"{done.adjustment.sid}: {done.adjustment.describe()}"))
    for note in done.notes:
        click.echo(f"note: {inert(note)}")


@main.command(epilog=EXIT_CODES)
@click.argument("sid", metavar="SID")
@ASSIGNMENT_OPTION
@OUT_OPTION
@click.option("--score", type=float, help="The score every export gives the student.")
@click.option("--clear", is_flag=True, help="Back to the graded score.")
@REASON_OPTION
@BY_OPTION
@project_options
def override(sid: str, assignment: str | None, out: Path, score: float | None, clear: bool,
             reason: str, by: str | None, project: Project) -> None:
    """Override student SID's score in every export (grades.csv/.xlsx, canvas_grades.csv, the
    overview), kept in the gradebook with who, when and why; the exports are written again."""
    from autograder.batch.adjustments import override as record_override

    _adjusted(record_override(out, _assignment(assignment), sid, reason, score=score,
                              clear=clear, by=by, project=project))


@main.command(epilog=EXIT_CODES)
@click.argument("sid", metavar="SID")
@ASSIGNMENT_OPTION
@OUT_OPTION
@click.option("--until", metavar="DATE",
              help="The student's due date, ISO 8601 with a time zone "
                   "(2026-12-18T23:59:00-05:00).")
@click.option("--clear", is_flag=True, help="Back to the assignment's due date.")
@REASON_OPTION
@BY_OPTION
@project_options
def extend(sid: str, assignment: str | None, out: Path, until: str | None, clear: bool,
           reason: str, by: str | None, project: Project) -> None:
    """Extend student SID's due date for the late policy, kept in the gradebook with who, when
    and why; the next `autograder batch` regrades their submission with it."""
    from autograder.batch.adjustments import extend as record_extension

    _adjusted(record_extension(out, _assignment(assignment), sid, reason, until=until,
                               clear=clear, by=by, project=project))


@main.command("release-feedback", epilog=EXIT_CODES)
@OUT_OPTION
@GRADED_ASSIGNMENT_OPTION
@click.option("--to", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write one folder per student (default: OUT/feedback).")
def release_feedback(out: Path, assignment: str | None, to: Path | None) -> None:
    """Write what students may see, and nothing else, one folder per student: their report
    files (results.json, report.json, report.md, report.html) and grade.json, the score every
    export gives them (an override's, never its reason; no score before the due date, when
    their reports count the coding part alone). No statuses, flags, similarity, reasons or
    staff files."""
    from autograder.batch.feedback import release_feedback as release

    done = release(out, to, assignment)
    for note in done.notes:
        click.echo(f"note: {inert(note)}")
    click.echo(f"{done.to}: feedback for {len(done.students)} student(s), one folder each")


@main.command("new", epilog=EXIT_CODES)
@click.argument("positional", metavar="[NAME]", required=False)
@click.option("--assignment", "-a", "assignment", help="The new assignment's name.")
@click.option("--from", "source", metavar="ASSIGNMENT",
              help="Copy grading.yml settings (timeouts, limits, GPU policy, late policy, "
                   "visibility) from this assignment.")
@click.option("--title", help="The assignment's title (default: from NAME).")
@project_options
def new(positional: str | None, assignment: str | None, source: str | None,
        title: str | None, project: Project) -> None:
    """Write a complete minimal assignment NAME (solution, one question, probes, public and
    hidden tests) and add it to grading.yml; see docs/AUTHORING.md."""
    from autograder.release.scaffold import ScaffoldError, new_assignment

    if positional and assignment and positional != assignment:
        raise click.UsageError(f"two names for the new assignment: {positional!r} and "
                               f"-a {assignment!r}")
    name = _assignment(assignment, positional)

    try:
        written = new_assignment(name, project, source, title)
    except ScaffoldError as exc:
        click.echo(f"error: {inert(str(exc))}", err=True)
        sys.exit(2)
    for path in written:
        click.echo(f"wrote {path.relative_to(project.root)}")
    click.echo(f"next: autograder validate {name} && autograder release {name}")

if __name__ == "__main__":
    main()
