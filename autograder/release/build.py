"""Instructor release: the student template, the student zip, and a self-check before either.

`student_templates/<name>/` is generated from the assignment's sources (the solution with its
markers, the question bank, the public tests, grading.yml) and committed, so students and
reviewers see exactly what is handed out; `release --check` says whether it is still what the
sources give. The self-check grades the reference and the template with the real engine before
anything is written, so a broken key or a hidden test that passes on a stub never ships.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import textwrap
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from autograder.grading.results import Report
from autograder.inputs.notebook import template_notebook
from autograder.project import budgets
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.config import load_config
from autograder.project.markers import reference, strip_solutions
from autograder.project.paths import PACKAGE_ROOT as ENGINE_ROOT
from autograder.project.paths import Project
from autograder.project.question_bank import QuestionBank, render_answers_schema
from autograder.release.otter import OtterError, otter_files
from autograder.student_files import check as student_check
from autograder.student_files.otter_checks import PUBLIC_TESTS

Log = Callable[[str], None]

# Lower bounds as in pyproject.toml (a test keeps them in step); torch is pinned by the Makefile.
STUDENT_REQUIREMENTS = ("numpy>=1.24", "pytest>=8", "pyyaml>=6", "jsonschema>=4.18")
MIN_PYTHON = "3.10"
# Left alone in a template folder: what running the checks there leaves behind.
IGNORED_NAMES = {"__pycache__", ".pytest_cache", ".venv"}
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed, so the same sources give the same zip


class ReleaseError(Exception):
    """The release cannot go ahead; `problems` says why, each one on its own."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems = problems or []
        super().__init__("\n  - ".join([message, *self.problems]))


def assignment_names(project: Project) -> list[str]:
    """The assignments of the project's grading.yml, in its order."""
    return list(load_config(project))


def torch_requirement(project: Project) -> str:
    """The torch pin of the Makefile (`TORCH ?= torch==X`): one version everywhere."""
    for folder in (project.root, ENGINE_ROOT):
        makefile = folder / "Makefile"
        if makefile.is_file():
            found = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile.read_text(), re.MULTILINE)
            if found:
                return found.group(1)
    raise ReleaseError(f"no `TORCH ?= torch==...` line in a Makefile at {project.root} or "
                       f"{ENGINE_ROOT}: the torch pin must come from one place")


# ----------------------------------------------------------------------------- generation


def key_answers(bank: QuestionBank) -> dict[str, str | list[str]]:
    """The full key as an answers file would hold it (trusted use only: self-check, tests)."""
    return {q.id: (list(q.answer) if q.multiple else q.answer[0]) for q in bank.questions}


def _comment(text: str, first: str = "", rest: str = "") -> list[str]:
    """`text` as wrapped YAML comment lines; `first` and `rest` prefix its first and other lines."""
    lines = []
    for line in text.strip().splitlines():
        if not line.strip():
            lines.append("#")
            continue
        lines += textwrap.wrap(line, 96, initial_indent=f"# {first}", subsequent_indent=f"# {rest}",
                               break_on_hyphens=False)
        first = rest
    return lines


def answers_template(assignment: Assignment) -> str:
    """answers.yml for students: every question as comments above its id, answered `null`."""
    bank = assignment.bank
    title = f"\"{assignment.config.title}\" ({assignment.name})"
    out = _comment(f"Multiple-choice answers for {title}: "
                   f"{_count(len(bank.questions), 'question')}, "
                   f"{_count(bank.total_points, 'point')}.")
    out += [
        "#",
        "# Replace the `null` after each question id with your answer:",
        "#   - one letter, for a question with one answer:          question_id: B",
        "#   - a list of letters, for \"select all that apply\":      question_id: [A, C]",
        *_comment("Letters are case-insensitive. A question left at null is unanswered and scores "
                  "0, as a wrong answer does: there is no penalty for guessing. Keep every "
                  "question id exactly once, as it is. Check this file (and your code) with "
                  "`python check.py` before you submit."),
    ]
    for q in bank.questions:
        kind = "select all that apply: a list of letters" if q.multiple else "one letter"
        points = f"{q.points:g} point{'' if q.points == 1 else 's'}"
        out += ["", "", f"# {q.title} ({points}; {kind})", "#", *_comment(q.stem)]
        if q.code:
            out += ["#", *[f"#     {line}".rstrip() for line in q.code.rstrip().splitlines()]]
        out.append("#")
        for letter, text in q.options.items():
            out += _comment(text, f"  {letter}: ", "     ")
        out.append(f"{q.id}: null")
    return "\n".join(out) + "\n"


