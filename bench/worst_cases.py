"""Worst cases as numbers: adversarial but realistic submissions graded next to the reference.

    .venv/bin/python bench/worst_cases.py [-a dp_basics|ddp_training] [--only NAME ...]
                                          [--cpu 0.5] [--memory-mb 768]

Each submission is the reference solution (with the full key) with one thing gone wrong:

  all_loop       every function loops forever, ignoring signals
  helper_loop    one helper, used by half of the functions, loops forever
  rendezvous     setup_ddp gives each rank its own port: the ranks never meet (dp_basics)
  sleep_under    every call sleeps just under the call time limit, then answers right
  fork_bomb      every call forks children until the process limit, then answers right
  memory_hog     every call allocates until it is killed, then (never) answers
  crash_loop     the module sleeps 8.5 s at import and every call does os._exit(3): each test
                 imports it again, each rank of a scenario too (5 min 7 s on dp_basics before
                 crash_limit and timeouts.imports)

and, from the assignment acceptance tests' hostile folder, the blank template with each of its
files appended (tests/assignments/hostile: probe_hijack, collusion_<assignment>).

All are graded in one run, one `autograder grade` at a time, each in a cgroup of its own (when
this machine allows one): its wall time, coding score, the peak memory of the whole process tree
(grader, runner and sandboxes), the first hangs and crashes named by the report. With --cpu /
--memory-mb the cgroup also holds a CPU quota / memory limit (Gradescope's default container:
0.5 CPU, 768 MB). Target: every case in at most 120 s, each with a results.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BIN, ROOT, reference_submission
from limits import Box

sys.path.insert(0, str(ROOT))
from autograder.project.assignment import load_assignment  # noqa: E402
from autograder.project.markers import strip_solutions  # noqa: E402
from autograder.project.paths import Project  # noqa: E402

TARGET_S = 120.0
HOSTILE = ROOT / "tests" / "assignments" / "hostile"


def _wrap_each(before: str, functions: list[str]) -> str:
    """Source that redefines each function to run `before` and then the reference's own."""
    lines = ["", "import functools as _ft", "", "def _wrapped(_f):",
             "    @_ft.wraps(_f)", "    def _inner(*args, **kwargs):"]
    lines += [f"        {line}" for line in before.strip().splitlines()]
    lines += ["        return _f(*args, **kwargs)", "    return _inner", ""]
    lines += [f"{name} = _wrapped({name})" for name in functions]
    return "\n".join(lines) + "\n"


def cases(assignment: str) -> dict[str, str]:
    """What each case appends to the reference (None: the hostile file, to the blank template)."""
    functions = list(load_assignment(assignment, Project.find()).config.functions)
    made = {
        "all_loop": """
import signal as _signal
""" + _wrap_each("""
_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)
while True:
    pass
""", functions),
        "helper_loop": """
def _chunk_plan(n):
    size = 0
    while size < n:  # the bug: size never grows
        size += 0
    return size
""" + _wrap_each("_chunk_plan(4)", functions[::2]),
        "rendezvous": """
_reference_setup = setup_ddp


def setup_ddp(rank, world_size, master_port, *args, **kwargs):
    return _reference_setup(rank, world_size, master_port + 1 + rank, *args, **kwargs)
""",
        "sleep_under": """
import time as _time
""" + _wrap_each("_time.sleep(9.5)", functions),
        "fork_bomb": """
import os as _os
import time as _time
""" + _wrap_each("""
for _ in range(400):
    try:
        if _os.fork() == 0:
            _time.sleep(30)
            _os._exit(0)
    except OSError:
        break
""", functions),
        "memory_hog": _wrap_each("""
_hog = []
while True:
    _hog.append(bytearray(64 << 20))
    _hog[-1][:: 4096] = b"x" * len(_hog[-1][:: 4096])
""", functions),
        "crash_loop": """
import os as _os
import time as _time

_time.sleep(8.5)
""" + _wrap_each("_os._exit(3)", functions),
    }
    if assignment != "dp_basics":
        del made["rendezvous"]  # dp_basics' setup_ddp
    for hostile in ("probe_hijack", f"collusion_{assignment}"):
        if (HOSTILE / f"{hostile}.py").is_file():
            made[hostile] = None
    return made


def build(folder: Path, assignment: str, names: list[str]) -> dict[str, Path]:
    reference = reference_submission(folder / "reference", assignment)
    spec = load_assignment(assignment, Project.find())
    made, known = {"reference": reference}, cases(assignment)
    for name in names:
        target = folder / name
        shutil.copytree(reference, target)
        module = target / f"{spec.config.module}.py"
        if known[name] is None:  # the blank template with a hostile file appended
            module.write_text(strip_solutions(spec.solution.read_text()) + "\n\n"
                              + (HOSTILE / f"{name}.py").read_text())
        else:
            module.write_text(module.read_text() + "\n# --- what went wrong ---\n"
                              + known[name])
        made[name] = target
    return made


