"""Batch grading against a loop of `autograder grade`, side by side in one run.

    .venv/bin/python bench/batch_vs_loop.py [--copies 4] [--rounds 1] [--assignment dp_basics]

Grades COPIES copies of the bundled example submissions (reference, blank, partial) with
(a) one `autograder grade` per submission and (b) one `autograder batch --jobs 2`, alternating
in each round, and prints both, their ratio, and the marginal cost of one more submission in a
batch (from a batch of one copy against the batch of all copies). Also checks that both ways give
every submission the same score under the same protections.

Targets on a 2-core machine: batch at least 4x faster than the loop, at most 0.8 s per additional
submission (#14). Each batch also runs in a cgroup (when this machine allows one) that counts its
CPU time: the marginal CPU seconds of one more submission, halved for 2 jobs, is what the marginal
wall time would be on 2 otherwise idle cores, a figure that other load on the machine does not
inflate. The reference and the blank submission must score the same both ways; the partial one
may not (hidden tests draw their inputs anew in every grading, and it is right on some draws).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BIN, ROOT, timed
from limits import Box

sys.path.insert(0, str(ROOT / "scripts"))
from demo import build_examples  # noqa: E402 - the bundled submissions, as `make demo` has them


def make_class(folder: Path, copies: int, assignment: str) -> list[Path]:
    examples = build_examples(folder / "examples", assignment)
    students = []
    for copy in range(copies):
        for example in examples:
            student = folder / "class" / f"{example.name}-{copy:03d}"
            shutil.copytree(example, student)
            students.append(student)
    return students


def batch_command(submissions: Path, out: Path, assignment: str) -> list[str]:
    return [str(BIN / "autograder"), "batch", str(submissions), "--assignment", assignment,
            "--out", str(out), "--jobs", "2"]


def scores(folder: Path) -> dict[str, tuple]:
    found = {}
    for report in folder.rglob("report.json"):
        data = json.loads(report.read_text())
        found[report.parent.name] = (data["score"], tuple(data["environment"]["protections"]))
    return found


def disagreements(loop: dict[str, tuple], batch: dict[str, tuple]) -> list[str]:
    """Submissions graded differently: any score of the deterministic ones, any protections."""
    bad = []
    for name in sorted(set(loop) | set(batch)):
        a, b = loop.get(name), batch.get(name)
        if a is None or b is None or a[1] != b[1] or (not name.startswith("partial")
                                                      and a[0] != b[0]):
            bad.append(f"{name}: loop {a and a[0]}, batch {b and b[0]}")
    return bad


def timed_in_box(command: list[str]) -> tuple[float, float | None]:
    """Wall seconds, and CPU seconds of the whole process tree when a cgroup can count them."""
    if not Box.available():
        return timed(command), None
    box = Box()
    try:
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                                preexec_fn=box.enter)
        wall = time.perf_counter() - started
        if result.returncode != 0:
            sys.exit(f"command failed ({result.returncode}): {' '.join(command)}\n"
                     f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return wall, box.cpu_seconds()
    finally:
        box.remove()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--assignment", default="dp_basics")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    students = make_class(work, args.copies, args.assignment)
    one_copy = work / "one"
    for student in students[:3]:
        shutil.copytree(student, one_copy / student.name)
    n = len(students)
    loops, batches, smalls, cpus = [], [], [], []
    for round_ in range(args.rounds):
        loop_out, batch_out, small_out = (work / f"{k}-{round_}" for k in ("loop", "b", "s"))
        loop = sum(timed([str(BIN / "autograder"), "grade", str(s), "--assignment", args.assignment,
                          "--out", str(loop_out / s.name)]) for s in students)
        batch, batch_cpu = timed_in_box(batch_command(work / "class", batch_out, args.assignment))
        small, small_cpu = timed_in_box(batch_command(one_copy, small_out, args.assignment))
        loops.append(loop), batches.append(batch), smalls.append(small)
        if batch_cpu is not None and small_cpu is not None:
            cpus.append((batch_cpu - small_cpu) / (n - 3))
        print(f"round {round_ + 1}: loop {loop:.1f} s, batch {batch:.1f} s, "
              f"batch of 3 {small:.1f} s"
              + (f"; CPU: batch {batch_cpu:.1f} s, batch of 3 {small_cpu:.1f} s"
                 if batch_cpu is not None and small_cpu is not None else ""), flush=True)
        bad = disagreements(scores(loop_out), scores(batch_out / "reports"))
        if bad:
            print("MISMATCH: the loop and the batch disagree on scores or protections:\n  "
                  + "\n  ".join(bad))
            return 1
    loop, batch, small = (statistics.median(x) for x in (loops, batches, smalls))
    marginal = (batch - small) / (n - 3)
    print(f"\n{args.assignment}: {n} submissions ({args.copies} copies of reference, blank, "
          f"partial), median of {args.rounds} round(s), 2 jobs:")
    print(f"  (a) loop of `autograder grade`: {loop:7.1f} s  ({loop / n:.2f} s per submission)")
    print(f"  (b) `autograder batch --jobs 2`: {batch:7.1f} s  ({batch / n:.2f} s per submission)")
    print(f"  ratio a/b: {loop / batch:.2f}x   (target: at least 4x)")
    print(f"  marginal cost of one more submission in a batch: {marginal:.2f} s   "
          f"(target: at most 0.8 s)")
    if cpus:
        cpu = statistics.median(cpus)
        print(f"  marginal CPU of one more submission: {cpu:.2f} CPU-s, so {cpu / 2:.2f} s on 2 "
              f"idle cores (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print("  scores and protections: identical in (a) and (b)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
