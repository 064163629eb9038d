"""The Ray backend of `autograder batch`: `run_ray(tasks, jobs, address, needs_gpu)`.

Warm workers on a Ray cluster that shares no file system with the batch:

- **Content, not paths.** The assignment is packed once per run (`batch.bundles.pack_assignment`:
  its grading.yml entry, hidden tests, bank, probes, timings, schemas), put into Ray's object
  store with `ray.put` and handed to every worker; each submission is sent as its packed bytes
  (size-capped as zip uploads are), and the reports come back as bytes, which this process,
  the batch, writes into its staging folder. It stays the only writer of OUT and the gradebook;
  a worker node needs none of its paths (not the submission's, not OUT, not AUTOGRADER_ROOT).
- **Warm workers.** One Ray actor (`autograder.batch.ray_grader.RayGrader`) per CPU, or per GPU when
  the hidden suite has GPU tests and the cluster has GPUs (`CUDA_VISIBLE_DEVICES` set by Ray),
  at most `jobs`, each holding a runner server as local workers do: a fresh forked runner and
  fresh sandbox zygotes per submission. An actor that dies (killed for memory, its node lost)
  is replaced and its submission retried once, as local workers are (`batch.retries`).
- **Deadlines.** Nothing waits forever: an actor not set up within START_SECONDS is killed (its
  submission retried once; when no actor was ever set up, nothing can be scheduled and the rest
  fails at once, naming what each actor asks for), and a grading running past the
  submission's own budget (timeouts.submission) plus GRADING_MARGIN is an error outcome, its
  actor killed and replaced.
- **Safe defaults.** Without `address` a private local instance is started that listens on
  loopback only (checked from /proc before anything is sent: it is shut down otherwise), that
  requires a fresh per-run token whatever the environment says (checked: a client without it
  is refused), with no dashboard and no usage stats, and shut down afterwards. An address
  (`"auto"`, `"HOST:6379"`, `"ray://HOST:10001"`) joins that cluster, which is left running; how
  it is exposed is its administrator's choice (see docs/RAY.md). A Ray instance already initialised
  in this process is used as it is.

What crosses Ray is plain data (bytes, lists, dicts of str and numbers): student code runs only
in the sandboxes the actors start, and no object it made is ever sent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.batch.records import GradeOutcome, GradeTask
from autograder.batch.retries import Queue

STOP_SECONDS = 10.0  # how long idle actors get to close (stop their runner server, remove folders)
# On top of a submission's own budget (timeouts.submission, which bounds its hidden tests): its
# packing, checks, reports and sandbox clean-up. A grading past both is stopped.
GRADING_MARGIN = 120.0
# How long an actor may take to start: be scheduled on a node with what it asks for, start its
# process, unpack the bundle, import torch and start its runner server.
START_SECONDS = 300.0


def run_ray(tasks: list[GradeTask], jobs: int, address: str | None = None,
            needs_gpu: bool = False) -> Iterator[GradeOutcome]:
    """Grade `tasks` on Ray actors, yielding each outcome as it finishes (completion order).

    Every task must be of the same assignment (one batch); its reports are written into
    `task.out` here, on the driver."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    if not tasks:
        return
    from autograder.batch.bundles import pack_assignment
    from autograder.batch.ray_grader import RayGrader
    from autograder.project.config import assignment_config
    from autograder.project.paths import Project

    first = tasks[0]
    if any((t.assignment, t.config_path) != (first.assignment, first.config_path) for t in tasks):
        raise ValueError("one batch grades one assignment")
    project = Project.of_config(Path(first.config_path), "named by the batch's task")
    bundle = pack_assignment(first.assignment, project)
    ray = _import_ray()
    started_here = _connect(ray, address, jobs)  # our local instance, or None
    try:
        resources = ray.cluster_resources()
        gpus = gpus_per_task(needs_gpu, resources)
        # Each actor takes a CPU (its gradings use one), and a GPU of its own on GPU work.
        capacity = int(min(resources.get("CPU", 0), resources.get("GPU", 0)) if gpus
                       else resources.get("CPU", 0))
        workers = max(1, min(jobs, len(tasks), capacity or 1))
        asks = {"CPU": 1, "GPU": gpus} if gpus else {"CPU": 1}
        actor = ray.remote(RayGrader).options(
            num_cpus=asks["CPU"], num_gpus=gpus,
            # We replace dead actors ourselves, so that a submission is retried once, not
            # re-run on a restarted actor behind our back.
            max_restarts=0, max_task_retries=0)
        share = capacity_per_node(ray, "GPU" if gpus else "CPU")
        budget = assignment_config(first.assignment, project).submission_timeout
        deadlines = Deadlines(budget + GRADING_MARGIN, START_SECONDS, asks,
                              f"timeouts.submission {budget:g} s + {GRADING_MARGIN:g} s")
        yield from _collect(ray, tasks, workers, actor, ray.put(bundle), share, deadlines)
    finally:
        if started_here:
            started_here.stop(ray)


