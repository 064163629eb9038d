"""Where a warm grading's time goes: one batch worker's view, submission after submission.

    .venv/bin/python bench/profile_warm.py [--rounds 3] [--assignment dp_basics ...]
        [--examples reference blank partial] [--warmup 1] [--json OUT] [--cprofile]

Starts a warm runner server as a batch worker does (bench/_timed_runners.py: the same server,
its runners' sandbox client timed), grades each assignment's bundled examples (reference, blank,
partial) ROUNDS times each with `grade_loaded`, and splits every grading three ways:

- the trusted side's own work: reading the upload and answers, what precedes the runner, the
  runner's start and collection (from the runner's typed events, read with runner_events.parse
  as the supervisor reads them), what follows it, building the report, writing the results;
- the hidden tests by kind: plain, simulated GPUs (or CUDA hidden), rank scenarios (a test's
  kind as its runner saw it in any grading: a rank scenario run, a worker simulating GPUs),
  each with what of it went to sandbox starts (zygotes, forks, imports);
- the sandbox's starts and stops over the whole grading: zygote starts, workers forked and
  imported, rank workers forked, workers stopped, rank scenarios.

CPU seconds of the parent, of the runner and of everything the server reaped (runners,
zygotes and their workers) too. Medians over the rounds; with --json, every value. With
--cprofile, the parent's hottest functions.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _timed_runners import Span, read_spans
from common import ROOT

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from demo import build_examples  # noqa: E402

from autograder.grading import grade as grading  # noqa: E402
from autograder.grading import supervisor  # noqa: E402
from autograder.grading.results import Report  # noqa: E402
from autograder.project.assignment import load_assignment  # noqa: E402
from autograder.project.paths import Project  # noqa: E402
from autograder.protocol.fork_channel import RunnerServer  # noqa: E402
from autograder.protocol.runner_events import (  # noqa: E402
    Collected,
    Done,
    Environment,
    Event,
    Result,
    parse,
)

ASSIGNMENTS = ("dp_basics", "ddp_training")
EXAMPLES = ("reference", "blank", "partial")
KINDS = ("plain", "simulated", "ranks")
COUNTED = "counted"  # suffix of a phase's count (shown beside it, never checked for 0)


class TimedRunners(RunnerServer):
    """A RunnerServer whose server is bench/_timed_runners.py: its runners write Spans."""

    def __init__(self, records: Path, profiles: Path | None = None) -> None:
        super().__init__([sys.executable, str(Path(__file__).with_name("_timed_runners.py")),
                          str(records), str(profiles or "")])

    def wait_ready(self, records: Path, timeout: float = 60.0) -> None:
        """Wait until the server has imported what its runners use (its "ready" span)."""
        deadline = time.monotonic() + timeout
        while not any(s.kind == "ready" for s in read_spans(records)):
            if time.monotonic() > deadline or self.process.poll() is not None:
                sys.exit("the warm runner server did not start")
            time.sleep(0.05)

    def reaped_cpu(self) -> float:
        """CPU seconds of the server's children it has reaped (runners, zygotes, workers)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")

    def settle(self, timeout: float = 5.0) -> None:
        """Wait until the server has reaped every child of the last grading."""
        deadline = time.monotonic() + timeout
        tasks = Path(f"/proc/{self.process.pid}/task")
        while time.monotonic() < deadline:
            try:
                if not any((task / "children").read_text().strip() for task in tasks.iterdir()):
                    return
            except OSError:  # (no /proc/PID/task/TID/children here: a fixed wait instead)
                time.sleep(0.5)
                return
            time.sleep(0.02)


