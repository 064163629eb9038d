"""Solution markers (nbgrader style) in an assignment's reference solution.

A block between `### BEGIN SOLUTION` and `### END SOLUTION` lines is the solution: the student
template replaces it with `raise NotImplementedError(...)` inside a function, or drops it at
module level (solution-only helpers); the reference keeps it and loses only the marker lines.
"""

from __future__ import annotations

import re

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)")


class MarkerError(ValueError):
    """Unbalanced or misplaced solution markers."""


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    blocks, start = [], None
    for number, line in enumerate(lines):
        text = line.strip()
        if text == BEGIN:
            if start is not None:
                raise MarkerError(f"line {number + 1}: {BEGIN} inside another solution block")
            start = number
        elif text == END:
            if start is None:
                raise MarkerError(f"line {number + 1}: {END} without a {BEGIN}")
            blocks.append((start, number))
            start = None
    if start is not None:
        raise MarkerError(f"line {start + 1}: {BEGIN} is never closed")
    return blocks


def strip_solutions(source: str) -> str:
    """The student template: each solution block becomes a NotImplementedError stub."""
    lines = source.splitlines(keepends=True)
    out, previous = [], 0
    for start, end in _blocks(lines):
        out += lines[previous:start]
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        if indent:
            function = next((m.group(1) for line in reversed(lines[:start])
                             if (m := _DEF.match(line))), "this function")
            out.append(f'{indent}raise NotImplementedError("{function} is not implemented yet")\n')
        previous = end + 1
    return "".join(out + lines[previous:])


def reference(source: str) -> str:
    """The reference solution as a student would submit it: marker lines removed."""
    lines = source.splitlines(keepends=True)
    _blocks(lines)  # validates
    return "".join(line for line in lines if line.strip() not in (BEGIN, END))
