"""Where a warm grading's time goes: one batch worker's view, submission after submission.

    .venv/bin/python bench/profile_warm.py [--rounds 3] [--cprofile]

Starts a warm runner server as a batch worker does, grades the bundled examples (reference,
blank, partial) ROUNDS times each with `grade_loaded`, and splits each grading into phases from
the runner's event stream: runner start (fork to its first event), collection of the hidden
tests, the tests themselves (rank scenarios, simulated-GPU tests and plain ones apart), the
runner's end, and the trusted parent's own work (reading the upload and answers, building and
writing the reports). CPU seconds of the parent and of its children are shown too. With
--cprofile, the parent's hottest functions.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from demo import build_examples  # noqa: E402

from autograder.grading import supervisor as coding  # noqa: E402
from autograder.grading.fork_channel import RunnerServer  # noqa: E402
from autograder.grading.grade import grade_loaded  # noqa: E402
from autograder.project.assignment import load_assignment  # noqa: E402

HIDDEN = ROOT / "assignments" / "dp_basics" / "tests" / "hidden"


def kinds() -> dict[str, str]:
    """Test name -> 'ranks', 'simulated' or 'plain', from the hidden tests' source."""
    found = {}
    for path in HIDDEN.glob("test_*.py"):
        for match in re.finditer(r"\ndef (test_\w+)\(.*?(?=\n(?:@|def )|\Z)", path.read_text(),
                                 re.S):
            body = match.group(0)
            kind = "ranks" if "run_ranks" in body else "simulated" if "simulated(" in body \
                else "plain"
            found[match.group(1)] = kind
    return found


class Timeline:
    """Patches the supervisor's event reading to timestamp every runner event."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict]] = []
        original = json.loads
        timeline = self

        def loads(text, *args, **kwargs):
            value = original(text, *args, **kwargs)
            if type(value) is dict and "event" in value:
                timeline.events.append((time.perf_counter(), value))
            return value

        coding.json = type("J", (), {"loads": staticmethod(loads),
                                     "dumps": staticmethod(json.dumps)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    examples = build_examples(work / "examples", "dp_basics")
    assignment = load_assignment("dp_basics")
    runners = RunnerServer()  # as a batch worker's warm_up starts it
    time.sleep(3)  # the server's imports
    timeline = Timeline()
    kind_of = kinds()
    phases: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    profiler = cProfile.Profile() if args.cprofile else None
    # one warm-up grading (file caches), not counted
    grade_loaded(examples[0], assignment, work / "warm", runners=runners)
    for round_ in range(args.rounds):
        for example in examples:
            timeline.events.clear()
            cpu0, children0 = os.times()[:2], os.times()[2:4]
            started = time.perf_counter()
            if profiler:
                profiler.enable()
            grade_loaded(example, assignment, work / f"out-{round_}-{example.name}",
                         runners=runners)
            if profiler:
                profiler.disable()
            ended = time.perf_counter()
            cpu1, children1 = os.times()[:2], os.times()[2:4]
            events = timeline.events
            first = events[0][0] if events else ended
            collected = next((t for t, e in events if e["event"] == "collected"), first)
            done = next((t for t, e in events if e["event"] == "done"), ended)
            p = phases[example.name]
            p["total"].append(ended - started)
            p["parent before runner"].append(first - started)
            p["runner start + collection"].append(collected - first)
            last = collected
            per_kind: dict[str, float] = defaultdict(float)
            for t, e in events:
                if e["event"] == "result":
                    test = e["nodeid"].rsplit("::", 1)[-1]
                    per_kind[kind_of.get(test, "plain")] += t - last
                    last = t
            for kind in ("plain", "simulated", "ranks"):
                p[f"tests: {kind}"].append(per_kind[kind])
            p["runner end"].append(done - last)
            p["after runner (kill, reports)"].append(ended - done)
            p["parent CPU"].append(sum(cpu1) - sum(cpu0))
            p["children CPU (reaped)"].append(sum(children1) - sum(children0))
    print(f"median of {args.rounds} warm gradings each, seconds:\n")
    names = [e.name for e in examples]
    print(f"{'phase':<30}" + "".join(f"{n:>11}" for n in names))
    for phase in phases[names[0]]:
        print(f"{phase:<30}" + "".join(f"{statistics.median(phases[n][phase]):11.3f}"
                                      for n in names))
    if profiler:
        print()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    runners.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