@dataclass
class Timeline:
    """What the trusted parent did during one grading, on time.monotonic: each runner event as
    the supervisor parsed it, and the spans of the parent's own steps."""

    events: list[tuple[float, Event]] = field(default_factory=list)
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))

    def clear(self) -> None:
        self.events.clear()
        self.spans.clear()

    def first(self, cls: type[Event]) -> float | None:
        return next((t for t, e in self.events if isinstance(e, cls)), None)

    def last(self, cls: type[Event]) -> float | None:
        return next((t for t, e in reversed(self.events) if isinstance(e, cls)), None)

    def seconds(self, *names: str) -> float:
        return sum(end - start for name in names for start, end in self.spans[name])

    def began(self, name: str) -> float | None:
        return self.spans[name][0][0] if self.spans[name] else None

    def ended(self, name: str) -> float | None:
        return self.spans[name][-1][1] if self.spans[name] else None


def watch(timeline: Timeline) -> None:
    """Time the parent's steps and the runner's events, in this process only, by wrapping the
    names the grading modules call (the code itself is unchanged)."""

    def wrap(module: Any, name: str) -> None:
        original = getattr(module, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                timeline.spans[name].append((start, time.monotonic()))

        setattr(module, name, timed)

    for name in ("_submission_files", "grade_answers", "run_hidden_tests", "internal_names",
                 "coding_results", "build_report", "apply_late", "keep_sandbox_events",
                 "write_outputs"):
        wrap(grading, name)
    wrap(supervisor, "_start_runner")

    def parsed(line: str | bytes) -> Event:
        event = parse(line)  # the supervisor's own parser, unchanged
        timeline.events.append((time.monotonic(), event))
        return event

    supervisor.parse = parsed


def test_kinds(spans: Iterable[Span], specs: Iterable) -> dict[str, str]:
    """Each test's kind: 'ranks' if it ran a rank scenario, 'simulated' if a worker of it
    simulated GPUs or hid CUDA (in any grading), else 'plain' (GPU tests, skipped without a
    GPU, are 'plain' too)."""
    kind = {spec.nodeid: "plain" for spec in specs}
    for span in spans:
        if span.kind == "ranks":
            kind[span.test] = "ranks"
        elif span.kind in ("call", "serve_start") and span.gpus and kind.get(span.test) != "ranks":
            kind[span.test] = "simulated"
    return kind


@dataclass
class Grading:
    """One grading's raw measurements."""

    total: float
    timeline: Timeline
    spans: list[Span]
    parent_cpu: float
    reaped_cpu: float


def _within(span: Span, outer: list[Span]) -> bool:
    return any(o is not span and o.start <= span.start and span.end <= o.end for o in outer)


def phases(g: Grading, kind_of: dict[str, str]) -> dict[str, float]:
    """The grading split into phases (seconds; CPU seconds; `... counted`: how many)."""
    t, p = g.timeline, {}

    def spans(kind: str, keep: Callable[[Span], bool] = lambda s: True) -> list[Span]:
        return [s for s in g.spans if s.kind == kind and keep(s)]

    def inside(outer: list[Span], kind: str) -> float:
        return sum(s.seconds for s in spans(kind) if _within(s, outer))

    zygotes, serve_starts, ranks = spans("zygote"), spans("serve_start"), spans("ranks")
    asked, environment = t.began("_start_runner"), t.first(Environment)
    collected, done = t.first(Collected), t.first(Done)
    results = [(time_, e) for time_, e in t.events if isinstance(e, Result)]
    last_result = results[-1][0] if results else collected
    p["parent: read upload + answers"] = t.seconds("_submission_files", "grade_answers")
    p["parent: before runner (sandbox folder, job)"] = asked - t.began("run_hidden_tests")
    p["runner: start (fork to first event)"] = environment - asked
    p["runner: collection (to collected)"] = collected - environment
    for kind in (k for k in KINDS if k in kind_of.values()):  # the suite's kinds only
        mine = [e for _, e in results if kind_of.get(e.nodeid) == kind]
        tests = {e.nodeid for e in mine}
        p[f"tests: {kind}"] = sum(e.duration for e in mine)
        p[f"tests: {kind} {COUNTED}"] = len(mine)
        # A serving worker's start holds its fork and any zygote started for it.
        p[f"  {kind}: of which sandbox starts"] = sum(
            s.seconds for s in g.spans
            if s.test in tests and (s.kind == "serve_start"
                                    or (s.kind == "fork" and s.mode == "rank")
                                    or (s.kind == "zygote" and not _within(s, serve_starts))))
    p["runner: end (last result to done)"] = done - last_result
    p["parent: after runner (stop sandboxes, reap)"] = t.ended("run_hidden_tests") - done
    p["parent: report building"] = t.seconds("internal_names", "coding_results",
                                             "build_report", "apply_late")
    # keep_sandbox_events, the work folder's removal, the report's files
    p["parent: results writing"] = t.ended("_total") - t.ended("apply_late")
    p["total"] = g.total

    first_forks = spans("fork", lambda s: s.first)
    serve_forks = spans("fork", lambda s: s.mode == "serve" and not s.first)
    rank_forks = spans("fork", lambda s: s.mode == "rank" and not s.first)
    kills, strays = spans("kill"), spans("strays")  # (disjoint: a stray is killed by pid)
    rows = (
        ("zygote starts (and first fork)", zygotes,
         sum(s.seconds for s in zygotes + first_forks) - inside(zygotes, "fork")),
        ("serve worker forks", serve_forks, sum(s.seconds for s in serve_forks)),
        ("serve worker imports", serve_starts,
         sum(s.seconds for s in serve_starts) - inside(serve_starts, "fork")
         - inside(serve_starts, "zygote")),
        ("rank worker forks", rank_forks, sum(s.seconds for s in rank_forks)),
        ("rank scenarios (imports, work)", ranks,
         sum(s.seconds for s in ranks) - inside(ranks, "fork") - inside(ranks, "zygote")
         - inside(ranks, "stores") - inside(ranks, "kill") - inside(ranks, "strays")),
        ("workers killed (signalled, reaped)", kills, sum(s.seconds for s in kills)),
        ("scans for strays (process table)", strays, sum(s.seconds for s in strays)),
    )
    for name, counted, seconds in rows:
        p[f"sandbox: {name}"] = seconds
        p[f"sandbox: {name} {COUNTED}"] = len(counted)
    p["CPU: trusted parent"] = g.parent_cpu
    p["CPU: runner"] = sum(s.cpu for s in spans("runner"))
    p["CPU: all the server reaped"] = g.reaped_cpu
    return p


def unbroken(report: Report, example: str, what: str) -> None:
    """Refuse to time a grading the grader failed in, or the reference losing points (the
    bench's own wrappers, most likely: the checks then end early or wait out their time
    limits, and the times would mislead)."""
    for test in report.tests:
        if test.cause == "grader_error":
            why = "the grader failed"
        elif example == "reference" and test.score < test.max_score:
            why = "the reference lost points"
        else:
            continue
        raise SystemExit(f"{what}: {why}, so nothing is measured: {test.name}: "
                         f"{test.message[:300]}")


def grade_rounds(assignment_name: str, runners: TimedRunners, records: Path, work: Path,
                 timeline: Timeline, examples: list[str], rounds: int, warmup: int,
                 profiler: cProfile.Profile | None) -> dict[str, list[dict[str, float]]]:
    """Grade each example `rounds` times (after `warmup` uncounted gradings of the first)."""
    folder = work / assignment_name
    built = {p.name: p for p in build_examples(folder / "examples", assignment_name)}
    assignment = load_assignment(assignment_name, Project.find())
    gradings: dict[str, list[Grading]] = defaultdict(list)
    for i in range(warmup):  # file caches, the server's first forks
        unbroken(grading.grade_loaded(built[examples[0]], assignment, folder / f"warm-{i}",
                                      runners=runners), examples[0], f"{assignment_name} warm-up")
        runners.settle()
    specs: dict[str, Any] = {}
    for round_ in range(rounds):
        for name in examples:
            timeline.clear()
            records.unlink(missing_ok=True)
            cpu0, reaped0 = sum(os.times()[:2]), runners.reaped_cpu()
            started = time.monotonic()
            if profiler:
                profiler.enable()
            report = grading.grade_loaded(built[name], assignment,
                                          folder / f"out-{round_}-{name}", runners=runners)
            if profiler:
                profiler.disable()
            ended = time.monotonic()
            unbroken(report, name, f"{assignment_name} {name}")
            timeline.spans["_total"].append((started, ended))
            cpu = sum(os.times()[:2]) - cpu0
            runners.settle()  # (not timed) so that the grading's processes are all reaped
            saved = Timeline(list(timeline.events), defaultdict(list, timeline.spans))
            gradings[name].append(Grading(ended - started, saved, read_spans(records), cpu,
                                          runners.reaped_cpu() - reaped0))
            for _, event in saved.events:
                if isinstance(event, Collected):
                    specs.update({spec.nodeid: spec for spec in event.tests})
    kind_of = test_kinds((s for gs in gradings.values() for g in gs for s in g.spans),
                         specs.values())
    return {name: [phases(g, kind_of) for g in gs] for name, gs in gradings.items()}


def table(assignment: str, measured: dict[str, list[dict[str, float]]], rounds: int) -> str:
    names = list(measured)
    lines = [f"== {assignment}: median of {rounds} warm grading(s) each, seconds "
             f"(count in brackets)", f"{'phase':<44}" + "".join(f"{n:>14}" for n in names)]
    for phase in measured[names[0]][0]:
        if phase.endswith(COUNTED):
            continue
        cells = []
        for name in names:
            value = statistics.median(r[phase] for r in measured[name])
            count = f"{phase} {COUNTED}"
            shown = f"{value:.3f}"
            if count in measured[name][0]:
                shown += f" ({statistics.median(r[count] for r in measured[name]):g})"
            cells.append(f"{shown:>14}")
        lines.append(f"{phase:<44}" + "".join(cells))
    for name in names:  # what the phases leave out (small steps between them)
        parts = [sum(v for k, v in r.items() if k.startswith(("parent:", "runner:", "tests:"))
                     and not k.endswith(COUNTED)) / r["total"] for r in measured[name]]
        lines.append(f"phases / total, {name}: {statistics.median(parts):.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--assignment", nargs="+", default=list(ASSIGNMENTS))
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=EXAMPLES)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted gradings first")
    parser.add_argument("--json", type=Path, help="write every measured value here")
    parser.add_argument("--cprofile", action="store_true",
                        help="the trusted parent's hottest functions")
    parser.add_argument("--cprofile-runner", action="store_true",
                        help="the runners' hottest functions (their pytest sessions)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    records = work / "spans.jsonl"
    timeline = Timeline()
    watch(timeline)
    profiler = cProfile.Profile() if args.cprofile else None
    profiles = work / "profiles" if args.cprofile_runner else None
    if profiles:
        profiles.mkdir()
    runners = TimedRunners(records, profiles)  # as a batch worker's Worker starts its server
    runners.wait_ready(records)  # its imports: a batch worker starts it before grading
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    measured = {}
    try:
        for name in args.assignment:
            measured[name] = grade_rounds(name, runners, records, work, timeline, args.examples,
                                          args.rounds, args.warmup, profiler)
            print(table(name, measured[name], args.rounds), "\n", flush=True)
        print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
        if args.json:
            args.json.write_text(json.dumps(measured, indent=1))
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        if profiles:  # every runner's, the warm-up's included
            print("runners' pytest sessions, all gradings together:")
            pstats.Stats(*map(str, profiles.glob("*.prof"))).sort_stats("tottime") \
                .print_stats(40)
    finally:
        runners.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
