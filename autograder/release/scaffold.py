"""`autograder new NAME`: a complete minimal assignment that validates, releases and grades.

It writes, under `assignments/NAME/`:

- `solution/NAME.py`: one function whose body sits between solution markers;
- `questions.yml`: one question with every required field, each explained by a comment;
- `probes.py`: one probe (a scenario run in the student's process);
- `tests/public/conftest.py` and `tests/public/test_public.py`: what students run with pytest;
- `tests/hidden/test_NAME.py`: one hidden test, so worth the whole coding part;

and appends the assignment's entry to `grading.yml` as text, so the file's comments and layout
stay as they were. docs/AUTHORING.md says what each file holds and how to grow it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from autograder.project.paths import Project

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
MC_POINTS, CODING_POINTS = 20, 80  # a course total of 100
FUNCTION = "scaled"


class ScaffoldError(Exception):
    """The assignment cannot be created; nothing was written."""


# ----------------------------------------------------------------------------- file texts

SOLUTION = '''\
"""{title}: one sentence on what this assignment teaches.

Implement every function below. Each docstring is the contract the grader checks, so read it
closely: the edge cases it names are tested.

Run the public tests with `pytest` in the folder that holds this file.
"""

from __future__ import annotations

import torch


def {function}(values: torch.Tensor, factor: float) -> torch.Tensor:
    """Return `values * factor` as a new tensor with the shape and dtype of `values`.

    `values` itself is never modified.
    """
    ### BEGIN SOLUTION
    return values * factor
    ### END SOLUTION
'''

QUESTIONS = '''\
# Multiple-choice bank for {name}: holds the key, read only by trusted code.
# Shape: schemas/questions.schema.json; every field is described in docs/AUTHORING.md.
assignment: {name}              # the assignment's name, as in grading.yml
verified_with: torch {torch}   # the PyTorch build the key and snippets were checked on
questions:
  - id: q01                  # neutral and stable: answers.yml is keyed by it
    source: new              # free text: where the question comes from (course label)
    topic: Tensors           # groups questions in reports and the class overview
    # The stem states the environment whenever the answer depends on it.
    stem: >-
      On any machine, with or without a GPU, what does this code print?
    code: |                  # optional: code shown with the stem
      import torch
      t = torch.ones(2)
      u = t.mul_(3)
      print(u is t, t.tolist())
    options:                 # letters consecutive from A
      A: True [3.0, 3.0]
      B: False [1.0, 1.0]
      C: False [3.0, 3.0]
      D: True [1.0, 1.0]
    answer: [A]              # accepted letters
    multiple: false          # true: "select all that apply", the set must match exactly
    points: {points}         # the questions' points add up to grading.yml's multiple_choice
    hint: Methods whose names end in an underscore work in place.    # shown to students
    explanation: >-          # shown with the result, when grading.yml's visibility allows
      mul_ multiplies t in place and returns t itself, so u is t and t now holds 3s.
    feedback:                # one entry per wrong option: why it is wrong, never the key
      B: A trailing underscore marks an in-place method; t is not left as it was.
      C: An in-place method returns the tensor it changed, not a new one.
      D: The values change; an in-place method is not a no-op.
    snippet:                 # optional: code whose run backs the key (autograder verify-key)
      code: |
        import torch
        t = torch.ones(2)
        u = t.mul_(3)
        print(u is t, t.tolist())
      expect:                # the outcome on each kind of machine: stdout, or raises (+ match)
        no_gpu: {{stdout: "True [3.0, 3.0]"}}
        one_gpu: {{stdout: "True [3.0, 3.0]"}}
        multi_gpu: {{stdout: "True [3.0, 3.0]"}}
'''

PROBES = '''\
"""Sandbox-side scenarios for the {name} hidden tests.

