"""Trusted side of the sandbox: start sandbox processes, send requests, read replies safely.

A sandbox is a separate `python -I -S -B` process whose sys.path holds the standard library,
site-packages and the sandbox folder (the student's files, the assignment's `probes.py` and the
worker). Replies are JSON decoded by `codec.decode`; a crash, exit or hang becomes a
`SandboxFailure` naming what the student's code was doing. A sandbox that cannot start before
any student code ran in it is `SandboxUnavailable`: the grader's failure, not the student's.
"""

from __future__ import annotations

import builtins
import ctypes
import fcntl
import json
import os
import queue
import resource
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autograder.project.config import SandboxLimits
from autograder.project.inert import inert
from autograder.sandbox import request_pickle
from autograder.sandbox.cgroups import Cgroup
from autograder.sandbox.events import EVENTS_SUFFIX, EventRecorder
from autograder.sandbox.folder import RUNTIME_PACKAGE, boot, sandbox_env
from autograder.sandbox.isolation import (
    Isolation,
    detect,
    launch_spec,
    prepare_folder,
    sandbox_ids,
    wrap,
)
from autograder.sandbox.launcher import FAILED as LAUNCHER_FAILED
from autograder.sandbox.launcher import install_seccomp
from autograder.sandbox.memory_watch import MemoryWatch
from autograder.sandbox.observer import (
    GRACE_SECONDS,
    READY_SECONDS,
    Observer,
    ObserverHost,
    ObserverProcess,
)
from autograder.sandbox.processes import (
    ProcessEntry,
    children_of,
    ended_text,
    gpu_device_present,
    kill_group,
    kill_if_same,
    kill_uid,
    namespace_pid,
    process_start_time,
    process_table,
    sandbox_memory_bytes,
    seconds_text,
    strays,
    wait_ended,
)
from autograder.sandbox.rendezvous import (
    AGENT_STORE_ENV,
    StoreHost,
    StoreServer,
    StoreUnavailable,
    StoreView,
)
from autograder.sandbox_runtime import codec, wire

_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38


class SandboxFailure(Exception):
    """Student code crashed, exited, hung or could not be imported or checked. What happened
    is the class (the subclasses below): the grader names it from that, never from the text,
    which is for the student."""


class SandboxUnavailable(Exception):
    """The sandbox could not start: its first process could not be started, or the isolation
    launcher failed, or the zygote ended or hung before it served any worker (it never imports
    student code, so none had run in it). The grader's failure, never the student's: grading
    stops for the whole submission (see pytest_plugin). Not a SandboxFailure, which says that
    the student's code failed."""


class SandboxTimeout(SandboxFailure):
    """Student code did not answer within its time limit (`seconds`) during `what` (a call, a
    scenario, the import): it was killed. A function that hung once is not run again (see
    pytest_plugin.GradingPlugin.hung)."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        super().__init__(f"timed out after {seconds_text(seconds)} s during {what}")


class ImportHang(SandboxFailure):
    """The student's module did not finish importing in time: no function is to blame, and no
    test runs after it (see Sandbox._import_hang)."""


class ImportCrash(SandboxFailure):
    """The worker ended while it imported the student's module: no function is to blame."""


class ImportFailed(SandboxFailure):
    """The student's module raised at import (a syntax error, an import error, sys.exit)."""


class MissingFunction(SandboxFailure):
    """The student's module has no function of the name called."""


class StudentExited(SandboxFailure):
    """Student code called sys.exit during a call or a scenario."""


class Uncheckable(SandboxFailure):
    """What student code returned cannot be read back as plain data."""


class UnreadableReply(SandboxFailure):
    """A reply over the size limit, or not well formed: the sandbox is restarted."""


class ZygoteLost(SandboxFailure):
    """No worker could be started: the sandbox's parent process (the zygote) ended after
    student code had run in it (killed by it, likely)."""


class SandboxCrash(SandboxFailure):
    """Student code's process ended (it exited, was killed or crashed) during a call or a
    scenario: the next one needs a new worker, which imports the module again. A function
    whose calls keep crashing is not run again (see pytest_plugin.GradingPlugin.crashed)."""


class ZygoteKilled(SandboxCrash):
    """The worker ended with its sandbox's parent process (the zygote), killed meanwhile."""


class ObservedFailure(SandboxFailure):
    """The grader's own rank in a scenario (its observer) saw the student's ranks do wrong: a
    collective of the wrong size or contents, one never posted, one posted too late. The
    verdict of that scenario, never retried (unlike a hang or a crash of a student's rank,
    which the observer's end usually causes). `student_error`: what a student rank raised
    meanwhile, if any (a NotImplementedError tells unfinished work)."""

    def __init__(self, message: str, student_error: StudentError | None) -> None:
        self.student_error = student_error
        super().__init__(message)


class ImportsSpent(SandboxFailure):
    """Starting the student's code has taken the submission's whole allowance (ImportBudget):
    no worker is started for it again."""


class ImportStopped(ImportsSpent):
    """An import in flight was stopped at what was left of the allowance (not a hang)."""


class ImportBudget:
    """The seconds a submission's code may spend starting, over the whole grading (grading.yml's
    timeouts.imports): each serving worker's start and import of the student's module (here,
    in Sandbox) and each failed multi-process attempt (charged by its caller, pytest_plugin).
    The runners of one grading share it through the supervisor (`spent`)."""

    def __init__(self, limit: float, spent: float = 0.0) -> None:
        self.limit, self.spent = limit, spent
        self.slowest = 0.0  # the longest single import this runner saw

    def left(self) -> float:
        return self.limit - self.spent

    def charge(self, seconds: float, imported: bool = False) -> None:
        self.spent += max(0.0, seconds)
        if imported:
            self.slowest = max(self.slowest, seconds)

    def refuse_if_spent(self) -> None:
        """ImportsSpent ("not run: ...") once nothing is left."""
        if self.left() <= 0:
            raise ImportsSpent(self.message("not run: "))

    def message(self, prefix: str) -> str:
        slowest = (f"; one import took {seconds_text(self.slowest)} s" if self.slowest >= 0.5
                   else "")
        return (f"{prefix}importing your module has used up this submission's "
                f"{seconds_text(self.limit)} s for imports ({seconds_text(self.spent)} s in all: "
                f"your module is imported again after each crash and in each process of a "
                f"multi-process test{slowest})")


class StudentError(Exception):
    """An exception raised by student code, re-raised in the trusted test as plain data."""

    def __init__(self, function: str, info: dict) -> None:
        self.function = function
        self.type_names = _strings(info.get("type_names"))[:20] or ["Exception"]
        self.qualified_names = _strings(info.get("qualified"))[:20]
        flags = info.get("builtin")
        self.builtin_flags = [v is True for v in flags][:20] if type(flags) is list else []
        self.type_name = self.type_names[0][:200]
        self.message = str(info.get("message", ""))[:4000]
        self.where = str(info.get("where", ""))[:500]
        super().__init__(f"{function} raised {self.described}")

    @property
    def described(self) -> str:
        """'TYPE: MESSAGE', or the type alone when the message is empty (a bare `raise
        NotImplementedError`), so that no text ends in a colon with nothing after it."""
        return f"{self.type_name}: {self.message}" if self.message.strip() else self.type_name

    @property
    def refused_by_sandbox(self) -> bool:
        """The sandbox's own refusal of a network socket (its audit hook's exception class)."""
        return self.is_a(NETWORK_REFUSED)

    def is_a(self, type_name: str) -> bool:
        """True if the student's exception is (a subclass of) the named type: a built-in one
        for a bare name ('ValueError'), so a student's own class of that name does not count.

        A bare name must be a real built-in exception here, and the sandbox must have found that
        class in the exception's MRO by identity (`codec.encode_exception`): a class that only
        claims `__module__ = "builtins"` does not count. (Student code that patches the encoder
        can still forge the flag, but it could as well raise the real built-in class: a forged
        reply can claim nothing an honest one could not.)"""
        if "." in type_name:
            return type_name in self.qualified_names
        real = getattr(builtins, type_name, None)
        if not (isinstance(real, type) and issubclass(real, BaseException)):
            return False
        wanted = f"builtins.{type_name}"
        return any(name == wanted and i < len(self.builtin_flags) and self.builtin_flags[i]
                   for i, name in enumerate(self.qualified_names))


