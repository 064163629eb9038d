"""Warm runners for batch grading: pytest and torch imported once, one fresh runner forked per job.

`python -I -m autograder.grading.warm_runner FD` imports what every runner needs (pytest, torch, the
plugin; about 1.8 s), proves the isolation once, then waits on the SOCK_SEQPACKET socket FD. Each
request carries a `Job` as JSON and two descriptors (the results pipe, the log); the server forks,
and the child becomes the runner exactly as `python -I -m autograder.grading.runner` would: its own
session, not dumpable, umask 077, the hidden tests imported fresh. The server itself never
collects tests, never sees a submission and never initialises CUDA, so every fork starts clean.

Each forked runner also gets a channel back to the server for its sandbox zygotes: the server
forks one per request, and the fork enters the submission's cgroup, limits, namespaces and uid
(`_become_zygote`), so sandboxes skip the interpreter and torch start-up too.

`RunnerServer` is the client, used by `autograder.grading.supervisor` when a batch worker installed
one;
`ForkChannel` is the client side of either kind of request.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading


def serve(control_fd: int) -> None:
    import pytest  # noqa: F401 - what every runner would import again
    import torch
    import torch._dynamo  # noqa: F401 - and every sandbox zygote (see sandbox_runtime.worker)
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    from autograder.grading.pytest_plugin import Job
    from autograder.grading.runner import run
    from autograder.project import budgets
    from autograder.sandbox import client as sandbox  # noqa: F401
    from autograder.sandbox.isolation import detect

    # Everything a warm zygote's workers import, imported here: a fork enters a file-system
    # view where the grader's package is not, so a module imported later fails (simulated
    # GPUs did: every simulated-GPU test of a batch failed at the student's import).
    from autograder.sandbox_runtime import simulated_cuda, worker  # noqa: F401

    torch.set_num_threads(1)  # no math here; a fork after multi-threaded work can deadlock
    detect()  # cached: forked runners inherit the proven isolation
    budgets.calibration_seconds()  # once per worker: forked runners inherit the machine factor
    # What is imported now stays: the collector never walks it again in a forked runner or
    # zygote (fewer pages copied on write, cheaper collections).
    gc.collect()
    gc.freeze()
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runners: set[int] = set()
    channels: dict[socket.socket, set[int]] = {}  # a runner's zygote channel -> its zygotes
    while True:
        ready = select.select([control, wake_r, *channels], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(runners, channels, control)
        for channel in [c for c in ready if c in channels]:
            try:
                message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 2)
            except OSError:
                message, fds = b"", []
            if not message:  # that runner is gone; its zygotes end when their socket closes
                del channels[channel]
                channel.close()
                continue
            try:
                pid = os.fork()
            except OSError:
                pid = -1  # the runner hears nothing, gives up and starts its zygote cold
            if pid == 0:
                _become_zygote(json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            if pid > 0:
                channels[channel].add(pid)
                try:
                    channel.send(json.dumps({"spawned": pid}).encode())
                except OSError:
                    pass  # the runner died meanwhile; the zygote ends on its own
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 2)
        if not message:
            os._exit(0)  # the batch worker is gone
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with us
                for fd in (control.detach(), wake_r, wake_w, ours.detach(),
                           *(c.detach() for c in channels)):
                    os.close(fd)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sandbox.warm_zygotes = WarmZygotes(theirs)
                results_fd, log_fd = fds
                job = Job(**json.loads(message))
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                os.chdir(job.output_dir)
                ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as runner.main
                os.umask(0o077)
                code = run(job, results_fd)
                sys.stdout.flush()  # pytest's summary, for runner.log
                sys.stderr.flush()
                os._exit(code)
            except BaseException:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                os._exit(70)
        for fd in fds:
            os.close(fd)
        theirs.close()
        channels[ours] = set()
        runners.add(pid)
        control.send(json.dumps({"spawned": pid}).encode())


def _reap(runners: set[int], channels: dict[socket.socket, set[int]],
          control: socket.socket) -> None:
    """Report every child that ended to whoever asked for it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        message = json.dumps({"exited": pid, "status": status}).encode()
        if pid in runners:
            runners.discard(pid)
            control.send(message)
            continue
        for channel, zygotes in channels.items():
            if pid in zygotes:
                zygotes.discard(pid)
                try:
                    channel.send(message)
                except OSError:
                    pass