_JINJA = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                            undefined=jinja2.StrictUndefined)
_JINJA.filters["g"] = lambda x: f"{x:g}"
_JINJA.filters["points"] = lambda x: _count(x, "point")
# Markdown tables need one line per row; prose is wrapped as in any README.
_README = _JINJA.from_string("""\
# {{ c.title }} ({{ name }})
{% if c.due %}

Due {{ c.due }}.
{% endif %}

## What is here

| file | what |
|---|---|
| `{{ module }}.py` | the functions to implement: replace each `raise NotImplementedError(...)` \
with your code; the docstrings are the specification the grader checks |
| `{{ module }}.ipynb` | the same, as a Jupyter notebook, if you prefer one: one cell per function |
| `answers.yml` | {{ questions }}: replace each `null` with your answer |
{% if public_tests %}
| `tests/` | the public tests: a sample of what the grader checks |
{% endif %}
| `check.py` | checks your answers file{% if public_tests %} and runs the public tests{% endif %} |
| `answers.schema.json` | what a well-formed answers file is (read by `check.py`) |
| `requirements.txt` | what `check.py` and the tests need |

## Set up (Python {{ min_python }} or later)

```sh
python3 -m venv .venv
source .venv/bin/activate          # Windows: .venv\\Scripts\\activate
python -m pip install -r requirements.txt
```

`requirements.txt` pins `{{ torch }}`, the version the grader runs. Without an NVIDIA GPU the
CPU build is a much smaller download; install it first:

```sh
python -m pip install {{ torch }} --index-url https://download.pytorch.org/whl/cpu
```

## What to do

1. Implement every function in `{{ module }}.py` ({{ c.coding.points | points }}). Keep the
   names and signatures; helper functions of your own are fine.

   | function | points |
   |---|---|
{% for function, points in c.functions.items() %}
   | `{{ function }}` | {{ points | g }} |
{% endfor %}

2. Answer the questions in `answers.yml` ({{ c.multiple_choice.points | points }}). Each
   question is written out above its id: replace `null` with one letter (`question_id: B`), or
   with a list of letters for "select all that apply" (`question_id: [A, C]`).
{% if mc_visibility == "after_due_date" %}
   Which answers are right is shown after the due date; an answer left out or malformed is
   reported at once, so you can fix it in time. Your total is shown at once.
{% endif %}

## Check your work

```sh
python check.py
```

It checks that `{{ module }}.py` (or your notebook, see below) compiles and that every answer
in `answers.yml` is well formed:
one letter where one is expected, letters among the options, no unknown or repeated question ids.
It does not know the key, so a well-formed answer is not necessarily right.
{% if public_tests %}
Then it runs the public tests and sums them up ("not implemented yet: ...", or what failed).
{% endif %}
It exits with status 0 when all is in order, 1 otherwise.
{% if public_tests %}

The public tests also run with plain pytest: `python -m pytest tests`.
{% endif %}

## Submit

Upload two files, with these names: `{{ module }}.py` and `answers.yml` (a zip of the two is
fine too). The other files here are not graded.

If you worked in the notebook, upload `{{ module }}.ipynb` (with `answers.yml`): the grader
takes the code of its function cells and of its locked cells (the imports), in notebook order,
and nothing else: write all your code, helpers and extra imports included, in the function
cells. Cells you add are left out, and IPython magics (`%...`, `!...`) are commented out.
`python check.py` converts the notebook exactly as the grader does, names any cell and definition
left out, and runs the public tests on it. The grader grades the notebook when `{{ module }}.py`
is missing or still the template's stub; when both hold code, it grades `{{ module }}.py`. The
report (and `check.py`) says which file was graded.

## How it is graded

- Multiple choice, {{ c.multiple_choice.points | points }}: each question scores its points when
  your answer is right{% if questions_multiple %} (for "select all that apply": exactly the right
  set){% endif %}, 0 otherwise.
- Coding, {{ c.coding.points | points }}: hidden tests{{ more_than_public }} check
  every rule in the docstrings. Your code runs in a sandbox without network access, with time and
  memory limits; a crash or an endless loop fails only the tests concerned.
{% if not gpu_tests %}
{% elif gpu_policy == "reweight" %}
- Tests that need a GPU count only where the grader has one; on a grader without a GPU they are
  left out and the other coding tests are scaled so the part keeps its {{ c.coding.points | g }}
  point{{ '' if c.coding.points == 1 else 's' }}. Your report says which applied.
{% else %}
- Tests that need a GPU score 0 until your work is regraded on a GPU machine; your report says
  which are pending.
{% endif %}
- Your report lists every failed test with a message saying what was expected.
""")


