"""The `autograder` command: a thin face over the Python API of the same shape."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .inert import inert
from .paths import GRADING_CONFIG


@click.group()
@click.version_option(package_name="autograder")
def main() -> None:
    """Sandboxed autograder for the PyTorch multi-GPU unit."""


@main.command()
@click.argument("submission", type=click.Path(exists=True, path_type=Path))
@click.option("--assignment", "-a", required=True, help="Assignment name, e.g. dp_basics.")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for results.json and the reports.")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--require-gpu", is_flag=True,
              help="Fail (exit 2) unless torch sees a CUDA device, instead of applying gpu_policy.")
def grade(submission: Path, assignment: str, out: Path, config_path: Path,
          require_gpu: bool) -> None:
    """Grade one SUBMISSION (a folder or a .zip) into OUT: results.json, report.json/.md/.html."""
    from .coding import GradingError
    from .config import ConfigError
    from .grade import grade as grade_submission

    if require_gpu:
        count, problem = _cuda_device_count()
        if not count:
            click.echo("error: --require-gpu: torch sees no CUDA device "
                       f"({problem or 'torch.cuda.device_count() == 0'}); grade on a GPU machine, "
                       "or leave out --require-gpu to apply grading.yml's gpu_policy", err=True)
            sys.exit(2)
    try:
        report = grade_submission(submission, assignment, out, config_path)
    except (ConfigError, GradingError) as exc:
        click.echo(f"error: {inert(str(exc))}", err=True)
        sys.exit(2)
    from .report import points

    if report.graded_file:
        click.echo(f"graded file: {inert(report.graded_file['file'])} "
                   f"({inert(report.graded_file['why'])})")
    for part in report.parts:
        click.echo(f"{part.name:<16} {points(part.score):>7} / {points(part.max_score)}")
    click.echo(f"{'total':<16} {points(report.score):>7} / {points(report.max_score)}")
    for warning in report.warnings:  # inert already; again, as this is a terminal
        click.echo(f"note: {inert(warning)}")
    click.echo(f"isolation: {report.environment.get('isolation', 'unknown')}; "
               + "; ".join(report.environment.get("protections", [])))
    click.echo(f"reports: {out / 'report.html'} (and report.md, report.json, results.json)")


@main.command()
@click.argument("assignment")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate(assignment: str, config_path: Path) -> None:
    """Check ASSIGNMENT's sources: config, question bank, hidden tests' names and points."""
    import tempfile

    from .assignment import load_assignment
    from .coding import GradingError, collect_hidden_tests
    from .config import ConfigError
    from .questions import QuestionBankError

    try:
        spec = load_assignment(assignment, config_path)
        with tempfile.TemporaryDirectory() as workdir:
            tests = collect_hidden_tests(spec, Path(workdir))
    except (ConfigError, GradingError, QuestionBankError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"{assignment}: {len(spec.bank.questions)} questions, "
               f"{spec.bank.total_points:g} points")
    for function, points in spec.config.functions.items():
        mine = [t for t in tests if t["function"] == function]
        gpu = sum(1 for t in mine if t["gpu"])
        click.echo(f"  {function:<28} {points:>4g} points  {len(mine):>3} tests"
                   + (f" ({gpu} need a GPU)" if gpu else ""))
    click.echo(f"{len(tests)} hidden tests, {sum(t['points'] for t in tests):g} points: OK")


@main.command("config-docs")
@click.option("--check", is_flag=True, help="Fail if docs/grading.md is out of date.")
def config_docs(check: bool) -> None:
    """Write docs/grading.md from schemas/grading.schema.json."""
    from .configdocs import DOCS, render

    text = render()
    if check:
        if not DOCS.exists() or DOCS.read_text() != text:
            click.echo("docs/grading.md is out of date: run `autograder config-docs`", err=True)
            sys.exit(1)
        return
    DOCS.write_text(text)
    click.echo(f"wrote {DOCS}")


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


@main.command()
@click.argument("assignments", nargs=-1)
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
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
def release(assignments: tuple[str, ...], check: bool, skip_self_check: bool, notebook: str,
            out: Path | None, config_path: Path) -> None:
    """Generate student_templates/ASSIGNMENT/ and dist/ASSIGNMENT-student.zip (default: all)."""
    from .config import ConfigError
    from .questions import QuestionBankError
    from .release import Project, ReleaseError, check_templates
    from .release import release as release_assignment

    project = Project(config_path)
    if out is not None and notebook != "otter":
        raise click.UsageError("--out is the otter master's folder: use it with --notebook otter")
    otter_root = (out or project.dist_dir / "otter") if notebook == "otter" else None
    try:
        names = list(assignments) or project.assignment_names()
        if check:
            drift = check_templates(names, project)
            for line in drift:
                click.echo(line, err=True)
            if drift:
                command = " ".join(["autograder release", *assignments])
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
            click.echo(f"  {project.templates_dir / name}/ "
                       f"({'unchanged' if not done.changed else 'written'}); {done.zip_path}")
            if done.otter_dir is not None:
                click.echo(f"  {done.otter_dir}/: otter master notebook (holds the solution; "
                           f"next: otter assign {done.otter_dir / (name + '.ipynb')} OUTPUT)")
    except (ConfigError, QuestionBankError, ReleaseError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


@main.command("verify-key")
@click.argument("assignment")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
def verify_key(assignment: str, config_path: Path) -> None:
    """Run every snippet question on this machine and compare with the key's expectations."""
    from .assignment import load_assignment
    from .config import ConfigError
    from .questions import QuestionBankError
    from .release import verify_key as verify

    try:
        checks = verify(load_assignment(assignment, config_path).bank)
    except (ConfigError, QuestionBankError, RuntimeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for c in checks:
        verdict = "OK" if not c.problems else "MISMATCH " + "; ".join(
            p.removeprefix(f"{c.question} ({c.environment}): ") for p in c.problems)
        click.echo(f"{c.question:<32} {c.environment:<10} {verdict}")
    bad = sum(1 for c in checks if c.problems)
    click.echo(f"{len(checks)} snippet questions, {bad} mismatch(es)")
    sys.exit(1 if bad else 0)


@main.command()
@click.argument("folder", default=".", type=click.Path(exists=True, file_okay=False,
                                                      path_type=Path))
@click.option("--module", help="The module to check (default: found from grading.yml).")
@click.option("--no-tests", is_flag=True, help="Check the files only; do not run the tests.")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(dir_okay=False, path_type=Path))
def check(folder: Path, module: str | None, no_tests: bool, config_path: Path) -> None:
    """Check a student's FOLDER as check.py does: answers' form (no key), public tests."""
    from .release import Project, check_student_folder

    sys.exit(check_student_folder(folder, module, Project(config_path), not no_tests))


