"""One line for a YAML file that does not parse: the file's name, where, and what.

PyYAML's own message spans several lines (the context, a copy of the line, a caret) and names the
text it parsed "<unicode string>" rather than the file, which every reader of it would then
show as so many problems.
"""

from __future__ import annotations

import yaml

from autograder.project.inert import label


def yaml_problem(exc: yaml.YAMLError) -> tuple[str, str]:
    """(" at line L, column C" or "", what is wrong) of a parse error."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else problem
    return where, label(what, 300)


def not_valid_yaml(name: str, exc: yaml.YAMLError) -> str:
    """'NAME is not valid YAML at line L, column C: what' (inert: a file's text may be shown)."""
    where, what = yaml_problem(exc)
    return f"{name} is not valid YAML{where}: {what}"