def _count(n: float, word: str) -> str:
    """`1 point`, `2.5 points`, `1 question`: the number and the word, singular only for 1."""
    return f"{n:g} {word}{'' if n == 1 else 's'}"


def _test_counts(folder: Path) -> tuple[int, int]:
    """(tests, tests marked gpu) in a test folder, read as text: no collection, no imports."""
    tests = gpu = 0
    for path in sorted(folder.rglob("test_*.py")) if folder.is_dir() else []:
        text = path.read_text(encoding="utf-8")
        tests += len(re.findall(r"^\s*def test_\w+\(", text, flags=re.MULTILINE))
        gpu += len(re.findall(r"^\s*@pytest\.mark\.gpu\b", text, flags=re.MULTILINE))
    return tests, gpu


def student_readme(assignment: Assignment, torch: str, public_tests: bool) -> str:
    c = assignment.config
    hidden, gpu = _test_counts(assignment.hidden_tests)
    public, _ = _test_counts(assignment.public_tests)
    return _README.render(
        gpu_tests=gpu > 0,
        more_than_public=(", many more than the public ones,"
                          if hidden >= 2 * max(public, 1) else ""),
        c=c, name=assignment.name, module=c.module,
        questions=_count(len(assignment.bank.questions), "multiple-choice question"),
        questions_multiple=any(q.multiple for q in assignment.bank.questions),
        public_tests=public_tests, torch=torch, min_python=MIN_PYTHON,
        gpu_policy=c.gpu_policy, mc_visibility=c.multiple_choice.visibility)


def student_requirements(torch: str) -> str:
    lines = ["# What check.py and the public tests need: python -m pip install -r requirements.txt",
             "# torch is the grader's version; see README.md for the smaller CPU-only build.",
             torch, *STUDENT_REQUIREMENTS]
    return "\n".join(lines) + "\n"


def check_script(module: str, functions: list[str] | None = None) -> str:
    """check.py: autograder/student_files/check.py itself (the grader's own notebook conversion and
    choice of file included), told which module and functions it checks."""
    text = Path(student_check.__file__).read_text(encoding="utf-8")
    for name, value in (("MODULE", module), ("FUNCTIONS", tuple(functions or ()) or None)):
        text, count = re.subn(rf"^{name} = None(?=\s)", f"{name} = {value!r}", text,
                              flags=re.MULTILINE)
        if count != 1:
            raise ReleaseError(f"autograder/student_files/check.py has no `{name} = None` "
                               "line to set")
    return text


# The notebook's instructions cell: the module's docstring, less what only fits the module
# (running pytest on it), plus how the notebook is graded and checked.
_NOTEBOOK_HOWTO = """\
How this notebook is graded: the grader takes the code of the function cells (one per function,
below) and of the locked cells (the imports), in notebook order, as `{module}.py`, and nothing
else. Cells you add are left out: write helper functions and extra imports inside a function
cell, e.g. the cell of the function that uses them. IPython magics (`%...`, `!...`) are
commented out.

Check your work with `python check.py` in the folder that holds this notebook: it converts the
notebook exactly as the grader does, names any cell and definition left out, and runs the public
tests on the result. (Running `pytest` directly tests `{module}.py`, not this notebook.)

Submit `{module}.ipynb` and `answers.yml`. If you also upload `{module}.py`, leave it as the
template gave it: when both hold code, the grader grades `{module}.py` and ignores the notebook."""


def notebook_instructions(docstring: str, module: str) -> str:
    """The instructions cell of the notebook: the docstring without its paragraphs about
    pytest (they are about the .py file), then how the notebook is graded and checked."""
    kept = [p for p in docstring.strip().split("\n\n") if not re.search(r"\bpytest\b", p)]
    return "\n\n".join([*kept, _NOTEBOOK_HOWTO.format(module=module)])