@main.command()
@click.argument("assignment")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the zip (default: dist/ASSIGNMENT-gradescope.zip).")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
def gradescope(assignment: str, out: Path | None, config_path: Path) -> None:
    """Build the Gradescope autograder zip of ASSIGNMENT (setup.sh, run_autograder, sources)."""
    from .config import ConfigError
    from .gradescope import build_bundle
    from .questions import QuestionBankError
    from .release import ReleaseError

    try:
        path = build_bundle(assignment, config_path, out)
    except (ConfigError, QuestionBankError, ReleaseError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"wrote {path}: upload it as the assignment's autograder (Configure Autograder -> "
               "Zip file upload), base image Ubuntu 22.04")


@main.command()
@click.argument("submissions", type=click.Path(exists=True, path_type=Path))
@click.option("--assignment", "-a", required=True, help="Assignment name, e.g. dp_basics.")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for gradebook.sqlite, grades.csv, index.html and reports/<sid>/.")
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(min=1),
              help="Submissions graded at once (each uses about one core).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="Warm workers on this machine, or a Ray cluster.")
@click.option("--address", help="Ray cluster address (default: start a local Ray instance).")
@click.option("--force", is_flag=True, help="Regrade every submission, changed or not.")
@click.option("--only", multiple=True, metavar="SID",
              help="Regrade only this student (sid or submission key); repeatable.")
@click.option("--detail", is_flag=True, help="grades.csv: also a column per hidden test.")
@click.option("--config", "config_path", default=GRADING_CONFIG, show_default=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
def batch(submissions: Path, assignment: str, out: Path, jobs: int, backend: str,
          address: str | None, force: bool, only: tuple[str, ...], detail: bool,
          config_path: Path) -> None:
    """Grade a class: SUBMISSIONS is a Gradescope export (zip or folder) or a folder of
    per-student folders. Re-runs skip unchanged submissions; Ctrl-C stops, a re-run resumes."""
    from .batch import BatchError
    from .batch import batch as run_batch
    from .config import ConfigError
    from .gradebook import GradebookError
    from .roster import RosterError

    try:
        summary = run_batch(submissions, assignment, out, jobs=jobs, backend=backend,
                            address=address, force=force, only=list(only),
                            config_path=config_path, detail=detail)
    except KeyboardInterrupt:
        click.echo("stopped: every finished submission is in the gradebook; run the same "
                   "command again to grade the rest", err=True)
        sys.exit(130)
    except (BatchError, ConfigError, GradebookError, RosterError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for warning in summary.warnings:  # roster notes name the export's folders
        click.echo(f"note: {inert(warning)}")
    click.echo(summary.line())
    if not summary.nothing_to_grade:
        click.echo(f"class overview: {out / 'index.html'}; grades: {out / 'grades.csv'}")
    if summary.failed:
        sys.exit(1)


@main.command()
@click.argument("who", metavar="SID")
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder a batch wrote (its gradebook.sqlite).")
@click.option("--since-run", type=click.IntRange(min=1), metavar="N",
              help="Only runs from run N on (ids as shown).")
def history(who: str, out: Path, since_run: int | None) -> None:
    """A student's grading runs (SID, or a submission key) and what changed between them:
    score, status and the tests whose outcome changed."""
    from .batch import BatchError
    from .batch import history as read_history
    from .gradebook import GradebookError

    try:
        found = read_history(out, who, since_run)
    except (BatchError, GradebookError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
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


if __name__ == "__main__":
    main()