This file is copied next to the student's module and runs in the student's process: it is not
secret and student code can rewrite it. A probe `fn(mod, *args)` (`mod` is the student's module)
runs a scenario there and reports what happened as plain data. It holds no expected value, no
verdict and none of the solution's logic: the hidden tests compute what is right, outside the
sandbox, from inputs they drew for this grading.
"""

from __future__ import annotations

from typing import Any


def {function}_and_input(mod: Any, values: Any, factor: float) -> dict:
    """Call `{function}` and report its result and `values` as they are after the call.

    Arguments reach the sandbox pickled, so a test that calls `student.{function}` directly
    never sees an in-place change of `values`; here the call and the look happen in one process.
    """
    result = mod.{function}(values, factor)
    return {{"result": result, "values_after": values}}
'''

CONFTEST = '''\
"""Lets `pytest` find your {module}.py.

It looks next to these tests, then one folder up; set {env} to point elsewhere.
"""

import os
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
_candidates = [os.environ.get("{env}", ""), _here, _here.parent]
for _folder in _candidates:
    if _folder and (Path(_folder) / "{module}.py").is_file():
        sys.path.insert(0, str(Path(_folder).resolve()))
        break
'''

PUBLIC_TEST = '''\
"""Public checks for {module}: run `pytest` in the folder holding {module}.py.

The grader runs more checks than these (every rule in the docstrings, on other inputs).
"""

import torch

import {module} as S


def test_{function}_doubles():
    assert torch.equal(S.{function}(torch.tensor([1.0, 2.0]), 2.0), torch.tensor([2.0, 4.0]))
'''

HIDDEN_TEST = '''\
"""Hidden tests of {name}: they reach the student's code only through the `student` fixture."""

import torch

from autograder.testing import drawn

import probes


# Points live in grading.yml; a function's points are split over its tests by their weights
# (`@pytest.mark.weight(w)`, default 1). This test is the function's only one: all its points.
def test_{function}(student):
    """{function}: multiplies by factor and leaves the input alone"""
    rng = drawn()  # seeded afresh for each grading: no constant a submission could learn
    values = torch.randn(rng.randint(1, 5), rng.randint(1, 5))
    factor = rng.choice([-1, 1]) * rng.uniform(1.5, 4.0)
    # A probe, not `student.{function}(values, factor)`: arguments are pickled into the
    # sandbox, so only a probe sees whether the student's code changed `values` in place.
    report = student.probe(probes.{function}_and_input, values, factor)
    result = report["result"]
    assert isinstance(result, torch.Tensor) and result.shape == values.shape, (
        "{function} must return a tensor of the shape of `values`")
    assert result.dtype == values.dtype, "the result must keep the dtype of `values`"
    assert torch.allclose(result, values * factor), (
        "{function}(values, factor) must equal values * factor")
    # A constant property, checked together with the main behaviour, never alone.
    assert torch.equal(report["values_after"], values), "{function} must not modify `values`"
'''

ENTRY = '''\
  {name}:
    # Shown to students in the README and the reports.
    title: {title}
    # Students submit {name}.py; the reference is assignments/{name}/solution/{name}.py.
    module: {name}
{due}    parts:
      multiple_choice:
        # The questions' points in assignments/{name}/questions.yml add up to this.
        points: {mc_points}
{mc_settings}      coding:
        points: {coding_points}
{coding_settings}        # Points per function, split over its hidden tests by their weights.
        functions:
          {function}: {coding_points}
{settings}'''


# ----------------------------------------------------------------------------- writing


def _settings_from(config_path: Path, source: str | None) -> dict[str, Any]:
    """Settings copied from assignment `source` in grading.yml (all but its names and points)."""
    if source is None:
        return {}
    data = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    entry = (data.get("assignments") or {}).get(source)
    if not isinstance(entry, dict):
        raise ScaffoldError(f"--from {source}: no such assignment in {config_path}")
    return entry


def _indented(value: dict[str, Any], spaces: int) -> str:
    if not value:
        return ""
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


def grading_entry(name: str, title: str, settings: dict[str, Any]) -> str:
    """The text of the assignment's grading.yml entry, settings of `--from` included."""
    parts = settings.get("parts") or {}
    copied = {k: v for k, v in settings.items()
              if k not in ("title", "module", "due", "parts")}
    part_keys = {"multiple_choice": ("visibility", "problems_visibility", "reveal_key"),
                 "coding": ("visibility", "show_student_output")}
    part_settings = {
        part: {k: parts[part][k] for k in keys if k in (parts.get(part) or {})}
        for part, keys in part_keys.items()}
    if not settings:  # the defaults of the schema, said out loud
        part_settings["multiple_choice"] = {"visibility": "after_due_date"}
        part_settings["coding"] = {"visibility": "visible"}
        copied = {"gpu_policy": "reweight"}
    due = ('    # Optional: due: "2027-01-31T23:59:00-05:00" (ISO 8601 with its offset); '
           '`late` uses it.\n')
    if settings.get("due"):
        due = ("    # Copied with the settings: change it.\n"
               f"    due: {json.dumps(str(settings['due']))}\n")
    return ENTRY.format(
        due=due, name=name, title=title, function=FUNCTION, mc_points=MC_POINTS,
        coding_points=CODING_POINTS,
        mc_settings=_indented(part_settings["multiple_choice"], 8),
        coding_settings=_indented(part_settings["coding"], 8),
        settings=_indented(copied, 4))


def append_entry(config_path: Path, name: str, entry: str) -> str:
    """grading.yml's text with `entry` added at the end of its `assignments:` block; every
    other byte (comments included) as it was."""
    text = config_path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"assignments:\s*(#.*)?$", line)),
                 None)
    if start is None:
        raise ScaffoldError(f"{config_path} has no top-level `assignments:` block")
    end = len(lines)
    for i in range(start + 1, len(lines)):
        if lines[i].strip() and not lines[i].startswith((" ", "#")):
            end = i
            break
    # Blank lines and comments at column 0 that end the block belong to what follows it.
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    if end and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    new = "".join(lines[:end]) + entry + "".join(lines[end:])
    data = yaml.safe_load(new)
    if name not in (data.get("assignments") or {}):
        raise ScaffoldError(f"could not add {name} to {config_path} as text")
    return new


def new_assignment(name: str, project: Project, source: str | None = None,
                   title: str | None = None) -> list[Path]:
    """Write assignment `name` into `project` and add it to its grading.yml; the paths
    written."""
    if not NAME_PATTERN.match(name):
        raise ScaffoldError(f"{name!r}: a name is lowercase letters, digits and underscores, "
                            "starting with a letter (it is also the student's module name)")
    config_path = project.config
    folder = project.assignments / name
    data = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    if name in (data.get("assignments") or {}):
        raise ScaffoldError(f"{name} is already in {config_path}")
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists")
    settings = _settings_from(config_path, source)
    title = title or name.replace("_", " ").capitalize()
    import importlib.metadata

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "unknown"
    values = {"name": name, "module": name, "title": title, "function": FUNCTION,
              "env": f"{name.upper()}_DIR", "torch": torch_version}
    files = {
        f"solution/{name}.py": SOLUTION.format(**values),
        "questions.yml": QUESTIONS.format(points=MC_POINTS, **values),
        "probes.py": PROBES.format(**values),
        "tests/public/conftest.py": CONFTEST.format(**values),
        "tests/public/test_public.py": PUBLIC_TEST.format(**values),
        f"tests/hidden/test_{name}.py": HIDDEN_TEST.format(**values),
    }
    grading = append_entry(config_path, name, grading_entry(name, title, settings))
    written = []
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    config_path.write_text(grading, encoding="utf-8")
    written.append(config_path)
    return written