def student_files(assignment: Assignment, torch: str) -> dict[str, bytes]:
    """Every file of the student template, by path relative to it, generated from the sources."""
    module = assignment.config.module
    if not assignment.solution.is_file():
        raise ReleaseError(f"{assignment.name}: no reference solution at {assignment.solution}")
    stubs = strip_solutions(assignment.solution.read_text(encoding="utf-8"))
    text = {
        f"{module}.py": stubs,
        # The same stubs, as nbgrader cells, with instructions for the notebook.
        f"{module}.ipynb": template_notebook(stubs, lambda doc: notebook_instructions(doc,
                                                                                    module)),
        "answers.yml": answers_template(assignment),
        "answers.schema.json": render_answers_schema(assignment.bank),
        "check.py": check_script(module, list(assignment.config.functions)),
        "requirements.txt": student_requirements(torch),
    }
    files = {name: content.encode() for name, content in text.items()}
    public = assignment.public_tests
    if public.is_dir():
        for path in sorted(public.rglob("*")):
            if path.is_file() and not IGNORED_NAMES & set(path.relative_to(public).parts) \
                    and path.suffix != ".pyc":
                files[f"tests/{path.relative_to(public).as_posix()}"] = path.read_bytes()
    has_tests = any(name.startswith("tests/test_") for name in files)
    files["README.md"] = student_readme(assignment, torch, has_tests).encode()
    return dict(sorted(files.items()))


def _on_disk(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and not IGNORED_NAMES & set(p.relative_to(folder).parts)
            and p.suffix != ".pyc"}


def template_drift(files: dict[str, bytes], folder: Path) -> list[str]:
    """How `folder` differs from the generated `files`: one line per file; empty if identical."""
    drift = []
    for name in sorted(files.keys() | _on_disk(folder)):
        path = folder / name
        if name not in files:
            drift.append(f"{name}: not generated from the sources (stale; release removes it)")
        elif not path.is_file():
            drift.append(f"{name}: missing")
        elif path.read_bytes() != files[name]:
            drift.append(f"{name}: differs from what the sources give")
    return drift


def write_template(files: dict[str, bytes], folder: Path) -> None:
    for stale in _on_disk(folder) - files.keys():
        (folder / stale).unlink()
    for name, content in files.items():
        path = folder / name
        if not path.is_file() or path.read_bytes() != content:  # unchanged files keep their mtime
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    for directory in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()


def write_zip(files: dict[str, bytes], prefix: str, path: Path) -> None:
    """A reproducible zip: sorted entries, fixed dates and modes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files.items()):
            info = zipfile.ZipInfo(f"{prefix}{name}", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            executable = content.startswith(b"#!")
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            archive.writestr(info, content)
    path.write_bytes(buffer.getvalue())


# ----------------------------------------------------------------------------- checks


@dataclass
class KeyCheck:
    question: str
    environment: str
    problems: list[str]


def verify_key(bank: QuestionBank, workers: int = 2) -> list[KeyCheck]:
    """Run every snippet question here and compare with the bank's expectation for this machine."""
    from autograder.questions.snippets import check_snippet, current_environment

    questions = [q for q in bank.questions if q.snippet is not None]
    if not questions:
        return []
    env = current_environment()
    with ThreadPoolExecutor(workers) as pool:  # each snippet is a process importing torch
        problems = list(pool.map(lambda q: check_snippet(q, env, timeout=120), questions))
    return [KeyCheck(q.id, env, p) for q, p in zip(questions, problems, strict=True)]


@dataclass
class SelfCheck:
    """What the self-check found, stage by stage; `problems` empty when the release may go."""

    passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    timings: budgets.Timings | None = None  # the reference's time per hidden test


def _failed_tests(report: Report) -> list[str]:
    return [f"{t.name}: {t.message.splitlines()[0] if t.message else t.status}"
            for t in report.tests if t.status == "failed"]


def _grade_reference(assignment: Assignment, work: Path,
                     timings: list[budgets.Timings] | None = None) -> list[str]:
    """Problems of the reference's grading; its time per hidden test appended to `timings`."""
    from autograder.grading.grade import grade_measured

    folder = work / "reference"
    folder.mkdir()
    source = assignment.solution.read_text(encoding="utf-8")
    (folder / f"{assignment.config.module}.py").write_text(reference(source), encoding="utf-8")
    (folder / "answers.yml").write_text(yaml.safe_dump(key_answers(assignment.bank),
                                                       sort_keys=False), encoding="utf-8")
    report, suite = grade_measured(folder, assignment, work / "reference-out")
    if timings is not None:
        calibration = suite.calibration or budgets.calibration_seconds()
        timings.append(budgets.Timings(
            budgets.fingerprint(assignment.root, assignment.config.module), calibration,
            dict(suite.durations)))
    failed = _failed_tests(report)
    pending = any(t.status == "pending" for t in report.tests)
    if failed or (not pending and abs(report.score - report.max_score) > 1e-6):
        return [f"the reference solution with the full key scores {report.score:g} / "
                f"{report.max_score:g}, not full marks; failing:"
                + "".join(f"\n      {line}" for line in failed[:15])]
    return []


