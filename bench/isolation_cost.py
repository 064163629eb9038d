"""The cost of sandbox isolation: grading the reference with and without it, side by side.

Alternates `autograder grade` with the machine's isolation (namespaces, own uid, cgroup) and with
none (the unsafe opt-in AUTOGRADER_UNSAFE_NO_ISOLATION=1), and prints the medians and their
ratio from one run.

    .venv/bin/python bench/isolation_cost.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import compare, grade_command, reference_submission  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        submission = reference_submission(work / "reference")
        command = grade_command(submission, work / "out")
        compare(runs, ("isolated (machine default)", command, None),
                ("AUTOGRADER_UNSAFE_NO_ISOLATION=1", command,
                 {**os.environ, "AUTOGRADER_UNSAFE_NO_ISOLATION": "1"}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