def grade_one(name: str, submission: Path, out: Path, cpu: float | None,
              memory_mb: int | None, assignment: str) -> dict:
    box = None
    if Box.available():
        box = Box(cpu=cpu, memory_mb=memory_mb)
    command = [str(BIN / "autograder"), "grade", str(submission), "--assignment", assignment,
               "--out", str(out)]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            preexec_fn=box.enter if box else None)
    wall = time.perf_counter() - started
    row = {"name": name, "wall": wall, "exit": result.returncode, "peak_mb": None,
           "oom_kills": 0, "coding": None, "first_hang": "", "crashed_out": "", "not_run": 0,
           "results_json": (out / "results.json").is_file()}
    if box is not None:
        row["peak_mb"], row["oom_kills"] = box.peak_mb(), box.oom_kills()
        box.remove()
    if (out / "report.json").is_file():
        report = json.loads((out / "report.json").read_text())
        coding = [p for p in report["parts"] if p["name"] == "coding"]
        row["coding"] = (coding[0]["score"], coding[0]["max_score"]) if coding else None
        hangs = [w for w in report["warnings"] if "the first to hang" in w]
        row["first_hang"] = "; ".join(re.sub(r" \(the first to hang\).*", "", w)
                                      for w in hangs[:2]) + (" ..." if len(hangs) > 2 else "")
        row["hangs"] = len(hangs)
        crashed = [w.split()[0] for w in report["warnings"] if " crashed " in w
                   and ", first in the test '" in w]
        row["crashed_out"] = ", ".join(crashed[:2]) + (" ..." if len(crashed) > 2 else "")
        row["imports_s"] = report.get("environment", {}).get("imports", {}).get("seconds")
        row["not_run"] = sum(1 for t in report["tests"]
                             if t["message"].startswith("not run: "))
    else:
        row["error"] = (result.stderr or result.stdout)[-600:]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-a", "--assignment", default="dp_basics",
                        choices=["dp_basics", "ddp_training"])
    parser.add_argument("--only", action="append",
                        help="grade only this case (repeatable); the reference always runs")
    parser.add_argument("--cpu", type=float, help="CPU quota in CPUs (e.g. 0.5)")
    parser.add_argument("--memory-mb", type=int, help="memory limit of the whole grading")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    known = cases(args.assignment)
    names = args.only or list(known)
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"no case {unknown} for {args.assignment} (it has {sorted(known)})")
    work = Path(tempfile.mkdtemp(prefix="bench-worst-"))
    submissions = build(work / "submissions", args.assignment, names)
    if not Box.available():
        print("note: no cgroup can be made here: no peak memory, no CPU or memory limit")
    limits = ", ".join(x for x in (f"{args.cpu} CPU" if args.cpu else "",
                                   f"{args.memory_mb} MB" if args.memory_mb else "") if x)
    print(f"grading {len(submissions)} {args.assignment} submissions one at a time"
          + (f" under {limits}" if limits else "") + "\n", flush=True)
    rows = []
    for name, submission in submissions.items():
        row = grade_one(name, submission, work / "out" / name, args.cpu, args.memory_mb,
                        args.assignment)
        rows.append(row)
        print(f"  {name:<20} {row['wall']:6.1f} s  done", flush=True)
    reference = rows[0]["wall"]
    print(f"\n{'submission':<20} {'wall s':>7} {'x ref':>6} {'coding':>11} {'peak MB':>8} "
          f"{'oom':>4} {'not run':>7} {'imports s':>9}  first hang; crashed out (the report)")
    worst = 0.0
    for row in rows:
        coding = f"{row['coding'][0]:g}/{row['coding'][1]:g}" if row["coding"] else "-"
        peak = f"{row['peak_mb']:.0f}" if row["peak_mb"] else "-"
        imports = f"{row['imports_s']:.1f}" if row.get("imports_s") is not None else "-"
        print(f"{row['name']:<20} {row['wall']:7.1f} {row['wall'] / reference:6.1f} "
              f"{coding:>11} {peak:>8} {row['oom_kills']:>4} {row['not_run']:>7} "
              f"{imports:>9}  {row['first_hang'] or '-'}; {row['crashed_out'] or '-'}")
        if not row["results_json"]:
            print(f"    NO results.json (exit {row['exit']}): {row.get('error', '')}")
        if row["name"] != "reference":
            worst = max(worst, row["wall"])
    print(f"\nslowest adversarial submission: {worst:.1f} s (target: at most {TARGET_S:.0f} s); "
          f"every results.json written: {all(r['results_json'] for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if worst <= TARGET_S and all(r["results_json"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
