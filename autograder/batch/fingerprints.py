"""Content hashes that decide whether a batch re-run may skip a submission.

A submission is regraded when its files, the grader's code or the assignment (hidden tests,
probes, questions, configuration) change; anything else about the files (times, order) is not
part of a fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from autograder import __version__
from autograder.project.assignment import Assignment

_PACKAGE = Path(__file__).resolve().parents[1]


def tree_hash(path: Path, suffixes: tuple[str, ...] | None = None) -> str:
    """sha256 over the relative names and bytes of the files under `path` (or of one file).

    Symlinks are hashed as their target text, never followed (a submission's link could point
    anywhere)."""
    digest = hashlib.sha256()
    if path.is_file() and not path.is_symlink():
        digest.update(path.read_bytes())
        return digest.hexdigest()
    for item in sorted(path.rglob("*")):
        if "__pycache__" in item.parts or (suffixes and item.suffix not in suffixes):
            continue
        name = os.fsencode(item.relative_to(path).as_posix())  # any bytes a name may hold
        if item.is_symlink():
            digest.update(b"L" + name + b"\0" + os.fsencode(item.readlink()) + b"\0")
        elif item.is_file():
            data = item.read_bytes()
            digest.update(b"F" + name + b"\0" + str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def grader_version() -> str:
    """The package version and a hash of its code and templates."""
    return f"{__version__}+{tree_hash(_PACKAGE, ('.py', '.j2', '.json'))[:16]}"


def assignment_version(assignment: Assignment) -> str:
    digest = hashlib.sha256()
    config = json.dumps(asdict(assignment.config), sort_keys=True, default=str)
    digest.update(config.encode())
    for path in (assignment.hidden_tests, assignment.probes, assignment.root / "questions.yml"):
        digest.update(tree_hash(path, (".py", ".yml")).encode() if path.is_dir()
                      else tree_hash(path).encode())
    return digest.hexdigest()[:16]
