"""Record the reference's time per hidden test (assignments/<name>/timings.json), no release.

    .venv/bin/python scripts/record_timings.py [dp_basics]

`autograder release` does this in its self-check; this grades only the reference (with the full
key, as the self-check does) for when the hidden tests, probes or solution changed and
`autograder release --check` says the timings are stale. Fails, writing nothing, unless the
reference scores 100%.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autograder.project.assignment import load_assignment  # noqa: E402
from autograder.project.paths import Project  # noqa: E402
from autograder.release.build import _grade_reference, write_timings  # noqa: E402


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "dp_basics"
    assignment = load_assignment(name, Project.find())
    recorded = []
    with tempfile.TemporaryDirectory(prefix="timings-") as tmp:
        problems = _grade_reference(assignment, Path(tmp), recorded)
    if problems or not recorded:
        print("\n".join(problems) or "no timings were recorded", file=sys.stderr)
        return 1
    path = write_timings(assignment, recorded[0])
    tests = recorded[0].tests
    print(f"wrote {path}: {len(tests)} tests, {sum(tests.values()):.1f} s in all, the longest "
          f"{max(tests.values()):.2f} s; calibration workload {recorded[0].calibration:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
