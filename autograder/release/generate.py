"""Every generated file a project commits, made again from its sources: `autograder generate`.

A committed file made from other files goes stale silently when its sources change. This module
knows each kind, and `autograder generate --check` lists every stale one (exit 1):

- the student templates, `student_templates/<assignment>/`, with each assignment's answers
  schema (`answers.schema.json`, derived from its question bank), as `autograder release`
  writes them; and the reference timings (`assignments/<assignment>/timings.json`), which only
  `autograder release` can record again, since it grades the reference;
- the grading.yml reference, `docs/grading.md`, from `schemas/grading.schema.json`, when the
  project has that file (the engine's own tree does);
- the files of the project's own generators, listed under `generators` in grading.yml: scripts
  that make committed files from the project's sources (an assignment's example submissions,
  say). Each is run with the project's Python and the project's root as working folder; given
  `--check` it must write nothing, print the stale files it would write one a line, and exit 1
  when there is one, 0 when there is none; without it, it writes them.

`autograder generate` (without --check) writes them all but the timings.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import yaml

from autograder.project import budgets, config_docs
from autograder.project.assignment import load_assignment
from autograder.project.paths import Project
from autograder.project.schemas import with_defaults
from autograder.release.build import (
    student_files,
    template_drift,
    torch_requirement,
    write_template,
)


@dataclass
class Outcome:
    """What a generate run found (`stale`: with --check) or did (`written`)."""

    stale: list[str] = field(default_factory=list)  # one line per stale file, its path first
    written: list[str] = field(default_factory=list)  # files this module wrote
    said: list[str] = field(default_factory=list)  # what the generators printed, each line
    # What this command cannot make again (timings), or a generator that failed: always exit 1.
    problems: list[str] = field(default_factory=list)


def generators(project: Project) -> list[str]:
    """The project's generator scripts, grading.yml's `generators` (relative to its root)."""
    raw = yaml.safe_load(project.config.read_text()) or {}
    return list(with_defaults(raw, "grading.schema.json", project.schemas)["generators"])


def generate(project: Project, names: list[str], check: bool) -> Outcome:
    """Check (or write) every generated file: templates of `names`, docs, generators."""
    outcome = Outcome()
    _templates(project, names, check, outcome)
    _docs(project, check, outcome)
    for script in generators(project):
        _run_generator(project, script, check, outcome)
    return outcome


def _templates(project: Project, names: list[str], check: bool, outcome: Outcome) -> None:
    torch = torch_requirement(project)
    for name in names:
        assignment = load_assignment(name, project)
        # Without timings.json every test has the flat budget; with one, it must be current.
        why = budgets.stale(assignment.root, assignment.config.module)
        if why is not None and budgets.load(assignment.root) is not None:
            line = f"{assignment.root.relative_to(project.root)}/{why}"
            (outcome.stale if check else outcome.problems).append(line)
        files = student_files(assignment, torch)
        folder = project.templates / name
        where = folder.relative_to(project.root)
        drift = template_drift(files, folder)
        if check:
            outcome.stale += [f"{where}/{line}" for line in drift]
        elif drift:
            write_template(files, folder)
            outcome.written += [f"{where}/{line.split(':', 1)[0]}"
                                + (" (removed)" if "not generated" in line else "")
                                for line in drift]


def _docs(project: Project, check: bool, outcome: Outcome) -> None:
    path = project.root / config_docs.RELATIVE  # kept current where the project has one
    if not path.is_file():
        return
    text = config_docs.render(project.schemas)
    if path.read_text() == text:
        return
    where = path.relative_to(project.root)
    if check:
        outcome.stale.append(f"{where}: differs from what schemas/grading.schema.json gives")
    else:
        path.write_text(text)
        outcome.written.append(str(where))


def _run_generator(project: Project, script: str, check: bool, outcome: Outcome) -> None:
    path = project.root / script
    if not path.is_file():
        outcome.problems.append(f"{script}: no such generator (grading.yml's generators)")
        return
    proc = subprocess.run([sys.executable, str(path), *(["--check"] if check else [])],
                          cwd=project.root, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode == 0:
        outcome.said += [f"{script}: {line}" for line in lines]
    elif check and proc.returncode == 1 and lines:
        outcome.stale += lines
    else:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        outcome.problems.append(f"{script} failed (exit {proc.returncode}): {tail}")
