"""The trusted runner: runs an assignment's hidden pytest suite against one submission's sandbox.

Started by `autograder.grading.grade` as `python -m autograder.runner.suite RESULTS_FD` with a
`Job` as JSON on
stdin; streams one JSON line per event to RESULTS_FD. It never imports student code: tests reach it
only through the sandbox behind the `student` fixture.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from autograder.protocol.job import Job
from autograder.protocol.runner_events import Done, Environment, Error
from autograder.runner.gpus import GraderGpus, hide_from_runner
from autograder.runner.pytest_plugin import GradingPlugin, write_line
from autograder.sandbox.client import ZygoteSource
from autograder.sandbox.isolation import Isolation, IsolationUnavailable, detect

# What the runner may use beyond its size once pytest and torch are imported. A reply is at
# most 96 MiB and decodes to a few times that at most (see codec.loads and codec._tensor), so
# honest grading never comes near; a hostile reply that did would fail its test with
# MemoryError ("the result was too large to check", see pytest_plugin.describe_failure)
# instead of taking the machine's memory, or the runner, down with it.
MEMORY_HEADROOM = 3 << 30


def limit_memory(headroom: int = MEMORY_HEADROOM) -> int | None:
    """Cap this runner's address space (RLIMIT_AS, soft only, so that sandboxes it starts may
    set their own); the limit set, or None when its size cannot be read. On a GPU grader too:
    the runner never starts CUDA (runner.gpus), whose mappings no such limit would hold."""
    import resource

    try:
        status = Path("/proc/self/status").read_text()
        size = int(status.split("VmSize:", 1)[1].split()[0]) * 1024
    except (OSError, IndexError, ValueError):
        return None
    limit = size + headroom
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def preload() -> None:
    """Import what every runner uses, before it forks anything: once for all runners in a warm
    server (runner.warm), at the start in a cold one (`run`), so that what a runner forks does
    not import it again. (torch._dynamo, seconds of CPU, only where it is needed: the warm
    server for its zygotes, a runner before it forks observers, `observe`.)"""
    import importlib
    import pdb  # noqa: F401 - what pytest's debugging plugin imports in every session

    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    from _pytest.config import default_plugins

    for name in default_plugins:  # loaded by every runner's session (0.08 s a grading)
        importlib.import_module(f"_pytest.{name}")


def run(job: Job, results_fd: int, zygotes: ZygoteSource | None = None) -> int:
    """Run the hidden suite of `job`, streaming events to `results_fd`; `zygotes`: a warm
    runner server's channel for sandbox zygotes (None: started cold)."""
    import torch

    preload()  # (a warm server's runner has it all already)

    gpus = hide_from_runner()  # first: nothing before it may touch CUDA
    torch.set_num_threads(1)  # little math here; each thread would take address space too
    _no_lazy_seeding(torch)
    limit_memory()
    emit = write_line(results_fd)
    try:
        isolation = detect()  # proven by the parent too; a runner that cannot, grades nothing
    except IsolationUnavailable as exc:
        emit(Error(message=str(exc)))
        return 0
    emit(Environment(environment=environment(isolation, gpus)))
    sys.path.insert(0, job.assignment_dir)  # hidden tests import the assignment's probes.py
    ini = Path(job.output_dir) / "pytest.ini"
    ini.write_text("[pytest]\n")  # ignore any project or submission configuration
    # No third-party pytest plugins (what happens to be installed must not change grading;
    # loading them took ~0.1 s a grading), no gc.collect() at the end (unraisableexception),
    # no log capture: student code logs in its sandbox, where no handler of this process sees
    # it, and attaching handlers to torch's ~50 loggers around every phase of every test took
    # ~0.1 s a grading.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # --confcutdir: conftest.py files above the hidden tests' folder (a course repository's own
    # tests/conftest.py, say) are not the suite's: without it pytest loads every one of them.
    args = [job.tests_dir, "-c", str(ini), "--rootdir", job.tests_dir,
            "--confcutdir", job.tests_dir, "-q", "-p",
            "no:cacheprovider", "-p", "no:unraisableexception", "-p", "no:logging",
            "--strict-markers",
            "--import-mode=importlib", "-W", "ignore::DeprecationWarning"]
    if not job.tracebacks:  # only an instructor keeping the work folder reads runner.log
        args.append("--tb=line")
    code = pytest.main(args, plugins=[GradingPlugin(job, emit, zygotes, gpus)])
    emit(Done(exit_code=int(code)))
    return 0


def _no_lazy_seeding(torch: Any) -> None:
    """torch.manual_seed also seeds every CUDA, XPU and MTIA device; where such devices are
    not available, it queues the seeding for when they start, and captures the Python stack
    with each (their `_lazy_call`): about 2 ms a call at a test's depth, with the plugin
    seeding every test and tests seeding too, 0.3 s a grading. Those devices never start in
    such a runner: nothing is lost."""
    for name in ("cuda", "xpu", "mtia"):
        backend = getattr(torch, name, None)  # (a build may lack one)
        if backend is not None and not backend.is_available():
            backend.manual_seed_all = lambda seed: None


def environment(isolation: Isolation, gpus: GraderGpus) -> dict:
    """Where grading runs, for the report."""
    import platform

    import torch

    return {"gpus": gpus.count, "torch": torch.__version__,
            "python": platform.python_version(), "isolation": isolation.mode,
            "protections": isolation.protections}


def main() -> None:
    # Not dumpable: a same-user process (a sandbox without isolation) cannot read this process's
    # memory, environment or file descriptors through /proc.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    os.umask(0o077)  # its logs (pytest's output) readable by the grader's user alone
    job = Job(**json.load(sys.stdin))
    sys.exit(run(job, int(sys.argv[1])))


if __name__ == "__main__":
    main()
