"""Where a project's files live (`Project`), and where the engine's own files live.

A project (grading.yml, assignments/, student_templates/, dist/) is found the way git finds a
repository: `AUTOGRADER_ROOT` when set (bundles, containers, `autograder --root`), else the
nearest folder holding a grading.yml from the working folder upward; only when there is none,
the tree the package was installed from. Each process entry point (the CLI, the Gradescope
entry point, a batch worker) makes its `Project` once and passes it down, so that no module
holds a path computed from the working folder at import, and a parent and its children always
agree on the project.

The engine's files (its schemas, pyproject.toml, the Makefile's torch pin) come from the
package's own tree, `PACKAGE_ROOT`, unless the project carries its own schemas (a Gradescope or
Ray bundle does: the engine is installed there without its tree).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
CONFIG_NAME = "grading.yml"


@dataclass(frozen=True)
class Project:
    """One course's files: its grading.yml, the schemas it is read with, its assignments'
    sources and its generated student templates. `how` says how it was found, for people."""

    root: Path
    how: str
    config: Path
    schemas: Path
    assignments: Path
    templates: Path

    @property
    def dist(self) -> Path:
        """Where releases write the zips (student and Gradescope)."""
        return self.root / "dist"

    @classmethod
    def at(cls, root: Path, how: str, config: Path | None = None) -> Project:
        """The project in folder `root`, configured by `config` (default: its grading.yml)."""
        root = root.resolve()
        schemas = root / "schemas"
        return cls(root=root, how=how, config=(config or root / CONFIG_NAME).resolve(),
                   schemas=schemas if schemas.is_dir() else PACKAGE_ROOT / "schemas",
                   assignments=root / "assignments", templates=root / "student_templates")

    @classmethod
    def of_config(cls, config: Path, how: str = "from --config") -> Project:
        """The project a grading.yml configures: the folder holding it."""
        config = config.resolve()
        return cls.at(config.parent, how, config)

    @classmethod
    def find(cls, start: Path | None = None) -> Project:
        """The project of `AUTOGRADER_ROOT`, else found from `start` (the working folder)
        upward, else the one next to the installed package."""
        explicit = os.environ.get("AUTOGRADER_ROOT")
        if explicit:
            return cls.at(Path(explicit), "from AUTOGRADER_ROOT")
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).is_file():
                return cls.at(folder, "found from the working folder")
        return cls.at(PACKAGE_ROOT, f"no {CONFIG_NAME} in {here} or above: using the one next "
                                    "to the installed package")
