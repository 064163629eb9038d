"""The reference must score 100% with half a CPU (Gradescope's default container).

    .venv/bin/python scripts/half_cpu_check.py [--assignment dp_basics] [--cpu 0.5]
        [--memory-mb 768] [--runs 1]

Grades the reference solution with the full key (`autograder grade`, cold, as on Gradescope) in
a cgroup holding a CPU quota of 50000 us per 100000 us (cgroup v2 `cpu.max`, or v1
`cpu.cfs_quota_us`) and, with --memory-mb, a memory limit. Prints the score, wall time, peak
memory of the whole process tree, the machine factor the grader measured (its test budgets are
scaled by it) and any test that failed. Exit 0 when every run scores 100%; when this machine
cannot make a cgroup (not root, no writable cgroup file system) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from common import BIN, ROOT, reference_submission  # noqa: E402
from limits import Box  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="dp_basics")
    parser.add_argument("--cpu", type=float, default=0.5)
    parser.add_argument("--memory-mb", type=int, default=None)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if not Box.available():
        print("skipped: this machine does not let us make a cgroup (root and a writable "
              "/sys/fs/cgroup are needed)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="half-cpu-"))
    submission = reference_submission(work / "reference", args.assignment)
    failures = 0
    for run in range(args.runs):
        out = work / f"out-{run}"
        box = Box(cpu=args.cpu, memory_mb=args.memory_mb)
        started = time.perf_counter()
        result = subprocess.run(
            [str(BIN / "autograder"), "grade", str(submission), "--assignment", args.assignment,
             "--out", str(out), "--staff-out", str(out / "staff")],  # the full report
            capture_output=True, text=True, cwd=ROOT, preexec_fn=box.enter)
        wall = time.perf_counter() - started
        peak = box.peak_mb()
        box.remove()
        if not (out / "staff" / "report.json").is_file():
            print(f"run {run + 1}: no report (exit {result.returncode}): {result.stderr[-1000:]}")
            failures += 1
            continue
        report = json.loads((out / "staff" / "report.json").read_text())
        budgets = report["environment"].get("time_budgets", {})
        failed = [f"{t['name']}: {t['message'][:160]}" for t in report["tests"]
                  if t["status"] == "failed"]
        full = abs(report["score"] - report["max_score"]) < 1e-6 and not failed
        failures += not full
        print(f"run {run + 1}: {args.cpu} CPU" + (f", {args.memory_mb} MB" if args.memory_mb
                                                  else "")
              + f": score {report['score']:g}/{report['max_score']:g} in {wall:.1f} s, peak "
              f"memory {peak:.0f} MB, machine factor {budgets.get('machine_factor', 'n/a')} "
              f"(calibration {budgets.get('calibration_seconds', 'n/a')} s)"
              + ("" if full else " FAILED"), flush=True)
        for line in failed[:20]:
            print(f"    {line}")
    print("reference at 100% under the quota: " + ("yes" if not failures else "NO"))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
