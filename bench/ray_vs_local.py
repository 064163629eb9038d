"""Ray actors against local warm workers, the same class in one run on this machine (#15).

    .venv/bin/python bench/ray_vs_local.py [--copies 4] [--rounds 1] [--jobs 2]

Grades COPIES copies of dp_basics' bundled examples (reference, blank, partial) as a class with
`batch(..., backend="local")` and with `batch(..., backend="ray")` on one local Ray instance
(loopback only, started once), and a class of one copy each way; the marginal seconds of one
more submission are (class - one copy) / (submissions - 3), so the start-up of workers (and of
Ray's actors) cancels out. Prints both, their ratio (target: Ray within 1.3x of local), whether
every submission got the same score under the same protections both ways, and what Ray's
processes listened on during the Ray batch (`ss -ltn`, filtered to their pids, and /proc).
Rounds alternate local and Ray; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from demo import build_examples  # noqa: E402 - the bundled submissions, as `make demo` has them

from autograder.batch import ray_workers as batch_ray  # noqa: E402
from autograder.batch.driver import batch  # noqa: E402
from autograder.batch.listeners import descendants, listeners  # noqa: E402


def make_class(folder: Path, copies: int) -> Path:
    examples = build_examples(folder / "examples", "dp_basics")
    for copy in range(copies):
        for example in examples:
            shutil.copytree(example, folder / "class" / f"{example.name}-{copy:03d}")
    return folder / "class"


def one_copy(folder: Path, full: Path) -> Path:
    for student in sorted(full.glob("*-000")):  # one reference, one blank, one partial
        shutil.copytree(student, folder / student.name)
    return folder


def timed_batch(submissions: Path, out: Path, backend: str, jobs: int) -> float:
    started = time.perf_counter()
    summary = batch(submissions, "dp_basics", out, jobs=jobs, backend=backend, progress=False)
    seconds = time.perf_counter() - started
    if summary.failed:
        sys.exit(f"{backend}: {summary.failed} grader error(s): {summary.line()}")
    return seconds


def grading_seconds(out: Path) -> float:
    """The median time a worker spent grading one submission (the gradebook's `seconds`),
    without the queueing and dispatch around it."""
    with sqlite3.connect(out / "gradebook.sqlite") as db:
        return statistics.median(row[0] for row in db.execute("SELECT seconds FROM runs"))


def scores(out: Path) -> dict[str, tuple]:
    found = {}
    for report in (out / "reports").rglob("report.json"):
        data = json.loads(report.read_text())
        found[report.parent.name] = (data["score"], tuple(data["environment"]["protections"]))
    return found


class Listening:
    """Samples `ss -ltnp` while a Ray batch runs: every address Ray's processes listen on."""

    def __init__(self) -> None:
        self.ss: set[str] = set()
        self.proc: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            pids = descendants(os.getpid())
            self.proc |= {f"{s.process} {s.address}" for s in listeners(pids)}
            if shutil.which("ss"):
                table = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
                self.ss |= {line.split()[3].rsplit(":", 1)[0] for line in table.splitlines()
                            if any(f"pid={pid}," in line for pid in pids)}
            self.stop.wait(1.0)

    def __enter__(self) -> Listening:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    full = make_class(work, args.copies)
    small = one_copy(work / "one", full)
    n = len(list(full.iterdir()))
    ray = batch_ray._import_ray()
    started = time.perf_counter()
    # Loopback only and a token required: start_local checks both.
    instance = batch_ray.start_local(ray, args.jobs, include_dashboard=False,
                                     log_to_driver=False, logging_level="ERROR")
    print(f"local Ray instance started in {time.perf_counter() - started:.1f} s", flush=True)
    marginals: dict[str, list[float]] = {"local": [], "ray": []}
    listening = Listening()
    try:
        for round_ in range(args.rounds):
            for backend in ("local", "ray"):
                out = work / f"{backend}-{round_}"
                if backend == "ray" and round_ == 0:
                    with listening:  # Ray's actors start, their runner servers, sandboxes
                        big = timed_batch(full, out / "class", backend, args.jobs)
                else:
                    big = timed_batch(full, out / "class", backend, args.jobs)
                one = timed_batch(small, out / "one", backend, args.jobs)
                marginals[backend].append((big - one) / (n - 3))
                print(f"round {round_ + 1} {backend:5}: {n} submissions {big:6.1f} s, "
                      f"3 submissions {one:5.1f} s, marginal {marginals[backend][-1]:.2f} s; "
                      f"grading one takes {grading_seconds(out / 'class'):.2f} s (median)",
                      flush=True)
            a, b = scores(work / f"local-{round_}" / "class"), scores(work / f"ray-{round_}"
                                                                    / "class")
            bad = [name for name in sorted(set(a) | set(b)) if a.get(name, (0, 1))[1] !=
                   b.get(name, (0, 2))[1] or (not name.startswith("partial") and a[name][0] !=
                                              b[name][0])]
            if bad:
                print(f"MISMATCH between local and Ray: {', '.join(bad)}")
                return 1
    finally:
        instance.stop(ray)
    local, on_ray = (statistics.median(marginals[k]) for k in ("local", "ray"))
    print(f"\n{n} submissions ({args.copies} copies of reference, blank, partial), --jobs "
          f"{args.jobs}, median of {args.rounds} round(s); load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores:")
    print(f"  local warm workers: {local:.2f} s per additional submission")
    print(f"  Ray actors:         {on_ray:.2f} s per additional submission")
    print(f"  ratio Ray/local: {on_ray / local:.2f}x   (target: at most 1.3x)")
    print("  scores (reference, blank) and protections: identical both ways")
    outside = sorted(a for a in listening.ss if not a.startswith(("127.", "[::ffff:127.",
                                                                  "[::1]")))
    print(f"  ss -ltn during a Ray batch, Ray's processes: {sorted(listening.ss)}"
          f" -> {'none' if not outside else outside} outside 127.0.0.0/8")
    print(f"  /proc, the same processes: {len(listening.proc)} listeners, "
          f"{sorted({entry.split()[1] for entry in listening.proc})}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if not outside else 1


if __name__ == "__main__":
    sys.exit(main())
