"""Find the expected files in a submission folder, tolerating the usual upload renames."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from autograder.project.inert import label

ANSWERS_NAMES = ("answers.yml", "answers.yaml", "answers.json")
# Browser and OS renames of a re-downloaded or copied file: "x (1).py", "x-2.py", "Copy of x.py".
_RENAMED = r"(?:copy of )?{stem}(?:[ _-]?\(\d+\)|[ _-]\d+|[ _-]copy)?"


@dataclass(frozen=True)
class GradedFile:
    """Which file was graded, when the grader had to choose (a notebook, or the module next to
    one), and why, in words for the student."""

    file: str
    why: str


@dataclass
class SubmissionFiles:
    """What was found. `module` is None when the student's code is missing or unusable."""

    root: Path
    module: Path | None
    module_problem: str | None
    answers: Path | None
    warnings: list[str] = field(default_factory=list)
    # MODULE.ipynb (or an upload rename of it), found whether or not MODULE.py is there: the
    # grader grades it when MODULE.py is missing or still the template's stub.
    notebook: Path | None = None
    notebook_warnings: list[str] = field(default_factory=list)  # its rename, if it is graded
    # Which file the grader grades and why, when it had to choose (autograder.grading.grade
    # decides, as check.py does); None when there was no choice.
    graded_file: GradedFile | None = None


def locate(submission: Path, module_name: str) -> SubmissionFiles:
    """Find MODULE.py and the answers file in `submission` (or in its single nested folder).

    Never raises: a folder that cannot be read gives a `module_problem` saying why.
    """
    try:
        return _locate(submission, module_name)
    except (OSError, ValueError) as exc:  # unreadable folder, a name the OS refuses
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        return SubmissionFiles(submission, None, f"your submission's files could not be read "
                               f"({why})", None, [])


def _locate(submission: Path, module_name: str) -> SubmissionFiles:
    if not submission.is_dir():
        return SubmissionFiles(submission, None,
                               f"the submission {label(submission.name)} is not a folder", None,
                               [])
    root, warnings = _descend(submission, module_name)
    module, module_problem = _find(root, f"{module_name}.py", (".py",), warnings)
    notebook_warnings: list[str] = []
    notebook, notebook_problem = _find(root, f"{module_name}.ipynb", (".ipynb",),
                                       notebook_warnings)
    if module is None and module_problem is None:
        module_problem = notebook_problem
    if module is None and module_problem is None and notebook is None:
        others = sorted(label(p.name) for p in root.glob("*.py"))
        shown = ", ".join(others[:10]) + (f" and {len(others) - 10} more" if others[10:] else "")
        module_problem = (f"no {module_name}.py found in your submission"
                          + (f" (found: {shown}); name your file {module_name}.py"
                             if others else ""))
    answers = None
    for name in ANSWERS_NAMES:
        answers, _ = _find(root, name, (Path(name).suffix,), warnings)
        if answers is not None:
            break
    return SubmissionFiles(root, module, module_problem, answers, warnings, notebook,
                           notebook_warnings)


def _descend(root: Path, module_name: str) -> tuple[Path, list[str]]:
    # Zipping a folder gives one nested folder holding everything: look inside it.
    expected = {f"{module_name}.py", f"{module_name}.ipynb", *ANSWERS_NAMES}
    entries = [p for p in root.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if not any(p.name in expected for p in entries):
        folders = [p for p in entries if p.is_dir() and not p.is_symlink()]
        if len(folders) == 1 and len(entries) == 1:
            return folders[0], [f"your files were found inside the folder "
                                f"'{label(folders[0].name)}'"]
    return root, []


def _find(root: Path, name: str, suffixes: tuple[str, ...],
          warnings: list[str]) -> tuple[Path | None, str | None]:
    exact = root / name
    if exact.is_symlink():
        return None, f"{name} is a symbolic link; submit the file itself"
    if exact.is_file():
        return exact, None
    stem = re.escape(Path(name).stem)
    pattern = re.compile(_RENAMED.format(stem=stem) + "$", re.IGNORECASE)
    candidates = sorted(p for p in root.iterdir()
                        if p.suffix.lower() in suffixes and pattern.match(p.stem)
                        and p.is_file() and not p.is_symlink())
    if not candidates:
        return None, None
    chosen = candidates[0]
    others = f" (also found: {', '.join(label(p.name) for p in candidates[1:6])})" \
        if len(candidates) > 1 else ""
    warnings.append(f"'{label(chosen.name)}' was graded as {name}{others}; name it {name} "
                    "next time")
    return chosen, None


def upload_path(path: Path, ignored: Collection[str] = ()) -> Path:
    """What to grade of an upload: the folder, or the one .zip it holds when the student
    uploaded only that (grading extracts a zip safely, as Gradescope's run_autograder does).
    Hidden files and the names in `ignored` do not count."""
    if not path.is_dir():
        return path
    entries = [p for p in path.iterdir() if not p.name.startswith(".") and p.name not in ignored]
    if len(entries) == 1 and entries[0].suffix.lower() == ".zip" and entries[0].is_file() \
            and not entries[0].is_symlink():
        return entries[0]
    return path
