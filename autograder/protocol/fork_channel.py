"""Our side of a warm runner server (autograder.runner.warm): start it, ask it to fork.

`RunnerServer` starts `python -I -m autograder.runner.warm FD` and forks warm runners
through it; `WarmZygotes` is a forked runner's channel to the same server for its zygotes. Only
the standard library here: the trusted parent that holds a `RunnerServer` imports neither pytest
nor torch.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading


class ForkedChild:
    """A child the server forked for us: the parts of `subprocess.Popen` the callers use."""

    def __init__(self, channel: ForkChannel, pid: int) -> None:
        self.channel, self.pid = channel, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        # Its status is told once: later waits (a sandbox's close after it read why its zygote
        # ended) get the known code at once, as from subprocess.Popen, not a full timeout.
        if self.returncode is not None:
            return self.returncode
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


# The isolation settings too (AUTOGRADER_ISOLATION, AUTOGRADER_UNSAFE_NO_ISOLATION): forked
# runners must prove, or opt out of, the isolation their batch worker asked for.
_PASSED_ON = ("PATH", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES",
              "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "AUTOGRADER_ISOLATION",
              "AUTOGRADER_UNSAFE_NO_ISOLATION", "AUTOGRADER_ROOT", "AUTOGRADER_SANDBOX_SHARE")


# The name of a server's own cache folder: the only kind the server removes (see runner.warm).
SCRATCH_PREFIX = "autograder-server-"


def server_env() -> dict[str, str]:
    """The server's environment, which its zygotes' memory (and /proc/self/environ) carry into
    every sandbox: only what grading needs, never a TA's tokens."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON}
    # torch reads these when imported, here, once for every sandbox forked later.
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


class RunnerServer:
    """Started by a batch worker (autograder.batch.worker.Worker); `spawn` forks a warm
    runner."""

    def __init__(self, command: list[str] | None = None) -> None:
        """`command`: the server's, to which the socket's descriptor number is appended (the
        benchmarks start an instrumented one); by default `python -I -m autograder.runner.warm`."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Importing torch._dynamo makes an (empty) inductor cache folder in the temp folder:
        # the server's is a folder of its own, never the grading's or the machine's /tmp,
        # removed by close() or, if this process is killed, by the server when it sees us gone.
        self._scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        env = {**server_env(), "TORCHINDUCTOR_CACHE_DIR": self._scratch}
        command = command or [sys.executable, "-I", "-m", "autograder.runner.warm"]
        self.process = subprocess.Popen(
            [*command, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), start_new_session=True, env=env)
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
        shutil.rmtree(self._scratch, ignore_errors=True)


def start_runner_server() -> RunnerServer | None:
    """A warm runner server, or None when none can start (no process or descriptor to spare,
    say): runners then start cold, as they always can."""
    try:
        return RunnerServer()
    except OSError:
        return None