def gpus_per_task(needs_gpu: bool, cluster_resources: dict[str, float]) -> int:
    """One GPU per grading job when the assignment has GPU tests and the cluster has a GPU."""
    return 1 if needs_gpu and cluster_resources.get("GPU", 0) >= 1 else 0


def capacity_per_node(ray: Any, resource: str) -> int:
    """The most actors one node holds (its CPUs or GPUs): their sandboxes share its memory."""
    sizes = [int(node.get("Resources", {}).get(resource, 0)) for node in ray.nodes()
             if node.get("Alive")]
    return max([1, *sizes])


def _import_ray() -> Any:
    # Set before Ray starts: the processes we launch inherit it.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        import ray
    except ImportError as exc:
        raise ImportError("the ray backend needs Ray: pip install 'autograder[ray]'") from exc
    return ray


def _connect(ray: Any, address: str | None, jobs: int) -> LocalInstance | None:
    """Join the cluster at `address`, or start a local instance; the local instance when we
    started one, else None."""
    if ray.is_initialized():
        return None
    quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if address is not None:
        ray.init(address=address, **quiet)
        return None
    return start_local(ray, jobs, **quiet)


# Where Ray (2.5x and later) reads its authentication settings from: this process's
# environment, which the instance's processes inherit.
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass
class LocalInstance:
    """A local instance started by `start_local`: its private folder (session files and the
    token) and the authentication environment it replaced in this process."""

    folder: str
    replaced: dict[str, str | None]

    def stop(self, ray: Any) -> None:
        """Shut the instance down, restore the environment, remove the folder (token too)."""
        try:
            ray.shutdown()
        finally:
            for name, value in self.replaced.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _reload_auth_settings()
            shutil.rmtree(self.folder, ignore_errors=True)


def start_local(ray: Any, num_cpus: int, **options: Any) -> LocalInstance:
    """`ray.init` of a private local instance that listens on 127.0.0.1 only and requires a
    fresh token; `LocalInstance.stop` ends it.

    Loopback only: `ray.init(_node_ip_address="127.0.0.1")` is not enough: Ray turns a loopback
    node address into the machine's routable one, and then its servers (GCS, raylet, workers)
    listen on all interfaces. It keeps 127.0.0.1, and binds its servers there, when its
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER setting is off (the mode it uses for single-machine
    instances on macOS and Windows); that setting is read when Ray is imported, so it is
    switched off around this call only (joining a cluster needs it on). `check_loopback_only`
    verifies the result whatever Ray's version does.

    Private files: the session (ports, sockets, logs) is not in Ray's shared /tmp/ray, which
    every user may write (a sandbox in `uid` mode, which shares the host's loopback, could find
    or disturb the instance there), but in `ray/` (`_temp_dir`) inside a fresh 0700 folder.
    Inside it, not the folder itself: Ray makes its temp dir and session folders 0777
    (`try_make_directory_shared`), and only the folder above keeps other users out of them.

    A token: loopback keeps other machines out, not other users of this one (sandboxes in
    `uid` mode), so the instance requires a fresh 256-bit token, in a 0600 file in that folder
    (`RAY_AUTH_MODE=token`, `RAY_AUTH_TOKEN_PATH`), whatever RAY_AUTH_MODE, RAY_AUTH_TOKEN or
    ~/.ray/auth_token say; sandboxes never see it (their environment is built from scratch, and
    the file is the grader's alone). `check_token_required` verifies that a client without it
    is refused.
    """
    folder = tempfile.mkdtemp(prefix="agray-")  # 0700, and Ray leaves it so
    token_path = os.path.join(folder, "auth_token")
    descriptor = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as token_file:
        token_file.write(secrets.token_hex(32))
    local = LocalInstance(folder, {name: os.environ.get(name) for name in AUTH_VARIABLES})
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would come before the file
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
    try:
        _reload_auth_settings()
        init_on_loopback(ray, num_cpus=num_cpus, _temp_dir=os.path.join(folder, "ray"),
                         **options)
        check_loopback_only(ray)
        check_token_required(ray)
    except BaseException:
        local.stop(ray)  # Ctrl-C while it was starting, or it is open to others
        raise
    return local


