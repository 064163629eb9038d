"""The `autograder` command: a thin face over the Python API of the same shape."""

from __future__ import annotations

import sys
from pathlib import Path

import click

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
def grade(submission: Path, assignment: str, out: Path, config_path: Path) -> None:
    """Grade one SUBMISSION (a folder or a .zip) into OUT: results.json, report.json/.md/.html."""
    from .coding import GradingError
    from .config import ConfigError
    from .grade import grade as grade_submission

    try:
        report = grade_submission(submission, assignment, out, config_path)
    except (ConfigError, GradingError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for part in report.parts:
        click.echo(f"{part.name:<16} {part.score:>7g} / {part.max_score:g}")
    click.echo(f"{'total':<16} {report.score:>7g} / {report.max_score:g}")
    for warning in report.warnings:
        click.echo(f"note: {warning}")
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


if __name__ == "__main__":
    main()