# The class the sandbox's audit hook raises for a refused socket (sandbox_runtime/worker.py).
NETWORK_REFUSED = f"{RUNTIME_PACKAGE}.worker.NetworkRefused"
# Student exceptions a scenario caught and noted (sandbox_runtime/caught.py), per reply.
MAX_CAUGHT = 8
# How long ranks kept though they raised have for their reset to end the observer's wait
# (a reset takes ~20 ms) before they are ended instead (see Sandbox._student_ranks).
TRIAL_SECONDS = 0.5


class RankResults(list):
    """The per-rank results of a multi-process scenario (a list, in rank order: the student's
    ranks only, when the grader ran one of them), with what the trusted rendezvous stores saw
    (`stores`, in the order of their ports), the rank number of each result (`ranks`) and
    the record of the grader's own rank (`observed`; None without one)."""

    def __init__(self, results: list[Any], stores: list[StoreView],
                 ranks: list[int] | None = None, observed: dict | None = None) -> None:
        super().__init__(results)
        self.stores = stores
        self.ranks = list(range(len(results))) if ranks is None else ranks
        self.observed = observed


def caught_errors(reply: dict, function: str) -> list[StudentError]:
    """The student exceptions a scenario caught and noted in `reply` (at most MAX_CAUGHT), as
    StudentErrors (`is_a` as for a raised one). The sandbox says so: student code may add
    some (which only makes its own failures look like unfinished work) or leave them out."""
    found = reply.get("caught")
    if type(found) is not list:
        return []
    return [StudentError(function, info) for info in found[:MAX_CAUGHT] if type(info) is dict]


class _Observing:
    """A scenario's observer (observer.py), started once the stores' ports are known."""

    def __init__(self, start: Callable[[list[int], tuple[int, ...]], ObserverProcess]
                 ) -> None:
        self._start = start
        self.process: ObserverProcess | None = None
        self.ended_first = False  # whether it had ended when the student's ranks timed out

    def start(self, ports: list[int], ranks: tuple[int, ...]) -> None:
        """Start it for the stores at `ports`, the student's ranks being the processes
        `ranks` (pids here)."""
        self.process = self._start(ports, ranks)

    def timed_out(self) -> None:
        """The student's ranks ran out of time: the observer's verdict stands only if it had
        ended by then (a wait of its own that failed first)."""
        self.ended_first = self.process is not None and self.process.ended()


class _EndedEarlier(Exception):
    """The worker had already ended before the request was sent."""


class _Malformed(Uncheckable):
    """A reply that does not follow the protocol: the sandbox is restarted."""


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if type(value) is list else []


def rlimits(limits: SandboxLimits) -> dict[str, int]:
    """The resource limits of every sandbox process, by `resource` constant name."""
    # CUDA maps far more address space than any sane RLIMIT_AS: on a GPU grader the cgroup
    # holds the memory limit (if there is none, memory is not limited, and reports say so).
    address_space = resource.RLIM_INFINITY if gpu_device_present() else limits.memory_bytes
    return {"RLIMIT_AS": address_space, "RLIMIT_CPU": limits.cpu_seconds,
            "RLIMIT_FSIZE": limits.max_file_bytes, "RLIMIT_NOFILE": limits.max_open_files,
            "RLIMIT_CORE": 0}


def enter_limits(values: dict[str, int], cgroup_procs: list[str]) -> None:
    """Put this process in its cgroup and under its limits (between fork and exec, or before a
    warm zygote enters its namespaces): only simple calls."""
    for procs in cgroup_procs:
        with open(procs, "w") as f:
            f.write("0")  # this process, and all it starts, into the sandbox's cgroup
    for name, value in values.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-long writes fail, not kill


def _limit(limits: SandboxLimits, cgroup: Cgroup | None,
           isolation_none: bool = False) -> Callable[[], None]:
    values, procs = rlimits(limits), cgroup.procs_files if cgroup else []

    def apply() -> None:
        enter_limits(values, procs)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the runner that started it
        if isolation_none:  # else the isolation launcher does it, after building the view
            _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            install_seccomp()
    return apply


class ZygoteSource(Protocol):
    """Forks a zygote into a new sandbox built from `spec` (None when it cannot)."""

    def start(self, spec: dict, rlimits: dict[str, int], cgroup_procs: list[str],
              control_fd: int, out_fd: int) -> Any: ...


@dataclass(frozen=True)
class Starts:
    """How a sandbox starts its processes, given by whoever creates it (never set globally).

    - `zygotes`: in a runner forked by a warm runner server, the server forks the zygotes
      (it has torch imported and has never seen a submission or a test); otherwise None.
    - `on_start`: called with the pid of every sandbox process started, so its group can be
      killed later even if the process that started it dies first.
    - `stores`: what serves the rendezvous stores of its rank scenarios (torch's, which only
      the runner imports: autograder.runner.stores.TcpStores); None: it runs no scenario.
    - `gpu_env`: the grader's GPU selection (CUDA_VISIBLE_DEVICES) for its processes, where
      the creator hid the GPUs from itself (autograder.runner.gpus); None: this process's.
    """

    zygotes: ZygoteSource | None = None
    on_start: Callable[[int], None] | None = None
    stores: StoreServer | None = None
    gpu_env: Mapping[str, str] | None = None

    def started(self, pid: int) -> None:
        if self.on_start is not None:
            self.on_start(pid)


def _exec(sandbox_dir: Path, limits: SandboxLimits, argv: list[str], output_path: Path,
          pass_fds: tuple[int, ...], isolation: Isolation, ids: tuple[int, int] | None,
          cgroup: Cgroup | None, starts: Starts) -> subprocess.Popen:
    """Start a fresh sandbox interpreter (the zygote), isolated, with every limit applied."""
    env = sandbox_env(sandbox_dir, starts.gpu_env)
    mount_point = Path(tempfile.mkdtemp(prefix="mnt-", dir=sandbox_dir.parent))
    if starts.zygotes is not None and isolation.mode != "none" and argv[0] == "zygote":
        spec = launch_spec(sandbox_dir, env, isolation, ids, mount_point, limits.max_processes,
                           limits.disk_bytes)
        with open(output_path, "ab") as out:
            warm = starts.zygotes.start(spec, rlimits(limits),
                                      cgroup.procs_files if cgroup else [], int(argv[1]),
                                      out.fileno())
        if warm is not None:
            starts.started(warm.pid)
            return warm
    command = [sys.executable, "-I", "-S", "-B", "-c", boot(sandbox_dir), *argv]
    command = wrap(command, sandbox_dir, env, isolation, ids, mount_point, limits.max_processes,
                   limits.disk_bytes)
    with open(output_path, "ab") as out:
        popen = subprocess.Popen(
            command, cwd=sandbox_dir, env=env, stdin=subprocess.DEVNULL,
            stdout=out, stderr=out, pass_fds=pass_fds, start_new_session=True,
            preexec_fn=_limit(limits, cgroup, isolation.mode == "none"))
    starts.started(popen.pid)
    return popen