def _grade_template(assignment: Assignment, files: dict[str, bytes], work: Path) -> list[str]:
    from autograder.grading.grade import grade_loaded

    folder = work / "template"
    folder.mkdir()
    module = f"{assignment.config.module}.py"
    for name in (module, "answers.yml"):
        (folder / name).write_bytes(files[name])
    report = grade_loaded(folder, assignment, work / "template-out")
    problems = []
    for part in report.parts:
        if part.score > 1e-9:
            passing = [t.name for t in report.tests if t.part == part.name and t.score > 0]
            problems.append(f"the student template scores {part.score:g} {part.name} points, "
                            f"not 0; these pass on the stubs: {', '.join(passing[:10])}")
    return problems


def _public_tests_pass(assignment: Assignment, files: dict[str, bytes], work: Path) -> list[str]:
    if not any(name.startswith("tests/test_") for name in files):
        return []
    folder = work / "public"
    for name, content in files.items():
        if name.startswith("tests/"):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content)
    module = assignment.config.module
    (folder / f"{module}.py").write_text(reference(assignment.solution.read_text()))
    section = student_check.run_public_tests(folder, folder / "tests", module)
    return [f"the public tests fail on the reference solution: {p}" for p in section.problems]


def _answer_files_check(files: dict[str, bytes], bank: QuestionBank, work: Path) -> list[str]:
    """The shipped schema accepts the key, and the blank answers.yml parses with no answers."""
    problems = []
    schema = work / "answers.schema.json"
    schema.write_bytes(files["answers.schema.json"])
    for label, content in (("the generated answers.yml", files["answers.yml"]),
                           ("the full key", yaml.safe_dump(key_answers(bank)).encode())):
        folder = work / label.replace(" ", "_")
        folder.mkdir()
        (folder / "answers.yml").write_bytes(content)
        section = student_check.check_answers(folder, schema)
        problems += [f"check.py rejects {label}: {p}" for p in section.problems]
    return problems