def _become_zygote(request: dict, fds: list[int]) -> None:
    """In a fresh fork of the server: enter one submission's sandbox and serve as its zygote.

    Exactly what `python -c <launcher> ... -- python -c <boot> zygote FD` does, minus the two
    interpreter starts and the torch import: new session, only the zygote's socket and output
    left open, the sandbox's environment, cgroup and limits, then the launcher's namespaces,
    file-system view and unprivileged user (see isolation_launcher.enter_namespaces)."""
    try:
        from autograder.sandbox import client as sandbox
        from autograder.sandbox import launcher as isolation_launcher
        from autograder.sandbox_runtime import worker

        control_fd, out_fd = fds
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        for target, source in ((0, null), (1, out_fd), (2, out_fd)):
            os.dup2(source, target)
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd != control_fd:
                try:
                    os.close(fd)  # the server's sockets and every other runner's channel
                except OSError:
                    pass
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sandbox.enter_limits(request["rlimits"], request["cgroup_procs"])
        spec = request["spec"]
        os.chdir(spec["cwd"])
        os.environ.clear()
        os.environ.update(spec["env"])
        isolation_launcher.enter_namespaces(spec)  # returns in PID 1, as the sandbox user
        # Not dumpable (changing uid cleared the flag; the zygote clears it anyway, as in a cold
        # sandbox): its workers may not ptrace it.
        sys.path.append(spec["cwd"])  # the student's folder last, as in the usual boot
        # A cold sandbox runs the runtime as the package `agsandbox` (a copy in its folder),
        # and probes import it by that name (simulated_cuda.journal()): the same modules here.
        from autograder import sandbox_runtime
        from autograder.sandbox_runtime import codec, simulated_cuda, wire

        sys.modules[sandbox.RUNTIME_PACKAGE] = sandbox_runtime
        for module in (codec, simulated_cuda, wire, worker):
            sys.modules[f"{sandbox.RUNTIME_PACKAGE}.{module.__name__.rsplit('.', 1)[1]}"] = module
        sys.argv[:] = ["sandbox"]
        worker.main(["zygote", str(control_fd)])
    except BaseException:  # noqa: BLE001 - say why, then fail like the launcher does
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(121)


class ForkedChild:
    """A child the server forked for us: the parts of `subprocess.Popen` the callers use."""

    def __init__(self, channel: ForkChannel, pid: int) -> None:
        self.channel, self.pid = channel, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        status = self.channel.status_of(self.pid, timeout)
        if status is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class ForkChannel:
    """Our end of a socket to the server: ask it to fork (a message and two descriptors), hear
    the child's pid, and later how it ended. Used for runners and for zygotes alike."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._lock = threading.Lock()  # one request at a time
        self._spawned: queue.Queue[int | None] = queue.Queue()
        self._statuses: dict[int, int] = {}
        self._changed = threading.Condition()
        self.alive = True
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            if "spawned" in message:
                self._spawned.put(message["spawned"])
            else:
                with self._changed:
                    self._statuses[message["exited"]] = message["status"]
                    self._changed.notify_all()
        with self._changed:
            self.alive = False
            self._changed.notify_all()
        self._spawned.put(None)

    def fork(self, request: str, fds: list[int]) -> ForkedChild | None:
        """The forked child, or None if the server is gone or did not answer in time."""
        with self._lock:
            if not self.alive:
                return None
            try:
                socket.send_fds(self._socket, [request.encode()], fds)
                pid = self._spawned.get(timeout=60)
            except (OSError, queue.Empty):
                pid = None
            if pid is None:  # never wait on this channel again: a late reply would mislead
                self.close()
                return None
        return ForkedChild(self, pid)

    def status_of(self, pid: int, timeout: float | None) -> int | None:
        """The child's wait status; None on timeout. A server that died took its children
        with it: they count as killed."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._statuses or not self.alive, timeout)
            if pid in self._statuses:
                return self._statuses.pop(pid)
            return None if self.alive else signal.SIGKILL

    def close(self) -> None:
        self.alive = False
        self._socket.close()


class WarmZygotes:
    """A forked runner's source of zygotes (installed as sandbox.warm_zygotes)."""

    def __init__(self, sock: socket.socket) -> None:
        self.channel = ForkChannel(sock)

    def start(self, spec: dict, rlimits: dict[str, int], cgroup_procs: list[str],
              control_fd: int, out_fd: int) -> ForkedChild | None:
        """A zygote in a new sandbox built from `spec`; None if the server is gone."""
        request = {"spec": spec, "rlimits": rlimits, "cgroup_procs": cgroup_procs}
        return self.channel.fork(json.dumps(request), [control_fd, out_fd])


_PASSED_ON = ("PATH", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES",
              "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "AUTOGRADER_ISOLATION",
              "AUTOGRADER_ROOT", "AUTOGRADER_SANDBOX_SHARE")


def server_env() -> dict[str, str]:
    """The server's environment, which its zygotes' memory (and /proc/self/environ) carry into
    every sandbox: only what grading needs, never a TA's tokens."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON}
    # torch reads these when imported, here, once for every sandbox forked later.
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


class RunnerServer:
    """Started by a batch worker (see batch_worker.warm_up); `spawn` forks a warm runner."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-m", "autograder.grading.warm_runner", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), start_new_session=True, env=server_env())
        theirs.close()
        self.channel = ForkChannel(ours)

    @property
    def alive(self) -> bool:
        return self.channel.alive

    def spawn(self, job_json: str, results_fd: int, log_fd: int) -> ForkedChild | None:
        """A new runner for `job_json`; None if the server is gone (start one the usual way)."""
        forked = self.channel.fork(job_json, [results_fd, log_fd])
        if forked is None:
            self.close()
        return forked

    def close(self) -> None:
        self.channel.close()
        self.process.kill()
        self.process.wait()


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with its batch worker
    serve(int(sys.argv[1]))
