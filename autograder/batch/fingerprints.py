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
        _hash_file(digest, path)
        return digest.hexdigest()
    for item in sorted(_walk(path)):
        if "__pycache__" in item.parts or (suffixes and item.suffix not in suffixes):
            continue
        name = os.fsencode(item.relative_to(path).as_posix())  # any bytes a name may hold
        if item.is_symlink():
            digest.update(b"L" + name + b"\0" + os.fsencode(item.readlink()) + b"\0")
        elif item.is_file():
            digest.update(b"F" + name + b"\0" + str(item.stat().st_size).encode() + b"\0")
            _hash_file(digest, item)
    return digest.hexdigest()


# A submission is fingerprinted before it is checked: no recursion, no whole-file reads, and
# at most this much of one file (what lies beyond shows in its size; grading refuses it anyway).
MAX_DEPTH = 64
HASHED_BYTES = 64 << 20


def _walk(root: Path) -> list[Path]:
    """Every path under `root`, links not followed, folders at most MAX_DEPTH deep."""
    found, stack = [], [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            children = list(folder.iterdir())
        except OSError:
            continue
        for child in children:
            found.append(child)
            if depth + 1 < MAX_DEPTH and child.is_dir() and not child.is_symlink():
                stack.append((child, depth + 1))
    return found


def _hash_file(digest: hashlib._Hash, path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            left = HASHED_BYTES
            while left > 0 and (chunk := handle.read(min(1 << 20, left))):
                digest.update(chunk)
                left -= len(chunk)
    except OSError as exc:
        digest.update(f"unreadable: {exc.errno}".encode())


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
