"""Where a line of a module converted from a notebook came from: the cell the student wrote.

The grader writes the cell map of a converted notebook (student_files.check.Converted.cells:
[first line of the cell's code in the module, cell number, the cell's first line]) as
`<module>.cells.json` beside the module in the sandbox folder; the worker names the cell in an
error's location instead of a line of a file the student never sees. Standard library only (this
is copied into each sandbox); the map is the student's own data, bounded when read.
"""

from __future__ import annotations

import json
import os

SUFFIX = ".cells.json"
MAX_BYTES = 1 << 20
MAX_CELLS = 10_000


def map_name(module_name: str) -> str:
    return f"{module_name}{SUFFIX}"


def load(folder: str, module_name: str) -> list[tuple[int, int, str]]:
    """The map beside the module, sorted by line; empty when there is none (a .py upload)."""
    path = os.path.join(folder, map_name(module_name))
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(MAX_BYTES + 1)[:MAX_BYTES])
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(data, list):
        return []
    cells = [(e[0], e[1], e[2]) for e in data[:MAX_CELLS]
             if isinstance(e, list) and len(e) == 3 and type(e[0]) is int
             and type(e[1]) is int and isinstance(e[2], str)]
    return sorted(cells)


def locate(cells: list[tuple[int, int, str]], line: int | None) -> str:
    """'cell 7 ("def add(a, b):"), line 3' for a line of the module; 'line N' when
    the line is outside every cell (the module's header) or there is no map."""
    if line is None:
        return "line ?"
    found = None
    for start, number, first in cells:
        if start > line:
            break
        found = (start, number, first)
    if found is None:
        return f"line {line}"
    start, number, first = found
    head = f' ("{first[:60]}")' if first else ""
    return f"cell {number}{head}, line {line - start + 1}"
