"""How often gloo rank scenarios fail on their own: the evidence behind run_ranks' retry policy.

    .venv/bin/python bench/rank_flakes.py [--runs 100] [--ranks 2] [--parallel 1]

Runs the reference solution's multi-process scenarios of dp_basics (setup_ddp, wrap_ddp,
ddp_train_step, cleanup_ddp: real gloo ranks on CPU, in the real sandbox) RUNS times each with no
retry, and counts what happened to each: passed, crashed (a rank died: gloo's teardown, mostly),
or timed out (no answer within 30 s), with the time one scenario took (median, p99, max).
With --parallel N, N more scenarios run at the same time in other sandboxes, as in a batch with
N + 1 jobs on this machine. `pytest_plugin.RANK_HANG_RETRIES` and `rank_retries` are set from this.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT))
from autograder.project.assignment import load_assignment  # noqa: E402
from autograder.project.config import default_limits  # noqa: E402
from autograder.project.markers import reference  # noqa: E402
from autograder.project.paths import Project  # noqa: E402
from autograder.runner.stores import TcpStores  # noqa: E402
from autograder.sandbox.client import Sandbox, SandboxFailure, SandboxTimeout, Starts  # noqa: E402
from autograder.sandbox.folder import prepare_sandbox_dir  # noqa: E402

sys.path.insert(0, str(ROOT / "assignments" / "dp_basics"))
import torch  # noqa: E402

import probes  # noqa: E402


def scenarios() -> dict[str, tuple]:
    """name -> (probe, args, per-rank arguments for 2 ranks); as the hidden tests call them."""
    model = probes.PlainMLP()
    batches = [(torch.randn(3, 4), torch.randn(3, 1)) for _ in range(2)]
    return {
        "setup_ddp": ("setup_ranks", ({"backend": "gloo"},), [1.0, 2.0]),
        "wrap_ddp": ("ddp_gradients", (model, None), [("cpu", b) for b in batches]),
        "ddp_train_step": ("ddp_steps", (model, 0.05), [[b] for b in batches]),
        "cleanup_ddp": ("cleanup_ranks", (0,), [1.0, 2.0]),
    }


def sandbox(folder: Path) -> Sandbox:
    assignment = load_assignment("dp_basics", Project.find())
    module = folder / "dp_basics.py"
    module.write_text(reference(assignment.solution.read_text()))
    box = prepare_sandbox_dir(module, "dp_basics", assignment.probes, folder)
    limits = default_limits(Project.find().schemas, call_timeout=30)
    return Sandbox(box, "dp_basics", limits, folder / "out.log",
                   starts=Starts(stores=TcpStores()))


def run(folder: Path, runs: int, outcomes: dict, durations: dict, stop: threading.Event | None,
        world_size: int) -> None:
    box = sandbox(folder)
    cases = scenarios()
    try:
        for _ in range(runs):
            for name, (probe, args, per_rank) in cases.items():
                if stop is not None and stop.is_set():
                    return
                if name == "cleanup_ddp":
                    from autograder.sandbox.processes import free_port
                    args = (free_port(),)
                ranks = (per_rank * world_size)[:world_size]
                started = time.perf_counter()
                outcome = "passed"
                try:
                    box.run_ranks(probe, world_size, args, 30.0, folder, name, per_rank=ranks)
                except SandboxTimeout:
                    outcome = "timed out"
                except SandboxFailure as exc:
                    outcome = f"crashed: {str(exc)[:80]}"
                if stop is None:
                    outcomes[name][outcome] += 1
                    durations[name].append(time.perf_counter() - started)
    finally:
        box.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ranks-"))
    outcomes = {name: Counter() for name in scenarios()}
    durations = {name: [] for name in scenarios()}
    stop = threading.Event()
    noise = [threading.Thread(target=run, args=(work / f"noise{i}", 10 ** 6, {}, {}, stop,
                                                args.ranks), daemon=True)
             for i in range(args.parallel)]
    for i, thread in enumerate(noise):
        (work / f"noise{i}").mkdir()
        thread.start()
    (work / "main").mkdir()
    try:
        run(work / "main", args.runs, outcomes, durations, None, args.ranks)
    finally:
        stop.set()
        for thread in noise:
            thread.join(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.runs} runs of each scenario, {args.ranks} ranks, {args.parallel} more at once:")
    for name in outcomes:
        times = sorted(durations[name])
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"  {name:<15} {dict(outcomes[name])}  median {statistics.median(times):.2f} s, "
              f"p99 {p99:.2f} s, max {times[-1]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
