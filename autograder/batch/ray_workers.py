"""The Ray backend of `autograder batch`: `run_ray(tasks, jobs, address, needs_gpu)`.

Each submission is one Ray task calling `autograder.batch.worker.grade_task` on some node of the
cluster; outcomes are yielded as tasks finish, at most `jobs` of them in flight.

- `address=None` starts a private local Ray instance sized to `jobs` CPUs (dashboard off, usage
  stats off, Ray's logging quiet) and shuts it down afterwards; an address (`"auto"`,
  `"HOST:6379"`, `"ray://HOST:10001"`) joins an existing cluster, which is left running. A Ray
  instance already initialised in this process is used as it is.
- GPU-aware scheduling: when the assignment has GPU-marked hidden tests (`needs_gpu`) and the
  cluster has GPUs, each task asks for one GPU, so submissions are graded only on GPU nodes, one
  job per GPU, with `CUDA_VISIBLE_DEVICES` set by Ray. Otherwise tasks ask for none and the
  assignment's GPU policy (reweight or pending) deals with the GPU tests. `GradeOutcome.worker`
  names the host, the Ray node and the GPU ids the task was given.
- A task whose worker dies (killed for memory, crashed) is retried once, then becomes an outcome
  with `error` set; the batch goes on. Ctrl-C cancels the tasks in flight and re-raises.

On a real cluster every worker node needs what `autograder grade` needs, at the same paths:
  * this package, its dependencies and Ray (the same version as the driver) importable by the
    Python that runs Ray's workers: the image from docker/Dockerfile.gpu with its
    `pip install .` changed to `pip install '.[ray]'`, or a `runtime_env` given to `ray.init` /
    `ray job submit` (e.g. `{"py_modules": [autograder], "pip": [...]}`). The remote function
    is sent by reference (`autograder.batch.ray_workers._grade_remote`), not by value;
  * the assignment (grading.yml, hidden tests, bank: `AUTOGRADER_ROOT`), the submissions and the
    output folder on a shared file system, since tasks carry paths: a worker reads the submission
    from `task.submission` and writes the reports to `task.out` on its own node. (The report's
    content also comes back in the outcome, so the gradebook is right either way.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from autograder.batch.records import GradeOutcome, GradeTask


def run_ray(tasks: list[GradeTask], jobs: int, address: str | None = None,
            needs_gpu: bool = False) -> Iterator[GradeOutcome]:
    """Grade `tasks` on Ray, yielding each outcome as its task finishes (in completion order)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    if not tasks:
        return
    ray = _import_ray()
    started_here = _connect(ray, address, jobs)
    try:
        remote = _remote(ray, _grade_remote, gpus_per_task(needs_gpu, ray.cluster_resources()))
        yield from _collect(ray, tasks, jobs, remote)
    finally:
        if started_here:
            ray.shutdown()


def gpus_per_task(needs_gpu: bool, cluster_resources: dict[str, float]) -> int:
    """One GPU per grading job when the assignment has GPU tests and the cluster has a GPU."""
    return 1 if needs_gpu and cluster_resources.get("GPU", 0) >= 1 else 0


def _remote(ray: Any, function: Any, gpus: int) -> Any:
    """`function` as a Ray task of one grading job: one CPU, `gpus` GPUs."""
    # A worker that dies (OOM killer, segfault) is retried once; an exception raised inside the
    # task is not (grade_task never raises: its errors are in the outcome).
    return ray.remote(function).options(num_cpus=1, num_gpus=gpus, max_retries=1,
                                        retry_exceptions=False)


def _import_ray() -> Any:
    # Set before Ray starts: the raylet and workers we launch inherit it.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        import ray
    except ImportError as exc:
        raise ImportError("the ray backend needs Ray: pip install 'autograder[ray]'") from exc
    return ray


def _connect(ray: Any, address: str | None, jobs: int) -> bool:
    """Join the cluster at `address`, or start a local instance; True when we started one."""
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        try:
            ray.init(num_cpus=jobs, **quiet)
        except BaseException:
            ray.shutdown()  # Ctrl-C while it was starting: stop the processes already started
            raise
        return True
    ray.init(address=address, **quiet)
    return False


def _collect(ray: Any, tasks: list[GradeTask], jobs: int, remote: Any) -> Iterator[GradeOutcome]:
    """Keep at most `jobs` tasks of `remote` in flight; yield each outcome as it arrives."""
    waiting = list(reversed(tasks))
    in_flight: dict[Any, tuple[GradeTask, float]] = {}
    try:
        while waiting or in_flight:
            while waiting and len(in_flight) < jobs:
                task = waiting.pop()
                in_flight[remote.remote(task.to_json())] = (task, time.monotonic())
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            task, submitted = in_flight.pop(ref)
            yield _outcome(ray, ref, task, submitted)
    except BaseException:
        # Ctrl-C (or the caller closing us): stop what is in flight. A plain cancel raises
        # KeyboardInterrupt inside the task, so grading's own clean-up kills its runner and
        # sandboxes (force=True would kill the worker and leave them running).
        for ref in in_flight:
            with contextlib.suppress(Exception):  # never hide why we stopped
                ray.cancel(ref)
        raise


def _outcome(ray: Any, ref: Any, task: GradeTask, submitted: float) -> GradeOutcome:
    try:
        return GradeOutcome(**ray.get(ref))
    except Exception as exc:  # noqa: BLE001 - this submission only; the batch goes on
        # WorkerCrashedError / OutOfMemoryError (after the retry), NodeDiedError, RayTaskError
        # (e.g. the package is missing on that node), a reply of another version's shape.
        return GradeOutcome(task.key, None, f"grading on Ray failed: {_describe(exc)}",
                            time.monotonic() - submitted, "ray")


def _describe(exc: Exception) -> str:
    crashed = any(cls.__name__ in ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError")
                  for cls in type(exc).__mro__)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # A RayTaskError's text is the remote traceback: its last line is the exception itself.
    detail = lines[-1] if lines else ""
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    if crashed:
        text += " (the worker process died, e.g. killed for using too much memory; retried once)"
    return text


def _grade_remote(task_json: dict) -> dict:
    """The Ray task: grade one submission on this worker.

    Plain JSON in and out: the task is rebuilt from a dict and the outcome goes back as
    `asdict(outcome)`, the report as JSON. Nothing made by student code crosses Ray's object
    store (student code runs only in the sandbox processes grading starts); this worker is
    trusted grader code, like `autograder grade`.
    """
    from dataclasses import asdict

    import ray

    from autograder.batch.worker import grade_task

    outcome = grade_task(GradeTask.from_json(task_json))
    context = ray.get_runtime_context()
    gpu_ids = ",".join(str(i) for i in ray.get_gpu_ids()) or "none"
    outcome.worker = f"{outcome.worker} ray-node={context.get_node_id()[:12]} gpu={gpu_ids}"
    return asdict(outcome)