def init_on_loopback(ray: Any, **options: Any) -> None:
    """`ray.init(**options)` of a local instance in Ray's single-machine mode (see start_local)."""
    from ray._private import ray_constants  # a private module: check_loopback_only verifies

    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        for attempt in range(2):
            try:
                ray.init(**options)
                return
            # Ray gives its raylet a fixed 30 s to register, which a loaded machine can miss
            # (its plain Exception says so only in words): once more, from scratch.
            except Exception as exc:
                if attempt or "timed out during startup" not in str(exc):
                    raise
                ray.shutdown()
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _reload_auth_settings() -> None:
    """Make this process's Ray read the authentication environment again (it caches it)."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # a Ray without token authentication: check_token_required says so
        return
    Config.initialize("")  # the mode first, then the token (as Ray's own tests reset them)
    AuthenticationTokenLoader.instance().reset_cache()


# A client without the token: it must be refused by the local instance's GCS.
_NO_TOKEN_CLIENT = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1])
except Exception as exc:
    print("refused" if "Auth" in type(exc).__name__ else f"failed {type(exc).__name__}: {exc}")
else:
    print("connected")
"""


def check_token_required(ray: Any) -> None:
    """Raise RuntimeError unless the instance this process runs refuses a client without its
    token (a Python process with RAY_AUTH_MODE=disabled, no token and no home folder)."""
    address = ray.get_runtime_context().gcs_address
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RAY_AUTH_MODE": "disabled",
           "HOME": "/nonexistent", "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        said = subprocess.run([sys.executable, "-I", "-c", _NO_TOKEN_CLIENT, address],
                              env=env, capture_output=True, text=True, timeout=120).stdout
    except subprocess.TimeoutExpired:
        said = "no answer in 120 s"
    lines = said.strip().splitlines()
    if lines and lines[-1] == "refused":
        return
    problem = ("accepts clients without its token" if lines and lines[-1] == "connected"
               else f"could not be checked to refuse clients without its token "
                    f"({lines[-1] if lines else 'the check said nothing'})")
    raise RuntimeError(f"the local Ray instance {problem}; it was stopped. Sandboxed code "
                       "may reach this machine's loopback (isolation `uid`), so a local "
                       "instance must require a token: use a Ray version with token authentication "
                       "(RAY_AUTH_MODE=token), or `--backend local`")


def check_loopback_only(ray: Any) -> None:
    """Raise RuntimeError when a process of the local instance listens beyond loopback."""
    from autograder.batch.listeners import descendants, listeners

    exposed = [str(s) for s in listeners(descendants(os.getpid())) if not s.loopback]
    if exposed:
        raise RuntimeError("the local Ray instance listens beyond this machine ("
                           + ", ".join(exposed[:5]) + "); it was stopped. Start a cluster with "
                           "`ray start` as you want it exposed and pass --address")


@dataclass
class _Job:
    task: GradeTask
    submitted: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Deadlines:
    """How long `_collect` waits for an actor, so that nothing waits forever."""

    grading: float = 3600.0  # seconds one grading may take once its actor is set up
    start: float = START_SECONDS  # seconds an actor may take to be scheduled and set up
    asks: dict = field(default_factory=lambda: {"CPU": 1})  # what each actor asks Ray for
    basis: str = "the batch's limit"  # where `grading` comes from, for messages


@dataclass(eq=False)
class _Actor:
    handle: Any
    born: float = field(default_factory=time.monotonic)
    ready_at: float | None = None  # when it answered `ready` (set up); None until then


