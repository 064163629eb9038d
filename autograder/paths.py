"""Where the project's files live. AUTOGRADER_ROOT overrides the root (bundles, containers)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("AUTOGRADER_ROOT") or Path(__file__).resolve().parents[1])
SCHEMAS_DIR = ROOT / "schemas"
ASSIGNMENTS_DIR = ROOT / "assignments"
TEMPLATES_DIR = ROOT / "student_templates"
GRADING_CONFIG = ROOT / "grading.yml"
