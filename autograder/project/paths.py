"""Where the project's files live, and where the engine's own files live.

The project (grading.yml, assignments/, student_templates/, dist/) is found the way git finds a
repository: `AUTOGRADER_ROOT` when set (bundles, containers, `autograder --root`), else the
nearest folder holding a grading.yml from the working folder upward; only when there is none,
the tree the package was installed from. `ROOT_SOURCE` says which, for the CLI to print.
The engine's files (its schemas, pyproject.toml, the Makefile's torch pin) always come from
the package's own tree, `PACKAGE_ROOT`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
CONFIG_NAME = "grading.yml"


def find_root(start: Path | None = None) -> tuple[Path, str]:
    """The project root and how it was found (a phrase for people)."""
    explicit = os.environ.get("AUTOGRADER_ROOT")
    if explicit:
        return Path(explicit).resolve(), "from AUTOGRADER_ROOT"
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_NAME).is_file():
            return folder, "found from the working folder"
    return PACKAGE_ROOT, (f"no {CONFIG_NAME} in {here} or above: using the one next to the "
                          "installed package")


ROOT, ROOT_SOURCE = find_root()
# The engine's schemas, unless the project carries its own (a Gradescope bundle does).
SCHEMAS_DIR = ROOT / "schemas" if (ROOT / "schemas").is_dir() else PACKAGE_ROOT / "schemas"
ASSIGNMENTS_DIR = ROOT / "assignments"
TEMPLATES_DIR = ROOT / "student_templates"
GRADING_CONFIG = ROOT / CONFIG_NAME