def _collect(ray: Any, tasks: list[GradeTask], workers: int, actor: Any, bundle_ref: Any,
             share: int = 1, deadlines: Deadlines | None = None) -> Iterator[GradeOutcome]:
    """Keep `workers` actors of class `actor` busy, one submission each; yield each outcome as
    it arrives. A dead actor is replaced and its submission retried (`batch.retries`).

    Every call has a deadline: an actor not set up within `deadlines.start` of its start is
    killed, and its submission is retried once on a new actor as after a death (when no actor
    of the batch was ever set up, nothing can be scheduled: the rest fails at once, naming what
    each actor asks for); a grading still running `deadlines.grading` after both its
    submission and its actor's set-up has its actor killed and replaced, and the
    submission is an error outcome."""
    from autograder.batch.bundles import PackError, pack_submission

    limits = deadlines or Deadlines()
    waiting = Queue((_Job(t) for t in tasks), key=lambda job: job.task.key)
    idle: list[_Actor] = []
    busy: dict[Any, tuple[_Actor, _Job]] = {}  # call ref -> (actor, job)
    starting: dict[Any, _Actor] = {}  # ref of a `ready` call -> its actor, not yet set up
    alive: list[_Actor] = []
    any_set_up = False

    def start_actor() -> None:
        new = _Actor(actor.remote(bundle_ref, share))
        starting[new.handle.ready.remote()] = new
        alive.append(new)
        idle.append(new)

    def due(worker: _Actor, job: _Job) -> float:
        if worker.ready_at is None:
            return worker.born + limits.start
        return max(job.submitted, worker.ready_at) + limits.grading

    def stop(worker: _Actor) -> None:
        """Kill an actor that missed its deadline. Not a cancel first: for a regular actor's
        running call Ray (2.60) only sets a flag. Its runner server, the runners and their
        sandboxes die with it (PR_SET_PDEATHSIG, each with its parent)."""
        with contextlib.suppress(Exception):
            ray.kill(worker.handle, no_restart=True)
        alive.remove(worker)
        for ref in [r for r, w in starting.items() if w is worker]:
            del starting[ref]

    try:
        for _ in range(workers):
            start_actor()
        while waiting or busy:
            while waiting and idle:
                job = waiting.next()
                try:
                    request = {"key": job.task.key, "submission":
                               pack_submission(Path(job.task.submission)),
                               "dates": job.task.to_json()["dates"]}
                except PackError as exc:
                    yield GradeOutcome(job.task.key, None, f"not sent to Ray: {exc}", 0.0, "ray")
                    continue
                except Exception as exc:  # noqa: BLE001 - this submission only; the batch goes on
                    yield GradeOutcome(job.task.key, None, "not sent to Ray: the submission "
                                       f"could not be packed ({type(exc).__name__})", 0.0, "ray")
                    continue
                worker = idle.pop()
                job.submitted = time.monotonic()
                busy[worker.handle.grade.remote(request)] = (worker, job)
            if not busy:
                continue
            next_due = min(due(worker, job) for worker, job in busy.values())
            done, _ = ray.wait([*busy, *starting], num_returns=1,
                               timeout=max(0.0, next_due - time.monotonic()))
            if not done:  # a deadline passed
                now = time.monotonic()
                for ref, (worker, job) in list(busy.items()):
                    if ref not in busy or due(worker, job) > now:
                        continue
                    del busy[ref]
                    if worker.ready_at is not None:  # set up, but its grading went on and on
                        stop(worker)
                        yield _failed(job, f"grading on Ray did not finish within "
                                           f"{limits.grading:g} s ({limits.basis}); its Ray "
                                           "worker was stopped")
                        if waiting and len(alive) < workers:
                            start_actor()
                        continue
                    stop(worker)  # never set up: not scheduled, or its node lost
                    if not any_set_up:  # none ever was: nothing here can be scheduled
                        reason = _not_started(ray, limits)
                        for left in [job, *(j for _, j in busy.values()), *waiting]:
                            yield _failed(left, reason)
                        return
                    yield from _lose(job, f"no Ray worker was set up within {limits.start:g} "
                                          "s", waiting, busy)
                    if waiting.stopped:
                        return
                    if waiting and len(alive) < workers:
                        start_actor()
                continue
            [ref] = done
            if ref in starting:  # an actor is set up (or died starting: its call says so)
                worker = starting.pop(ref)
                with contextlib.suppress(Exception):
                    ray.get(ref)
                    worker.ready_at = time.monotonic()
                    any_set_up = True
                continue
            worker, job = busy.pop(ref)
            try:
                answer = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - this actor; the batch goes on
                if not _actor_died(exc):
                    idle.append(worker)
                    yield _failed(job, f"grading on Ray failed: {_describe(exc)}")
                    continue
                alive.remove(worker)
                for left in [r for r, w in starting.items() if w is worker]:
                    del starting[left]
                yield from _lose(job, f"its Ray worker died ({_describe(exc)}; killed for "
                                      "using too much memory, say)", waiting, busy)
                if waiting.stopped:
                    return
                if waiting and len(alive) < workers:
                    start_actor()
                continue
            waiting.graded()
            worker.ready_at = worker.ready_at or time.monotonic()  # if its `ready` is not seen yet
            any_set_up = True
            idle.append(worker)
            yield _received(job, answer)
    finally:
        # Also on Ctrl-C, or when the caller closes us. Idle actors that are set up stop their
        # runner server and remove their folders (the bundle) first; killing alone would leave
        # those on the node's /tmp after every batch. The others are only killed (one not
        # scheduled would never answer), and their runner servers, runners and sandboxes die
        # with them (PR_SET_PDEATHSIG). Not a cancel first: for a regular actor's running call
        # Ray 2.60 only sets a flag, which grading never reads.
        working = {id(worker) for worker, _ in busy.values()}
        with contextlib.suppress(Exception):
            ray.get([w.handle.close.remote() for w in alive
                     if id(w) not in working and w.ready_at is not None], timeout=STOP_SECONDS)
        for worker in alive:
            with contextlib.suppress(Exception):
                ray.kill(worker.handle, no_restart=True)


