"""`autograder validate`: every problem of an assignment's sources at once, by file.

Above the grading layer because it collects the hidden tests with a real runner.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from autograder.project.assignment import Assignment
from autograder.project.config import ConfigError, assignment_config
from autograder.project.paths import Project
from autograder.project.question_bank import (
    QuestionBankError,
    QuestionBankWarning,
    leaks,
    load_bank,
    question_texts,
    torch_names,
)


def check_assignment(name: str, project: Project,
                     workdir: Path | None = None) -> dict[str, list[str]]:
    """Every problem of an assignment of `project` at once, by file (empty when all is well).

    Unlike `load_assignment`, which stops at the first broken file, this goes on: the
    configuration, the question bank, the points between them, probes and the hidden tests
    (collected by a real runner when the configuration can be read), so one run of
    `autograder validate` lists what today would take several rounds to find.
    """
    import tempfile

    from autograder.grading.supervisor import GradingError, collect_hidden_tests

    problems: dict[str, list[str]] = {}

    def add(label: str, found: list[str]) -> None:
        if found:
            problems.setdefault(label, []).extend(found)

    config = bank = None
    try:
        config = assignment_config(name, project)
    except ConfigError as exc:
        add(project.config.name, str(exc).splitlines())
    root = project.assignments / name
    if not root.is_dir():
        add(f"assignments/{name}", [f"the assignment folder {root} does not exist"])
        return problems
    try:
        bank = load_bank(root / "questions.yml", project.schemas)
        bank_points: float | None = bank.total_points
    except QuestionBankError as exc:
        add(f"assignments/{name}/questions.yml", exc.errors)
        bank_points = _raw_points(root / "questions.yml")  # the total can be checked anyway
    if config is not None and bank_points is not None and \
            abs(bank_points - config.multiple_choice.points) > 1e-9:
        add(f"assignments/{name}/questions.yml",
            [f"the questions add up to {bank_points:g} points, but grading.yml gives "
             f"multiple_choice {config.multiple_choice.points:g}"])
    for path in (root / "tests" / "hidden", root / "probes.py"):
        if not path.exists():
            add(f"assignments/{name}", [f"{path.relative_to(root)} is missing"])
    if config is None or not (root / "tests" / "hidden").is_dir():
        return problems
    spec = Assignment(name, root, config, bank, project)  # type: ignore[arg-type] - tests need no bank
    try:
        with tempfile.TemporaryDirectory(dir=workdir) as folder:
            collect_hidden_tests(spec, Path(folder))
    except GradingError as exc:
        lines = [line.strip().removeprefix("- ") for line in str(exc).splitlines()]
        add(f"assignments/{name}/tests/hidden",
            [line for line in lines if line and line != "invalid hidden tests:"])
    return problems


def _raw_points(path: Path) -> float | None:
    """The questions' points as written, from a bank that does not load (None if unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return float(sum(q["points"] for q in data["questions"]
                         if isinstance(q, dict) and type(q.get("points")) in (int, float)))
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None


def check_warnings(name: str, project: Project) -> list[str]:
    """What is legal but wrong or giving answers away, beyond `bank_warnings` (empty if none).

    - Torch names: an explanation, a key or a distractor (unless its feedback names the same
      thing) naming a `torch.x.y`, an error type, a private `_name` or a `torch/...py` source
      file that the installed torch does not have.
    - Leaks: a question's key (its whole text, a phrase of it no other option has, a run of
      numbers or a number only it holds) found in what a student reads first: the template
      module, its notebook, the student README (`student_templates/<name>/`) or a public test.
    """
    root = project.assignments / name
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", QuestionBankWarning)
            bank = load_bank(root / "questions.yml", project.schemas)
    except QuestionBankError:
        return []  # check_assignment lists those
    texts = [(q.id, where, text) for q in bank.questions for where, text in question_texts(q)]
    lookup = torch_lookup([text for _, _, text in texts])
    found = [f"{id_} {where} names {n}, which torch {lookup.version} does not have"
             for id_, where, text in texts for n in lookup.missing_in(text)]
    found += [f"leak: {line}" for q in bank.questions
              for line in leaks(q, leak_sources(name, project))]
    return found


def leak_sources(name: str, project: Project) -> dict[str, str]:
    """What a student reads before the key is out: the template module, its notebook (the
    cells' text), the student README and the public tests, those that exist."""
    import json

    base = project.root
    sources = {}
    folder = project.templates / name
    for path in (folder / f"{name}.py", folder / "README.md"):
        if path.is_file():
            sources[str(path.relative_to(base))] = path.read_text(encoding="utf-8")
    notebook = folder / f"{name}.ipynb"
    if notebook.is_file():
        try:
            cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
            text = "\n\n".join(
                "".join(c["source"]) if isinstance(c.get("source"), list) else
                str(c.get("source", "")) for c in cells if isinstance(c, dict))
        except (ValueError, AttributeError, TypeError):
            text = notebook.read_text(encoding="utf-8")  # not JSON: scan it as it is
        sources[str(notebook.relative_to(base))] = text
    public = project.assignments / name / "tests" / "public"
    for path in sorted(public.glob("*.py")) if public.is_dir() else []:
        sources[str(path.relative_to(base))] = path.read_text(encoding="utf-8")
    return sources


def missing_torch_names(text: str) -> list[str]:
    """The names of `text` (see `torch_names`) that the installed torch does not have."""
    return torch_lookup([text]).missing_in(text)


@dataclass(frozen=True)
class TorchLookup:
    """What the installed torch lacks of the names some texts mention, and its version."""

    version: str
    missing: frozenset[str]

    def missing_in(self, text: str) -> list[str]:
        """Those of `text`'s names that torch lacks: dotted names, error types, private names,
        source paths, each kind sorted."""
        names = torch_names(text)
        return [n for kind in (names.dotted, names.errors, names.private, names.paths)
                for n in sorted(kind) if n in self.missing]


def torch_lookup(texts: list[str]) -> TorchLookup:
    """Look the names of `texts` up in the installed torch, in a child process
    (autograder.runner.torch_lookup): only the runner package imports torch."""
    names = [torch_names(text) for text in texts]
    asked = {kind: sorted(set().union(*(getattr(n, kind) for n in names)))
             for kind in ("dotted", "errors", "private", "paths")}
    if not any(asked.values()):
        return TorchLookup("", frozenset())
    done = subprocess.run([sys.executable, "-I", "-m", "autograder.runner.torch_lookup"],
                          input=json.dumps(asked), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("looking torch names up failed: " + done.stderr[-2000:])
    said = json.loads(done.stdout)
    return TorchLookup(said["version"], frozenset(said["missing"]))
