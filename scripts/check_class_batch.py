"""Check a graded class against what scripts/make_class_export.py says it must give.

    .venv/bin/python scripts/make_class_export.py --out /tmp/cls            # 200 submissions
    .venv/bin/autograder batch /tmp/cls/assignment_*_export -a dp_basics -o /tmp/cls-out
    .venv/bin/python scripts/check_class_batch.py /tmp/cls /tmp/cls-out

Compares the latest gradebook run of every submission with expected.json (multiple choice
exactly, totals exactly where known and within their range always, the status among those
expected: `blank` for the template, `not_importable` for a syntax error, `flagged` for hostile
code, `ok` for a correct one...), checks that every submitter has a report folder and a
grades.csv row with that status, and prints a table of categories. Exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.batch.gradebook import Gradebook  # noqa: E402
from autograder.batch.records import report_folder  # noqa: E402

TOLERANCE = 0.011  # scores are written with 4 decimals; expectations with 2


def check(export_dir: Path, out: Path) -> list[str]:
    expected = json.loads((export_dir / "expected.json").read_text())
    with Gradebook(out / "gradebook.sqlite") as book:
        graded = {g.submission.key: g for g in book.latest()}
    with open(out / "grades.csv", newline="", encoding="utf-8-sig") as f:  # it has a BOM
        rows = {row["sid"]: row for row in csv.DictReader(f)}
    problems = []
    for key, want in expected["submissions"].items():
        got = graded.get(key)
        if got is None:
            problems.append(f"{key}: not in the gradebook")
            continue
        if got.error:
            problems.append(f"{key}: the grader failed: {got.error}")
            continue
        parts = {p["name"]: p["score"] for p in got.report["parts"]}
        label = f"{key} ({want['category']}/{want['variant']})"
        if abs(parts["multiple_choice"] - want["multiple_choice"]) > TOLERANCE:
            problems.append(f"{label}: multiple choice {parts['multiple_choice']}, "
                            f"expected {want['multiple_choice']}")
        if want.get("total") is not None and abs(got.score - want["total"]) > TOLERANCE:
            problems.append(f"{label}: total {got.score}, expected {want['total']}")
        low, high = want["total_range"]
        if not low - TOLERANCE <= got.score <= high + TOLERANCE:
            problems.append(f"{label}: total {got.score} outside [{low}, {high}]")
        status = got.status.status
        if status not in want["statuses"]:
            problems.append(f"{label}: status {status} ({got.status.detail}), expected "
                            f"{' or '.join(want['statuses'])}")
        for person in want["submitters"]:
            if not (out / "reports" / report_folder(person["sid"]) / "report.html").is_file():
                problems.append(f"{label}: no report for {person['sid']}")
            if person["sid"] not in rows:
                problems.append(f"{label}: no grades.csv row for {person['sid']}")
            elif rows[person["sid"]]["status"] != status:  # what the TA reads
                problems.append(f"{label}: grades.csv says {rows[person['sid']]['status']} for "
                                f"{person['sid']}, the gradebook {status}")
    if not (out / "index.html").is_file():
        problems.append("no index.html")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", type=Path, help="--out of make_class_export.py")
    parser.add_argument("out", type=Path, help="--out of autograder batch")
    args = parser.parse_args()
    expected = json.loads((args.export_dir / "expected.json").read_text())
    problems = check(args.export_dir, args.out)
    categories = Counter(s["category"] for s in expected["submissions"].values())
    exact = sum(s.get("total") is not None for s in expected["submissions"].values())
    mix = ", ".join(f"{k} {v}" for k, v in sorted(categories.items()))
    print(f"{len(expected['submissions'])} submissions ({mix}); {exact} with an exact expected "
          "total")
    for problem in problems:
        print(f"MISMATCH {problem}")
    print("all totals and statuses as expected" if not problems
          else f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
