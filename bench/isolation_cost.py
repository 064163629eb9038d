"""The cost of sandbox isolation: grading the reference with and without it, side by side.

Alternates `autograder grade` with the machine's isolation (namespaces, own uid) and with
AUTOGRADER_ISOLATION=none, and prints the medians and their ratio from one run.

    .venv/bin/python bench/isolation_cost.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.grade_vs_pytest import BIN, reference_submission, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        submission = reference_submission(work / "reference")
        grade = [str(BIN / "autograder"), "grade", str(submission), "--assignment",
                 "dp_basics", "--out", str(work / "out")]
        bare = {**os.environ, "AUTOGRADER_ISOLATION": "none"}
        timed(grade), timed(grade, bare)
        a, b = [], []
        for _ in range(runs):
            a.append(timed(grade))
            b.append(timed(grade, bare))
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(f"runs: {runs} each, alternating")
        print(f"A  isolated (machine default)   median {statistics.median(a):6.2f} s  "
              f"(min {min(a):.2f}, max {max(a):.2f})")
        print(f"B  AUTOGRADER_ISOLATION=none    median {statistics.median(b):6.2f} s  "
              f"(min {min(b):.2f}, max {max(b):.2f})")
        print(f"A/B per pair: {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median ratio {statistics.median(ratios):.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
