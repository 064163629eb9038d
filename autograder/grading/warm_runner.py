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

Our side of it (`RunnerServer`, `ForkChannel`, `WarmZygotes`) is autograder.grading.fork_channel.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys


def serve(control_fd: int) -> None:
    import pytest  # noqa: F401 - what every runner would import again
    import torch
    import torch._dynamo  # noqa: F401 - and every sandbox zygote (see sandbox_runtime.worker)
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    from autograder.grading.fork_channel import WarmZygotes
    from autograder.grading.job import Job
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
                code = run(job, results_fd, zygotes=WarmZygotes(theirs))
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
        from autograder.sandbox.folder import RUNTIME_PACKAGE
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

        sys.modules[RUNTIME_PACKAGE] = sandbox_runtime
        for module in (codec, simulated_cuda, wire, worker):
            sys.modules[f"{RUNTIME_PACKAGE}.{module.__name__.rsplit('.', 1)[1]}"] = module
        sys.argv[:] = ["sandbox"]
        worker.main(["zygote", str(control_fd)])
    except BaseException:  # noqa: BLE001 - say why, then fail like the launcher does
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(121)


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with its batch worker
    serve(int(sys.argv[1]))