class Zygote:
    """A sandbox process that has imported torch and forks a fresh worker per request.

    Forking skips the ~1.5 s interpreter and torch start-up of every sandbox process, while each
    worker still starts clean: the zygote never imports student code. Its messages come from the
    sandbox side, so they are parsed as untrusted data.

    Each worker gets an event channel of its own from `events` (autograder.sandbox.events),
    read here as the worker runs; the zygote's log (its stderr) holds only what the launcher
    and the zygote say.
    """

    def __init__(self, sandbox_dir: Path, limits: SandboxLimits, log_path: Path,
                 isolation: Isolation, ids: tuple[int, int] | None,
                 starts: Starts = Starts(), clean: bool = True,
                 events: EventRecorder | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Where its own lines begin in a log earlier zygotes wrote to.
        self.log_path, self._log_start = log_path, _size(log_path)
        self.events = events if events is not None else EventRecorder(
            log_path.with_name(log_path.name.removesuffix("-zygote.log") + EVENTS_SUFFIX))
        memory = sandbox_memory_bytes(limits.memory_bytes)
        self.cgroup = Cgroup.create(memory, limits.max_processes)
        try:
            self.popen = _exec(sandbox_dir, limits, ["zygote", str(theirs.fileno())], log_path,
                               (theirs.fileno(),), isolation, ids, self.cgroup, starts)
        except BaseException:
            ours.close()
            theirs.close()
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        # Where neither the address space nor a cgroup limits memory (a GPU grader that may
        # not make cgroups), its processes' resident memory is watched from here.
        self.memory_watch: MemoryWatch | None = None
        if self.cgroup is None and rlimits(limits)["RLIMIT_AS"] == resource.RLIM_INFINITY:
            self.memory_watch = MemoryWatch(self.popen.pid, memory,
                                            ids[0] if isolation.mode == "uid" and ids else None)
        self.starts = starts
        # Whether it has forked a worker (which imports student code): a failure before that
        # is the grader's; after it, that code may have killed it (in `uid` mode a worker has
        # the zygote's uid).
        self.served = False
        # Whether nothing of the student's can be running beside it (`clean`): only then is a
        # failure before it served the grader's. (Without isolation, what an earlier worker
        # left running may have stopped it.)
        self.clean = clean
        theirs.close()
        self._socket = ours
        self._spawned: queue.Queue[int | None] = queue.Queue()
        self._statuses: dict[int, int] = {}
        self.exit_times: dict[int, float] = {}  # when each worker's end was reported
        self._changed = threading.Condition()
        self._ns_pids: dict[int, int] = {}
        # Only in its own namespaces is the zygote a child of the launcher (PID 1 there); in
        # `uid` mode the launcher execs the zygote itself, and in `none` there is no launcher.
        self.behind_launcher = isolation.mode == "namespaces"
        self._pid1: tuple[int, str | None] | None = None  # namespaced zygote: (host pid, start)
        self.alive = True
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                data = self._socket.recv(4096)
                message = json.loads(data) if data else None
            except (OSError, ValueError):
                message = None
            if type(message) is not dict:
                break
            if type(message.get("spawned")) is int:
                self._spawned.put(message["spawned"])
            elif type(message.get("exited")) is int and type(message.get("status")) is int:
                with self._changed:
                    self._statuses[message["exited"]] = message["status"]
                    self.exit_times[message["exited"]] = time.monotonic()
                    self._changed.notify_all()
        with self._changed:
            self.alive = False
            self._changed.notify_all()
        self._spawned.put(None)

    def spawn(self, mode: str, module_name: str, output_path: Path, timeout: float = 60.0,
              gpus: int = 0) -> tuple[int, int, int]:
        """Fork a worker (`gpus` > 0: that many simulated GPUs; -1: CUDA hidden; see
        sandbox_runtime/simulated_cuda.py); returns (pid, request fd to
        write, reply fd to read)."""
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        out = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        # Its event channel: read from now on, our end never in the sandbox.
        channel, events_fd = self.events.channel()
        try:
            spec = {"mode": mode, "module": module_name, "gpus": gpus}
            socket.send_fds(self._socket, [json.dumps(spec).encode()],
                            [request_r, reply_w, out, events_fd])
            pid = self._spawned.get(timeout=timeout)
        except (OSError, queue.Empty):
            pid = None
        finally:
            for fd in (request_r, reply_w, out, events_fd):
                os.close(fd)
        first = not self.served
        if pid is not None:
            self.served = True  # a worker exists: student code may run in it from now on
        # Only a child of this zygote may be signalled later: a forged pid is refused. (In its
        # own PID namespace the zygote reports namespace pids, which mean nothing out here.)
        reported, pid = pid, self._host_pid(pid) if pid is not None else None
        channel.known(pid)  # (None: no worker of ours to tell a closed channel by)
        if pid is None and reported is not None and self._ended(reported):
            # It ended (os._exit at import, say) before it could be looked up: nothing is left
            # to signal, and its wait status is known. A token that is no host pid stands in.
            pid = -reported - 1
            self._ns_pids[pid] = reported
            return pid, request_w, reply_r
        if pid is None:
            for fd in (request_w, reply_r):
                os.close(fd)
            why = (self._why_not_started(timeout) if first and reported is None and self.clean
                   else None)
            self.close()
            if why is not None:
                raise SandboxUnavailable(why)
            raise ZygoteLost("the sandbox could not start a process for your code: its "
                             "parent process ended after your code ran in it")
        self.starts.started(pid)
        _oom_victim_first(pid)
        return pid, request_w, reply_r

    def _why_not_started(self, waited: float) -> str:
        """Why this zygote never served a worker: how it ended, with the last line of its log
        (the launcher's reason, or a traceback's last line), which only the launcher and the
        zygote wrote: no student code has run in it."""
        try:
            code = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return (f"the sandbox's first process did not answer within "
                    f"{seconds_text(waited)} s")
        said = _last_line(self.log_path, self._log_start)
        if code == LAUNCHER_FAILED:
            return "the isolation launcher failed: " + (
                said.removeprefix("isolation launcher: ") or ended_text(code))
        return (f"the sandbox's first process ended ({ended_text(code)}) before it ran any "
                "student code" + (f": {said}" if said else ""))

    def reported_pid(self, pid: int) -> int:
        """The pid the zygote uses for its child `pid` (its namespace's, when namespaced)."""
        return self._ns_pids.get(pid, pid)

    def _ended(self, reported: int, timeout: float = 2.0) -> bool:
        """Whether the zygote reports its child `reported` as ended (within `timeout`)."""
        with self._changed:
            return self._changed.wait_for(lambda: reported in self._statuses, timeout)

    def _host_pid(self, reported: int) -> int | None:
        """The host pid of the zygote's child that the zygote calls `reported`."""
        zygote = self.host_pid()
        for child in children_of(zygote):
            if namespace_pid(child) == reported:
                self._ns_pids[child] = reported
                return child
        return None

    def host_pid(self) -> int:
        """The zygote's pid out here (-1 before it is known)."""
        # Behind the isolation launcher, the zygote is the launcher's only child.
        if self.behind_launcher:
            if self._pid1 is not None:
                return self._pid1[0]
            children = children_of(self.popen.pid)
            if not children:
                return -1
            # Recorded by its host pid, to be killed by it: killing the launcher's group misses
            # a zygote that left the group, and with it goes everything in its PID namespace.
            self._pid1 = (children[0], process_start_time(children[0]))
            self.starts.started(children[0])
            return children[0]
        return self.popen.pid

    def wait_status(self, pid: int, timeout: float) -> int | None:
        """The raw wait status of a forked worker, once the zygote has reaped it."""
        reported = self._ns_pids.get(pid, pid)
        with self._changed:
            self._changed.wait_for(lambda: reported in self._statuses or not self.alive, timeout)
            return self._statuses.pop(reported, None)

    def close(self) -> None:
        self.alive = False
        kill_group(self.popen.pid)
        if self._pid1 is not None:
            kill_if_same(*self._pid1)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.memory_watch is not None:
            self.memory_watch.stop()
        self._socket.close()


def _copy_rank_output(processes: list[_Process], folder: Path, limit: int) -> None:
    """What each rank wrote since the last scenario, into `folder`/rank{r}.log (capped); the
    rank's own file emptied, so that a kept rank's output never nears the file-size limit."""
    for process in processes:
        rank = process.rank
        try:
            with open(process.output_path, "rb") as f:
                f.seek(process.output_offset)
                data = f.read(limit + 1)
            os.truncate(process.output_path, 0)  # (its writes append: they go on from 0)
            process.output_offset = 0
            if data:
                (folder / f"rank{rank}.log").write_bytes(data)
        except OSError:
            continue


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _last_line(log: Path, start: int, size: int = 8192) -> str:
    """The isolation launcher's last line in `log` after `start` ("isolation launcher: ..."),
    else the last line there at all; bounded, one line, inert."""
    try:
        with open(log, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - size))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    said = [line for line in lines if line.startswith("isolation launcher: ")]
    return inert((said or lines or [""])[-1], single_line=True)[:500]