def _lose(job: _Job, why: str, waiting: Queue[_Job],
          busy: dict[Any, tuple[_Actor, _Job]]) -> Iterator[GradeOutcome]:
    """`job`'s actor is lost: `job` is queued first again (on a new actor), or fails; when the
    batch is hopeless (`waiting.stopped`), so does everything left, and the caller returns
    (its `finally` kills the actors still grading)."""
    for failed, error in waiting.lost(job, why, [j for _, j in busy.values()]):
        yield _failed(failed, f"grading on Ray failed: {error}")


def _not_started(ray: Any, limits: Deadlines) -> str:
    """Why no actor was set up: what each asks for, and what the cluster has of it."""
    asks = ", ".join(f"{amount:g} {name}" for name, amount in limits.asks.items())
    try:
        total = ray.cluster_resources()
        has = ", ".join(f"{total.get(name, 0):g} {name}" for name in limits.asks)
    except Exception:  # noqa: BLE001 - only for the message
        has = "unknown"
    return (f"grading on Ray failed: no Ray worker could be set up within {limits.start:g} s; "
            f"each asks for {asks} and the cluster has {has} in all (no node may have it "
            "free, or a node was lost); the batch stopped waiting")


def _received(job: _Job, answer: Any) -> GradeOutcome:
    """The outcome an actor sent, its report files written into the staging folder here."""
    from autograder.batch.bundles import PackError, write_outputs

    try:
        outcome = GradeOutcome.from_json(answer["outcome"])
        if outcome.key != job.task.key:
            return _failed(job, "the Ray worker answered for another submission")
        write_outputs(answer["files"], Path(job.task.out))
    except (PackError, TypeError, KeyError, ValueError, AttributeError) as exc:
        return _failed(job, f"the Ray worker sent an unusable answer: {exc}")
    except OSError as exc:
        return _failed(job, f"its reports could not be written here: {exc}")
    return outcome


def _failed(job: _Job, error: str) -> GradeOutcome:
    return GradeOutcome(job.task.key, None, error, time.monotonic() - job.submitted, "ray")


def _actor_died(exc: Exception) -> bool:
    return any(cls.__name__ in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                                "WorkerCrashedError", "OutOfMemoryError", "NodeDiedError")
               for cls in type(exc).__mro__)


def _describe(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # A RayTaskError's text is the remote traceback: its last line is the exception itself.
    detail = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
