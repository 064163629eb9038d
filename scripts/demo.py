"""`make demo`: grade the bundled example submissions of every assignment and print score tables.

For each assignment of grading.yml the examples are the reference solution with the
full key, the blank student template with no answers, and a partly correct submission
(assignments/<name>/examples/partial). The first two are derived from the sources here, so they
can never drift from them. Everything goes under demo-out/<name>/.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import yaml

from autograder.batch.driver import batch
from autograder.grading.grade import grade_loaded
from autograder.project.assignment import load_assignment
from autograder.project.config import load_config
from autograder.project.markers import reference, strip_solutions
from autograder.project.paths import Project

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "demo-out"


def build_examples(folder: Path, name: str) -> list[Path]:
    assignment = load_assignment(name, Project.find())
    module = assignment.config.module
    source = assignment.solution.read_text()
    key = {q.id: (list(q.answer) if q.multiple else q.answer[0])
           for q in assignment.bank.questions}
    ref, blank = folder / "reference", folder / "blank"
    for path in (ref, blank):
        path.mkdir(parents=True)
    (ref / f"{module}.py").write_text(reference(source))
    (ref / "answers.yml").write_text(yaml.safe_dump(key, sort_keys=False))
    (blank / f"{module}.py").write_text(strip_solutions(source))
    partial = folder / "partial"
    shutil.copytree(assignment.root / "examples" / "partial", partial)
    return [ref, blank, partial]


def demo(name: str) -> int:
    out = OUT / name
    submissions = build_examples(out / "submissions", name)
    assignment = load_assignment(name, Project.find())
    rows = []
    for submission in submissions:
        started = time.monotonic()
        reports = out / "reports" / submission.name
        report = grade_loaded(submission, assignment, reports,
                              staff_out=out / "staff" / submission.name)
        mc, coding = report.parts
        rows.append((submission.name, f"{mc.score:g}/{mc.max_score:g}",
                     f"{coding.score:g}/{coding.max_score:g}",
                     f"{report.score:g}/{report.max_score:g}",
                     f"{time.monotonic() - started:.1f}s", str(reports.relative_to(ROOT))))
    header = ("submission", "multiple choice", "coding", "total", "time", "reports")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"== {name}")
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"\nOpen {out.relative_to(ROOT)}/reports/<submission>/report.html for what each "
          f"student is shown, {out.relative_to(ROOT)}/staff/<submission>/ for everything.")
    release = report.release
    if release is not None and release.withheld:
        print(f"The table is the staff's. Until {release.results_shown_at or 'a due date'}"
              f" the students' files withhold the multiple choice ({release.withheld} "
              "results) and count the coding part alone (docs/submission.md: When results are "
              "shown).")

    # The same three as a class, the way a TA grades one (warm workers, gradebook, overview).
    summary = batch(out / "submissions", name, out / "class", jobs=2, project=Project.find())
    print(f"\nautograder batch: {summary.total} submissions graded in {summary.seconds:g} s; "
          f"class overview {out.relative_to(ROOT)}/class/index.html, grades "
          f"{out.relative_to(ROOT)}/class/grades.csv\n")
    return summary.failed


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    failed = sum(demo(name) for name in load_config(Project.find()))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