def self_check(assignment: Assignment, files: dict[str, bytes], log: Log = print) -> SelfCheck:
    """Stricter than a release tool that only runs the tests on the solution: docs/releasing.md."""
    from autograder.grading.supervisor import GradingError, collect_hidden_tests

    result = SelfCheck()
    with tempfile.TemporaryDirectory(prefix="release-check-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        try:  # the points of the hidden tests add up to grading.yml's (the bank's: on loading)
            tests = collect_hidden_tests(assignment, work)
        except GradingError as exc:
            result.problems.append(str(exc))
            return result
        result.passed.append(f"points: {_count(len(assignment.bank.questions), 'question')}, "
                             f"{_count(len(tests), 'hidden test')} add up to grading.yml's")
        result.problems += _answer_files_check(files, assignment.bank, work)
        log("  self-check: snippets, public tests, grading the reference and the template...")
        recorded: list[budgets.Timings] = []
        with ThreadPoolExecutor(3) as pool:
            jobs = {
                "key snippets": pool.submit(lambda: [
                    f"snippet of {k.question} ({k.environment}): {p}"
                    for k in verify_key(assignment.bank) for p in k.problems]),
                "public tests pass on the reference": pool.submit(
                    _public_tests_pass, assignment, files, work),
                "reference with the full key scores 100%": pool.submit(
                    _grade_reference, assignment, work, recorded),
                "template scores 0": pool.submit(_grade_template, assignment, files, work),
            }
            for label, job in jobs.items():
                try:
                    problems = job.result()
                except Exception as exc:  # a crash of the engine is a failed check, not a release
                    problems = [f"{label}: {type(exc).__name__}: {exc}"]
                if problems:
                    result.problems += problems
                else:
                    result.passed.append(label)
        log(f"  self-check: done in {time.monotonic() - started:.0f} s")
        result.timings = recorded[0] if recorded else None
    return result


# ----------------------------------------------------------------------------- release


@dataclass
class Released:
    name: str
    changed: list[str]  # template files that differed before this release
    zip_path: Path
    otter_dir: Path | None = None  # the otter master folder, when one was asked for


def write_otter_folder(files: dict[str, bytes], folder: Path) -> None:
    """Write the otter master folder. Only its public_tests/ is wholly generated (stale tests
    go); anything else there, such as an `otter assign` output, is left alone."""
    public = f"{PUBLIC_TESTS}/"
    write_template({k.removeprefix(public): v for k, v in files.items() if k.startswith(public)},
                   folder / public)
    for name, content in files.items():
        path = folder / name
        if not name.startswith(public) and (not path.is_file() or path.read_bytes() != content):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def release(name: str, project: Project, run_self_check: bool = True,
            log: Log = print, otter_dir: Path | None = None) -> Released:
    """Self-check, then write student_templates/<name>/ and dist/<name>-student.zip; with
    `otter_dir`, the otter master folder there too (instructors only: it holds the solution)."""
    assignment = load_assignment(name, project)
    files = student_files(assignment, torch_requirement(project))
    otter = None
    if otter_dir is not None:  # generated before the slow self-check, so it fails first
        try:
            otter = otter_files(assignment, files)
        except OtterError as exc:
            raise ReleaseError(f"{name}: no otter notebook", [str(exc)]) from None
    if run_self_check:
        checked = self_check(assignment, files, log)
        for line in checked.passed:
            log(f"  ok: {line}")
        if checked.problems:
            raise ReleaseError(f"{name}: self-check failed, nothing written", checked.problems)
        if checked.timings is not None:  # each hidden test's budget is calibrated from these
            write_timings(assignment, checked.timings)
            log(f"  recorded the reference's time of "
                f"{_count(len(checked.timings.tests), 'hidden test')} "
                f"in {assignment.root.name}/{budgets.TIMINGS_NAME}")
    folder = project.templates / name
    drift = template_drift(files, folder)
    write_template(files, folder)
    zip_path = project.dist / f"{name}-student.zip"
    write_zip(files, f"{name}/", zip_path)
    if otter is not None and otter_dir is not None:
        write_otter_folder(otter, otter_dir)
    return Released(name, drift, zip_path, otter_dir)


def write_timings(assignment: Assignment, timings: budgets.Timings) -> Path:
    path = assignment.root / budgets.TIMINGS_NAME
    path.write_text(timings.to_json())
    return path


def check_templates(names: list[str], project: Project) -> list[str]:
    """Files of the committed templates that differ from what the sources give (no writing),
    and recorded reference timings that no longer match the hidden tests."""
    drift = []
    for name in names:
        assignment = load_assignment(name, project)
        # Without timings.json every test has the flat budget; with one, it must be current.
        why = budgets.stale(assignment.root, assignment.config.module)
        if why is not None and budgets.load(assignment.root) is not None:
            drift.append(f"assignments/{name}/{why}")
        files = student_files(assignment, torch_requirement(project))
        folder = project.templates / name
        drift += [f"{folder.relative_to(project.root)}/{line}"
                  for line in template_drift(files, folder)]
    return drift


def check_student_folder(folder: Path, module: str | None, project: Project,
                         run_tests: bool = True, assignment: str | None = None) -> int:
    """`autograder check`: check.py's checks, with the assignment's schema and public tests
    filled in from the sources when the folder lacks them (say, a bare submission). With
    `assignment`, that assignment's module (an unknown name is its ConfigError)."""
    argv = [str(folder)] + (["--no-tests"] if not run_tests else [])
    assignments = {}
    if assignment is not None:
        module = module or load_assignment(assignment, project).config.module
    try:
        assignments = {c.module: n for n, c in load_config(project).items()}
    except Exception:  # no usable course config at hand: check.py's own defaults apply
        pass
    module = module or next((m for m in assignments for suffix in (".py", ".ipynb")
                             if student_check.find_file(folder, f"{m}{suffix}")[0]), None) \
        or student_check.guess_module(folder)
    if module:
        argv += ["--module", module]
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        if module in assignments:
            assignment = load_assignment(assignments[module], project)
            argv += ["--functions", ",".join(assignment.config.functions)]
            if not (folder / student_check.SCHEMA_NAME).is_file():
                schema = Path(tmp) / student_check.SCHEMA_NAME
                schema.write_text(render_answers_schema(assignment.bank))
                argv += ["--schema", str(schema)]
            if not (folder / "tests").is_dir():
                argv += ["--tests", str(assignment.public_tests)]
        return student_check.main(argv, prog="autograder check")


def copy_tree(source: Path, target: Path) -> None:
    """Copy a folder without caches (bundles and temporary course copies)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*IGNORED_NAMES, "*.pyc"),
                    dirs_exist_ok=True)