def _oom_victim_first(pid: int) -> None:
    """Make a worker (and all it starts, which inherits this) the OOM killer's first choice in
    its sandbox's cgroup: without it the kernel picks the largest process, the zygote (torch
    imported), and every later test pays for a new one (a fork bomb under 768 MB did: 372 s).
    Raising a score needs no privilege; where it cannot be written, nothing changes."""
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text("1000")
    except OSError:
        pass


class _Process:
    """One forked sandbox worker with its request and reply pipes."""

    def __init__(self, zygote: Zygote, module_name: str, mode: str, output_path: Path,
                 gpus: int = 0) -> None:
        self.zygote, self.gpus, self.output_path = zygote, gpus, output_path
        self.output_offset = 0  # what of its output was taken (a rank's, by each scenario)
        self.rank = -1  # the one rank number it serves (a rank worker)
        self.pid, self.request_w, self.reply_r = zygote.spawn(mode, module_name, output_path,
                                                              gpus=gpus)
        self._status: int | None = None
        self.zygote_killed = False  # (how_it_ended found the zygote gone with the worker)
        self.expected = "ready"  # the first frame of a serving worker
        self.gone_before_send = False  # the last request found the pipe's reader gone
        self.sent_at = time.monotonic()

    def ended_before_last_send(self) -> bool:
        """Whether the worker was already gone when the last request was sent (it died after
        its previous reply, e.g. after forging one): that death is not this call's doing.

        Decided by the request itself when it can be: still unread in the pipe means the worker
        never took it (the zygote's report of the death may come after the send); else by when
        the death was reported."""
        if self.gone_before_send or self._request_unread():
            return True
        self._wait(timeout=5)
        ended = self.zygote.exit_times.get(self.zygote.reported_pid(self.pid))
        return ended is not None and ended < self.sent_at

    def _request_unread(self) -> bool:
        try:  # FIONREAD on a pipe's write end: the bytes the reader has not taken (Linux)
            waiting = fcntl.ioctl(self.request_w, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return False
        return int.from_bytes(waiting, sys.byteorder) > 0

    def _wait(self, timeout: float) -> int | None:
        if self._status is None:
            self._status = self.zygote.wait_status(self.pid, timeout)
        return self._status

    def send(self, request: dict) -> None:
        # Each request carries an id its reply must echo: a frame student code wrote into the
        # reply pipe itself can then never be taken for the reply to a later request.
        self.expected = secrets.token_hex(8)
        self.sent_at = time.monotonic()
        self.gone_before_send = False
        try:
            wire.send(self.request_w, request_pickle.dumps({**request, "id": self.expected}))
        except BrokenPipeError:
            self.gone_before_send = True  # nobody could read it: the process was already gone

    def read(self, timeout: float) -> dict:
        """The reply to the last request, or WireTimeout / WireClosed / WireTooLarge /
        CodecError. Stray frames with another id are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            raw = wire.recv(self.reply_r, max(0.0, deadline - time.monotonic()))
            reply = codec.loads(raw)  # counts values before parsing: memory stays bounded
            del raw
            if type(reply) is not dict:
                raise codec.CodecError("the sandbox sent a malformed reply")
            if reply.get("id") == self.expected:
                return reply

    def how_it_ended(self) -> str:
        status = self._wait(timeout=5)
        if status is None:
            self.kill()
            self.zygote_killed = not self.zygote.alive
            return "stopped answering" if self.zygote.alive else \
                "ended when its sandbox's parent process was killed"
        code = os.waitstatus_to_exitcode(status)
        if code >= 0:
            return f"exited with status {code}"
        name = signal.Signals(-code).name
        watch = self.zygote.memory_watch
        if name == "SIGKILL" and watch is not None and self.pid in watch.killed:
            return f"was stopped at the memory limit ({watch.killed[self.pid]})"
        why = {"SIGKILL": " (often the memory limit)", "SIGXCPU": " (the CPU time limit)",
               "SIGSEGV": " (a crash)"}.get(name, "")
        return f"was killed by {name}{why}"

    def gone(self) -> bool:
        """Whether it has ended, as far as can be told at once: its end of the reply pipe
        closed (it and all it started are gone), or its end reported."""
        if self._status is not None:
            return True
        poller = select.poll()
        poller.register(self.reply_r, select.POLLHUP | select.POLLERR)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def forget(self) -> None:
        """Close our ends without signalling: its zygote is gone, and its pid with it."""
        self._status = -1
        for fd in (self.request_w, self.reply_r):
            try:
                os.close(fd)
            except OSError:
                pass

    def signal(self) -> None:
        """SIGKILL its process group without waiting for its end (see kill)."""
        if self._status is None:
            kill_group(self.pid)

    def kill(self) -> None:
        if self._status is None:
            self.signal()
            self._wait(timeout=5)
        for fd in (self.request_w, self.reply_r):
            try:
                os.close(fd)
            except OSError:
                pass


def _crash(process: _Process) -> type[SandboxCrash]:
    """The class of a worker's end that how_it_ended() has described."""
    return ZygoteKilled if process.zygote_killed else SandboxCrash


def _outcome(reply: dict, what: str, function: str) -> Any:
    """Turn a reply into a value or the matching exception."""
    if "value" in reply:
        try:
            return codec.decode(reply["value"])
        except codec.CodecError as exc:
            raise _Malformed(f"the value returned by {what} could not be read: {exc}") from None
    if type(reply.get("raised")) is dict:
        raise StudentError(function, reply["raised"])
    if "exited" in reply:
        raise StudentExited(f"your code called sys.exit({str(reply['exited'])[:100]}) "
                            f"during {what}")
    if "missing" in reply:
        raise MissingFunction(f"your module has no function named {function!r}")
    if type(reply.get("import_error")) is dict:
        error = StudentError(function, reply["import_error"])
        where = f" ({error.where})" if error.where else ""
        raise ImportFailed(f"your module could not be imported: {error.described}{where}")
    if "codec_error" in reply:
        raise Uncheckable(f"{what} returned something the grader cannot check: "
                          f"{str(reply['codec_error'])[:500]}")
    raise _Malformed(f"the sandbox sent an unexpected reply during {what}")


class _KeptRanks:
    """Rank workers kept between scenarios, by the GPUs they simulate (fixed at their start).

    Given back once every rank of a scenario replied, each is asked to reset (its process
    groups destroyed, its environment restored: sandbox_runtime/worker.py `_reset`) without
    waiting: destroying a gloo group takes ~20 ms of wall time but little CPU. The answer is
    read when the rank is taken again; a rank that did not reset in time is ended. A process
    serves one rank number only: what it kept of one scenario's inputs (`per_rank`) is never
    another rank's.
    """

    LIMIT = 8  # ranks kept at most: each holds 10 to 16 MB of its own (measured) meanwhile
    RESET_SECONDS = 5.0

    def __init__(self) -> None:
        self._idle: dict[int, list[_Process]] = {}
        self._resetting: set[int] = set()  # pids whose reset answer is still unread

    def processes(self) -> list[_Process]:
        return [process for idle in self._idle.values() for process in idle]

    def take(self, gpus: int, ranks: Sequence[int]
             ) -> tuple[list[_Process | None], list[_Process]]:
        """For each of `ranks` simulating `gpus`, the kept process of that rank number that
        did reset (None: none); and the processes to end (no reset)."""
        slots: list[_Process | None] = [None] * len(ranks)
        index = {rank: i for i, rank in enumerate(ranks)}
        left, ended = [], []
        deadline = time.monotonic() + self.RESET_SECONDS
        for process in self._idle.pop(gpus, []):
            slot = index.get(process.rank)
            if slot is None or slots[slot] is not None:
                left.append(process)
            elif self._was_reset(process, deadline):
                slots[slot] = process
            else:
                ended.append(process)
        if left:
            self._idle[gpus] = left
        return slots, ended

    def _was_reset(self, process: _Process, deadline: float) -> bool:
        if process.pid not in self._resetting:
            return True
        self._resetting.discard(process.pid)
        try:
            reply = process.read(max(0.0, deadline - time.monotonic()))
        except (wire.WireClosed, wire.WireTimeout, wire.WireTooLarge, codec.CodecError,
                OSError):
            return False
        process.output_offset = _size(process.output_path)  # (what the reset printed: no one's)
        return reply.get("reset") is True

    def give(self, gpus: int, processes: list[_Process]) -> list[_Process]:
        """Keep `processes` (each asked to reset); returns those to end: over LIMIT, the
        ranks simulating other GPUs go first, the longest kept first."""
        for process in processes:
            process.send({"op": "reset"})
            self._resetting.add(process.pid)
        self._idle[gpus] = processes + self._idle.pop(gpus, [])  # (the newest last to go)
        over = len(self.processes()) - self.LIMIT
        ended: list[_Process] = []
        for key in [key for key in self._idle if key != gpus] + [gpus]:
            idle = self._idle[key]
            while over > 0 and idle:
                ended.append(idle.pop())
                over -= 1
            if not idle:
                del self._idle[key]
        for process in ended:
            self._resetting.discard(process.pid)
        return ended

    def withdraw(self, processes: list[_Process]) -> list[_Process]:
        """Those of `processes` still kept, no longer kept (to be ended)."""
        pids = {process.pid for process in processes}
        found = []
        for gpus in list(self._idle):
            found += [p for p in self._idle[gpus] if p.pid in pids]
            self._idle[gpus] = [p for p in self._idle[gpus] if p.pid not in pids]
            if not self._idle[gpus]:
                del self._idle[gpus]
        self._resetting -= pids
        return found

    def clear(self) -> list[_Process]:
        """Every kept rank, forgotten (to be ended)."""
        kept = self.processes()
        self._idle.clear()
        self._resetting.clear()
        return kept


class Sandbox:
    """The long-lived sandbox of one submission for plain calls and probes.

    Restarted after any crash, exit or timeout, so one failure affects only the test in flight.
    """

    def __init__(self, sandbox_dir: Path, module_name: str, limits: SandboxLimits,
                 output_path: Path, isolation: Isolation | None = None,
                 starts: Starts = Starts(), imports: ImportBudget | None = None,
                 keep_ranks: bool = True) -> None:
        self.sandbox_dir, self.module_name, self.limits = sandbox_dir, module_name, limits
        # Whether rank workers may serve more than one scenario (see run_ranks): not where
        # ranks use real GPUs, whose state a reset does not undo.
        self.keep_ranks = keep_ranks
        self._kept = _KeptRanks()
        self._stores_seen: list[StoreView] = []  # the last scenario's stores, once it ended
        self._rank_logs = 0
        self.starts = starts
        # Each serving worker's start and import is charged to it, the first zygote's start
        # excepted (None: no limit; see _ensure_started).
        self.imports = imports
        self.output_path = output_path
        # What its workers' audit hooks note, read from their channels as they run and kept in
        # a file of ours next to the output (see autograder.sandbox.events).
        self.events = EventRecorder(output_path.with_name(output_path.stem + EVENTS_SUFFIX))
        self.isolation = detect() if isolation is None else isolation
        self.ids = sandbox_ids()
        prepare_folder(sandbox_dir, self.isolation, self.ids)
        self._zygote: Zygote | None = None
        # Its serving workers, by the GPUs they simulate (fixed before the student's import):
        # a test on simulated GPUs between two plain ones no longer restarts the plain worker.
        self._workers: dict[int, _Process] = {}
        self._store_host: StoreHost | None = None  # its scenarios' rendezvous stores
        self._observers: ObserverHost | None = None  # its scenarios' observers' process
        self._import_hang: str | None = None
        self._budget: float | None = None
        self._output_offset = 0
        self._served = False  # whether a zygote of this sandbox ever forked a worker
        # Set once a zygote could not start (the grader's failure): nothing is tried again.
        self.unavailable: SandboxUnavailable | None = None
        # Time spent starting zygotes (the grader's, not the student's): tests' budgets are
        # extended by it (see pytest_plugin.Student).
        self.grader_seconds = 0.0
        # The student exceptions the last call or scenario caught and noted (a probe that
        # reports an error as data): the plugin tells a NotImplementedError by its class.
        self.caught: list[StudentError] = []

    def zygote(self) -> Zygote:
        """The submission's zygote, started again if student code killed it."""
        if self._zygote is None or not self._zygote.alive:
            self._drop_zygote()
            if self._served and self.isolation.drop_uid:
                # Student code ran as this uid: whatever it left running (in `uid` mode it may
                # have left its session and kill the new zygote, or hold the uid's process
                # limit) goes before the new zygote starts. In namespaces it died with PID 1.
                # Once its zygote and workers are killed, nothing of this uid should be left:
                # what is (a detached process that may have killed that zygote) is recorded.
                self.restart()  # (the serving workers: kill_uid would end them too)
                left = len(strays(process_table(), None, (), self.ids[0]))
                kill_uid(self.ids[0])
                if left:
                    self.events.record("left_running", f"{left} process(es) of your code were "
                                                       "still running when its sandbox was "
                                                       "started again (they were stopped)")
            clean = not self._served or self.isolation.mode != "none"
            log = self.output_path.with_name(self.output_path.stem + "-zygote.log")
            try:
                self._zygote = Zygote(self.sandbox_dir, self.limits, log, self.isolation,
                                      self.ids, self.starts, clean, self.events)
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxUnavailable(f"the sandbox's first process could not be started "
                                         f"({type(exc).__name__}: {exc})") from None
        return self._zygote

    def _fork(self, mode: str, output_path: Path, gpus: int) -> _Process:
        """A fresh worker; the time it takes (a zygote's start included) is the grader's."""
        if self.unavailable is not None:
            raise self.unavailable
        started = time.monotonic()
        try:
            try:
                return _Process(self.zygote(), self.module_name, mode, output_path, gpus)
            except SandboxUnavailable:
                # Once more with a fresh zygote: one that was only slow to answer (a loaded
                # machine) should not cost the whole grading; a broken set-up fails again.
                self._drop_zygote()
                return _Process(self.zygote(), self.module_name, mode, output_path, gpus)
        except SandboxUnavailable as exc:
            self.unavailable = exc
            raise
        finally:
            self.grader_seconds += time.monotonic() - started

    # Importing the student's module (once per worker) may take longer than one call: it gets
    # this much, or the test's remaining time (`budget`) when that is shorter. A hang costs
    # it once per submission (see _import_hang).
    IMPORT_SECONDS = 30.0

    def call(self, name: str, args: Sequence, kwargs: dict, timeout: float | None = None,
             budget: float | None = None, gpus: int = 0) -> Any:
        """`name(*args, **kwargs)` in the student's module; with `gpus`, in a worker that
        simulates that many GPUs (see sandbox_runtime/simulated_cuda.py)."""
        self._budget = budget
        return self._request({"op": "call", "name": name, "args": tuple(args),
                              "kwargs": dict(kwargs)}, name, name, timeout, gpus)

    def probe(self, name: str, args: Sequence, kwargs: dict, function: str,
              timeout: float | None = None, budget: float | None = None, gpus: int = 0) -> Any:
        self._budget = budget
        return self._request({"op": "probe", "name": name, "args": tuple(args),
                              "kwargs": dict(kwargs)}, f"{function} (scenario {name})", function,
                             timeout, gpus)

    def _request(self, request: dict, what: str, function: str, timeout: float | None,
                 gpus: int = 0) -> Any:
        timeout = self.limits.call_timeout if timeout is None else timeout
        self.caught = []
        if self._import_hang is not None:
            raise ImportHang(self._import_hang)
        process = self._ensure_started(timeout, gpus)
        process.send(request)
        try:
            reply = self._read(process, timeout, what)
        except _EndedEarlier:
            process = self._ensure_started(timeout, gpus)  # a fresh worker, once
            process.send(request)
            reply = self._read(process, timeout, what)
        self.caught = caught_errors(reply, function)
        try:
            return _outcome(reply, what, function)
        except _Malformed:
            self.restart()  # the reply stream may be out of step: start clean
            raise

    # Serving workers alive at once at most (the plain one and one simulating GPUs): each
    # holds its memory while rank scenarios run beside them.
    MAX_WORKERS = 2

    def _ensure_started(self, timeout: float, gpus: int = 0) -> _Process:
        if gpus not in self._workers:
            if len(self._workers) >= self.MAX_WORKERS:
                self._retire(next(iter(self._workers)))  # the one started first
            imports = self.imports
            if imports is not None:
                imports.refuse_if_spent()
            # The worker's start and import are charged to the submission's imports, but for
            # the first zygote's start (the grader's alone).
            first = self._zygote is None and not self._served
            started = time.monotonic()
            # Starting (or restarting) the zygote is the grader's time, not the student's.
            process = self._fork("serve", self.output_path, gpus)
            self._workers[gpus] = process
            if first:
                started = time.monotonic()
            allowed = max(timeout, self.IMPORT_SECONDS)
            if self._budget is not None:
                allowed = max(timeout, min(allowed, self._budget))
            capped = imports is not None and imports.left() < allowed
            if capped:
                allowed = max(0.0, imports.left())
            try:
                try:
                    ready = self._read(process, allowed, "the import of your module")
                finally:
                    if imports is not None:
                        imports.charge(time.monotonic() - started, imported=True)
            except SandboxTimeout as exc:
                if capped:  # stopped by what was left of the allowance, not by a hang
                    raise ImportStopped(imports.message(
                        "the import of your module was stopped: ")) from None
                # Not retried for every test: one hanging import costs one time limit.
                self._import_hang = (f"importing your module took longer than "
                                     f"{seconds_text(allowed)} s (the other tests were not run)")
                raise ImportHang(str(exc)) from None
            except SandboxCrash as exc:  # the import crashed: no function is to blame
                raise ImportCrash(str(exc)) from None
            if ready.get("ready") is not True:
                self.restart()
                raise SandboxFailure("the sandbox did not start properly")
        return self._workers[gpus]

    def _read(self, process: _Process, timeout: float, what: str) -> dict:
        try:
            return process.read(timeout)
        except wire.WireTimeout:
            self.restart()
            raise SandboxTimeout(timeout, what) from None
        except wire.WireClosed:
            ended = process.how_it_ended()
            earlier = process.ended_before_last_send()
            self.restart()
            if earlier:
                raise _EndedEarlier() from None
            raise _crash(process)(f"your code {ended} during {what}") from None
        except (wire.WireTooLarge, codec.CodecError) as exc:
            self.restart()
            raise UnreadableReply(f"{what} sent back an unreadable reply: {exc}") from None

    def restart(self) -> None:
        """Kill the sandbox's workers (each with its whole process group); the next call starts
        a fresh one."""
        kept = self._kept.clear()
        if self._workers or kept:
            workers, self._workers = list(self._workers.values()) + kept, {}
            for process in workers:
                process.signal()
            for process in workers:
                process.kill()
            for process in kept:
                _unlink(process.output_path)
            self._stop_strays()

    def _retire(self, gpus: int) -> None:
        """Kill the worker simulating `gpus` GPUs, and what it left running."""
        self._workers.pop(gpus).kill()
        self._stop_strays()

    # Rounds of looking for strays once workers ended: a stray that forks between a look and
    # its kill leaves a child, found by the next round (the uid's process limit bounds them).
    STRAY_ROUNDS = 3
    STRAY_END_WAIT = 5.0  # seconds

    def _stop_strays(self, table: dict[int, ProcessEntry] | None = None) -> None:
        """Kill what student code left running once the workers that started it ended (a
        detached process, a new session: what killing a worker's group misses), keeping the
        zygote and the serving workers; recorded for staff. Without it, each rank's import
        could leave one more behind for the rest of the grading (a detached copy of a worker,
        torch imported, costs tens of MB as its pages are written: the 768 MB of a Gradescope
        container ran out). In `none` mode orphans leave the zygote's tree: not found.
        `table`: the first round's, read since the last process of the sandbox ended."""
        zygote = self._zygote
        if zygote is None or not zygote.alive:
            return  # (a new zygote clears what its predecessor left: see zygote())
        if zygote.host_pid() < 0:
            return
        keep = {process.pid for process in self._workers.values()}
        keep.update(process.pid for process in self._kept.processes())
        uid = self.ids[0] if self.isolation.drop_uid else None
        stopped = 0
        for _ in range(self.STRAY_ROUNDS):
            found = strays(table or self._table(), zygote.host_pid(), keep, uid)
            table = None
            for pid, started in found.items():
                kill_if_same(pid, started)
            stopped += len(found)
            if not found:
                break
            # Until they have ended, they still hold their memory and may run beside the next
            # scenario (a SIGKILLed process ends only when next scheduled).
            wait_ended(found, timeout=self.STRAY_END_WAIT)
        if stopped:
            self.events.record("left_running", f"{stopped} process(es) left running after "
                                               "their workers ended were stopped")

    def _table(self) -> dict[int, ProcessEntry]:
        """The processes a sandbox's strays are among: in `uid` mode every process (an orphan
        leaves the zygote's tree), otherwise the zygote's tree (in namespaces, orphans are
        reparented to the zygote and nothing of the sandbox outlives its PID namespace; in
        `none` mode they leave the tree and are not found anyway)."""
        zygote = self._zygote
        if self.isolation.mode == "uid" or zygote is None or zygote.host_pid() < 0:
            return process_table()
        return process_table(under=zygote.host_pid())

    def close(self) -> None:
        """Kill every process of this sandbox, the zygote included; then read out what their
        event channels still held."""
        self.restart()
        self._drop_zygote()
        self.events.settle(timeout=5)

    def _drop_zygote(self) -> None:
        for process in self._kept.clear():  # (they ended with it: PDEATHSIG)
            process.forget()
        if self._zygote is not None:
            self._served |= self._zygote.served  # a later zygote must know what ran as its uid
            self._zygote.close()
            self._zygote = None
        self._drop_store_host()  # (in namespaces, these two joined the zygote's network)
        self._drop_observers()

    def _drop_store_host(self) -> None:
        if self._store_host is not None:
            self._store_host.close()
            self._store_host = None

    def _drop_observers(self) -> None:
        if self._observers is not None:
            self._observers.kill()
            self._observers = None

    def _observer_host(self, netns: int | None) -> ObserverHost:
        """The process to run the next scenario's observer: the last one's, when it was reset
        for another (see observer.py), else a fresh one."""
        host = self._observers
        if host is None or host.netns_pid != netns or not host.ready(READY_SECONDS):
            self._drop_observers()
            host = self._observers = ObserverHost(netns)
        return host

    def run_ranks(self, probe: str, world_size: int, args: Sequence, timeout: float,
                  output_dir: Path, function: str, gpus: int = 0,
                  per_rank: Sequence | None = None, stores: int = 1,
                  store_host: str = "127.0.0.1", observer: Observer | None = None
                  ) -> RankResults:
        """Run `probe(module, rank, world_size, port, *more_ports, *args)` in `world_size`
        rank workers (each simulating `gpus` GPUs when not 0), each rank's output in
        `output_dir`/rank{r}.log. With `per_rank`, rank r alone also gets `per_rank[r]` as its
        last argument, so no rank can know another's inputs.

        With `observer`, rank `observer.rank` is the grader's own (see observer.py): forked
        from this process, not the sandbox, and its record comes back as
        `RankResults.observed`; a failure it saw raises ObservedFailure.

        `port` (and the `stores - 1` more ports) is a rendezvous store hosted here, which
        the ranks' `init_process_group` joins as clients (see rendezvous.py), listening at
        `store_host` only; what each store saw comes back with the results
        (`RankResults.stores`).

        With `keep_ranks`, the ranks of a scenario that all replied are reset and kept for
        later scenarios on the same (simulated) GPUs (`_KeptRanks`): forking and ending a
        process that has torch loaded is most of a short scenario's CPU time. Any other end
        kills them, and the next scenario forks fresh ones."""
        self.caught = []
        if self.starts.stores is None:  # the grader's own mistake: no scenario can run here
            raise SandboxUnavailable("this sandbox was started without rendezvous stores")
        if self._import_hang is not None:  # each rank would import, and hang, again
            raise ImportHang(self._import_hang)
        scenario = (probe, world_size, args, timeout, output_dir, function, gpus, per_rank,
                    stores, store_host)
        try:
            return self._scenario(*scenario, observer, reuse=True)
        except _EndedEarlier:  # a kept rank had ended since its last scenario: not this one's
            return self._scenario(*scenario, observer, reuse=False)

    def _scenario(self, probe: str, world_size: int, args: Sequence, timeout: float,
                  output_dir: Path, function: str, gpus: int, per_rank: Sequence | None,
                  stores: int, store_host: str, observer: Observer | None, reuse: bool
                  ) -> RankResults:
        """The student's ranks' scenario, and its observer's verdict when it has one."""
        if observer is None:
            return self._student_ranks(probe, world_size, args, timeout, output_dir, function,
                                       gpus, per_rank, stores, store_host, None, None, reuse)
        if not 0 <= observer.rank < world_size:
            raise ValueError(f"an observer's rank must be below {world_size}")
        def start(ports: list[int], ranks: tuple[int, ...]) -> ObserverProcess:
            netns = self.zygote().popen.pid if self.isolation.mode == "namespaces" else None
            return self._observer_host(netns).observe(observer, world_size, ports, store_host,
                                                      output_dir / "observer", timeout, ranks)

        observing = _Observing(start)
        try:
            results = self._student_ranks(probe, world_size, args, timeout, output_dir,
                                          function, gpus, per_rank, stores, store_host,
                                          observer.rank, observing, reuse)
        except (SandboxFailure, StudentError) as exc:
            # The student's ranks failed, often because the observer ended first (gloo ended
            # its peers' collectives): what the observer saw is the reason to give. Not when
            # they ran out of time with the observer still waiting: its peers' end was ours.
            process = observing.process
            if process is None or (isinstance(exc, SandboxTimeout) and
                                   not observing.ended_first):
                if process is not None:
                    process.kill()
                raise
            observed = process.finish(observer.wait + GRACE_SECONDS)
            failure = observed.failure()
            # Met: the observer said so, or every rank reached the group at the grader's store
            # (a rank that raised right after its group was up may be ended before the
            # observer's side of the group's start is done, and with it the observer's join).
            met = observed.joined or any(len(view.ranks_met()) == world_size
                                         for view in self._stores_seen)
            if failure is None or not met:
                # (no failure of theirs, or the student's ranks never met the observer: their
                # own error, say an import's, is why)
                raise
            # What the student's code raised meanwhile, unless it may be only torch.distributed
            # saying that its peer, the observer, had ended first (a RuntimeError).
            student = exc if isinstance(exc, StudentError) else None
            if student is not None and (observed.waited_in_vain
                                        or not student.is_a("RuntimeError")):
                failure = f"{failure}; meanwhile {student}"
            raise ObservedFailure(failure, student) from None
        except BaseException:
            if observing.process is not None:
                observing.process.kill()
            raise
        assert observing.process is not None  # (started before any rank was told to run)
        observed = observing.process.finish(observer.wait + GRACE_SECONDS)
        failure = observed.failure()
        if failure is not None:
            raise ObservedFailure(failure, None)
        results.observed = observed.record
        return results

    def _student_ranks(self, probe: str, world_size: int, args: Sequence, timeout: float,
                       output_dir: Path, function: str, gpus: int, per_rank: Sequence | None,
                       stores: int, store_host: str, observer_rank: int | None,
                       observing: _Observing | None, reuse: bool) -> RankResults:
        """Fork (or take kept) rank workers for every rank but `observer_rank`, and run the
        probe in them (`observing` starts once the stores' ports are known, before any rank
        is told to run)."""
        what = f"{function} (scenario {probe}, {world_size} processes)"
        ranks = [rank for rank in range(world_size) if rank != observer_rank]
        slots: list[_Process | None] = [None] * len(ranks)
        if reuse and self.keep_ranks:
            slots, ended = self._kept.take(gpus, ranks)
            if ended:
                self._end_ranks(ended)
        processes = [process for process in slots if process is not None]
        reused = {process.pid for process in processes}
        ports: list[int] = []
        replies: list[dict] = []
        self._stores_seen = []
        reusable = on_trial = False
        try:
            for index, kept in enumerate(slots):
                if kept is None:
                    processes.insert(index, self._fork("rank", self._rank_log(), gpus))
                    processes[index].rank = ranks[index]
            if any(process.gone() for process in processes if process.pid in reused):
                raise _EndedEarlier()  # a kept rank ended since its reset: not this one's doing
            ports = self._stores(stores, store_host)
            if observing is not None:  # (a pid < 0 stands for a worker already ended)
                observing.start(ports, tuple(p.pid for p in processes if p.pid > 0))
            for process in processes:
                rank = process.rank
                own = () if per_rank is None else (per_rank[rank],)
                process.send({"op": "probe", "name": probe, "env": AGENT_STORE_ENV,
                              "args": (rank, world_size, *ports, *args, *own), "kwargs": {}})
            deadline = time.monotonic() + timeout
            for process in processes:
                rank = process.rank
                try:
                    replies.append(process.read(max(0.1, deadline - time.monotonic())))
                except wire.WireTimeout:
                    if any(p.gone_before_send for p in processes if p.pid in reused):
                        raise _EndedEarlier() from None  # the others waited for it
                    if observing is not None:
                        observing.timed_out()
                    raise SandboxTimeout(timeout, what) from None
                except wire.WireClosed:
                    if process.pid in reused and process.ended_before_last_send():
                        raise _EndedEarlier() from None
                    ended = process.how_it_ended()
                    raise _crash(process)(f"your code {ended} in rank {rank} during {what}") \
                        from None
                except (wire.WireTooLarge, codec.CodecError) as exc:
                    raise UnreadableReply(f"rank {rank} sent back an unreadable reply: {exc}") \
                        from None
            # Kept for later scenarios when every rank replied. When an observer waits on
            # ranks that did not all return (raised), on trial: their reset closes their group's
            # sockets, which ends its pending collectives, unless something still holds the
            # group (torch's FSDP and DDP keep its sockets open past a reset); ended then, since
            # their end does (TRIAL_SECONDS).
            reusable = True
            on_trial = observing is not None and not all("value" in r for r in replies)
            self.caught = [error for reply in replies
                           for error in caught_errors(reply, function)][:MAX_CAUGHT]
            views = self._stores_seen = self._store_host.views()
            return RankResults([_outcome(reply, what, function) for reply in replies], views,
                               [process.rank for process in processes])
        finally:
            if ports and not self._stores_seen:  # (stops this scenario's stores)
                self._stores_seen = self._store_host.views()
            try:
                _copy_rank_output(processes, output_dir, self.limits.output_bytes)
            finally:
                if reusable and self.keep_ranks:  # every rank is done with its peers
                    table = self._table()
                    keep, end = self._fit_to_keep(processes, table)
                    end += self._kept.give(gpus, keep)
                    self._end_ranks(end, table=None if end else table)
                    if on_trial and keep and not observing.process.ends_within(TRIAL_SECONDS):
                        self._end_ranks(self._kept.withdraw(keep))  # (their end ends its wait)
                else:
                    self._end_ranks(processes)

    def _fit_to_keep(self, processes: list[_Process], table: dict[int, ProcessEntry]
                     ) -> tuple[list[_Process], list[_Process]]:
        """The ranks that may serve another scenario, and those to end: one that still runs a
        process of its own (it would go on beside later tests), or has used half of its CPU
        time or open files (a later scenario would be cut short by what this one spent)."""
        parents = {entry.ppid for entry in table.values() if not entry.dying}
        keep, end = [], []
        for process in processes:
            fit = process.pid not in parents and process.pid in table
            if fit:
                try:
                    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1]
                    ticks = sum(int(value) for value in fields.split()[11:13])
                    cpu = ticks / os.sysconf("SC_CLK_TCK")
                    files = len(os.listdir(f"/proc/{process.pid}/fd"))
                except (OSError, ValueError, IndexError):
                    cpu, files = float("inf"), 0
                fit = cpu < self.limits.cpu_seconds / 2 and \
                    files < self.limits.max_open_files / 2
            (keep if fit else end).append(process)
        return keep, end

    def _end_ranks(self, processes: list[_Process],
                   table: dict[int, ProcessEntry] | None = None) -> None:
        """End `processes` (each with its process group), then what any rank left running:
        after every scenario, kept ranks or not (`table`: see _stop_strays)."""
        for process in processes:  # every rank signalled first: they die side by side
            process.signal()
        for process in processes:
            process.kill()
            _unlink(process.output_path)
        self._stop_strays(table)

    def _rank_log(self) -> Path:
        """A fresh file for one rank worker's output (copied to each scenario's folder)."""
        self._rank_logs += 1
        return self.output_path.with_name(f"{self.output_path.stem}-rank{self._rank_logs}.log")

    def _stores(self, count: int, host: str) -> list[int]:
        """The ports of `count` fresh rendezvous stores the zygote's network namespace
        reaches; stores that cannot start are the grader's failure (the ranks could not meet
        however right their code)."""
        # Only namespaces give a sandbox a network of its own; in `uid` mode (a container, where
        # /proc/<pid>/ns of another uid's process is not even readable without CAP_SYS_PTRACE)
        # the ranks share this one.
        server = self.starts.stores
        assert server is not None  # (run_ranks refused first)
        netns = self.zygote().popen.pid if self.isolation.mode == "namespaces" else None
        last = self._store_host
        if last is not None and (not last.usable or last.netns_pid != netns):
            self._drop_store_host()
        for attempt in range(2):  # once more with a new host: a scenario's ranks may have
            try:                  # broken the last one (made it big, killed it)
                if self._store_host is None:
                    self._store_host = StoreHost(netns, server)
                return self._store_host.open(count, host)
            except StoreUnavailable as exc:
                self._drop_store_host()
                if attempt:
                    raise SandboxUnavailable(str(exc)) from None
        raise AssertionError("unreachable")

    def take_output(self) -> tuple[str, bool]:
        """Output written since the last call, capped; and whether it was cut."""
        try:
            with open(self.output_path, "rb") as f:
                f.seek(self._output_offset)
                data = f.read(self.limits.output_bytes + 1)
                end = f.seek(0, os.SEEK_END)
        except OSError:
            return "", False
        self._output_offset = end
        cut = len(data) > self.limits.output_bytes or end > self._output_offset
        return data[: self.limits.output_bytes].decode("utf-8", "replace"), cut


