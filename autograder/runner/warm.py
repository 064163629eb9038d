"""Warm runners for batch grading: pytest and torch imported once, one fresh runner forked per job.

`python -I -m autograder.runner.warm FD` imports what every runner needs (pytest, torch, the
plugin; about 1.8 s), proves the isolation once, then waits on the SOCK_SEQPACKET socket FD. Each
request carries a `Job` as JSON and two descriptors (the results pipe, the log); the server forks,
and the child becomes the runner exactly as `python -I -m autograder.runner.suite` would: its own
session, not dumpable, umask 077, the hidden tests imported fresh. The server itself never
collects tests, never sees a submission and never initialises CUDA, so every fork starts clean.

Each forked runner also gets a channel back to the server for its sandbox zygotes: the server
forks one per request, and the fork enters the submission's cgroup, limits, namespaces and uid
(`_become_zygote`), so sandboxes skip the interpreter and torch start-up too.

The loop itself (wait, fork per request, report each child's pid and end to the socket that
asked) is autograder.sandbox_runtime.fork_server, the one a sandbox zygote runs too. Our side of
it (`RunnerServer`, `ForkChannel`, `WarmZygotes`) is autograder.protocol.fork_channel.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import shutil
import signal
import socket
import sys

from autograder.sandbox_runtime import fork_server


def serve(control_fd: int) -> None:
    import torch
    import torch._dynamo  # noqa: F401 - every sandbox zygote forked here imports it

    from autograder.project import budgets

    # What every forked runner uses (see _become_runner), imported once, here.
    from autograder.protocol import fork_channel, job  # noqa: F401
    from autograder.runner import suite
    from autograder.sandbox import client as sandbox  # noqa: F401
    from autograder.sandbox.isolation import IsolationUnavailable, detect

    suite.preload()

    # Everything a warm zygote's workers import, imported here: a fork enters a file-system
    # view where the grader's package is not, so a module imported later fails (simulated
    # GPUs did: every simulated-GPU test of a batch failed at the student's import).
    _import_runtime()

    torch.set_num_threads(1)  # no math here; a fork after multi-threaded work can deadlock
    try:
        detect()  # cached: forked runners inherit the proven isolation
    except IsolationUnavailable:
        pass  # not cached: each forked runner says why, and grades nothing
    budgets.calibration_seconds()  # once per worker: forked runners inherit the machine factor
    # What is imported now stays: the collector never walks it again in a forked runner or
    # zygote (fewer pages copied on write, cheaper collections).
    gc.collect()
    gc.freeze()
    server = fork_server.ForkServer()

    def zygote_for(message: bytes, fds: list[int]) -> fork_server.Child:
        # Read in the child: a request that is not JSON ends that fork, not the server.
        return fork_server.Child(lambda: _become_zygote(message, fds))

    def runner_for(message: bytes, fds: list[int]) -> fork_server.Child:
        # The new runner's channel for its zygotes, served here from now on. A zygote that
        # cannot be forked is not answered: the runner gives up and starts it cold. When the
        # runner is gone, its channel is forgotten; its zygotes end when their socket closes.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.listen(ours, size=1 << 20, fds=2, on_request=zygote_for,
                      fork_errors_fatal=False)
        channel = theirs.detach()
        return fork_server.Child(lambda: _become_runner(message, fds, channel), [channel])

    # A runner that cannot be forked ends the server (fork_errors_fatal): the batch worker
    # sees it gone and starts runners cold. The batch worker gone, the server exits, and its
    # runners die with it (PDEATHSIG); a killed batch worker cannot remove the server's cache
    # folder, so the server does.
    def hangup() -> None:
        scratch = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
        if os.path.basename(scratch).startswith(fork_channel.SCRATCH_PREFIX):  # never a user's
            shutil.rmtree(scratch, ignore_errors=True)
        os._exit(0)

    server.listen(socket.socket(fileno=control_fd), size=1 << 20, fds=2, on_request=runner_for,
                  on_hangup=hangup)
    server.serve_forever()


def _import_runtime() -> None:
    """The sandbox runtime, every module of it, imported under the name a cold sandbox gives
    its copy (RUNTIME_PACKAGE, `agsandbox`), while its files can be read. Its classes then carry
    the names the trusted side reads (agsandbox.worker.NetworkRefused), and probes import
    agsandbox.codec and agsandbox.caught as in a cold sandbox: a module under another name, or
    missing, made them fall back to their trusted-side stand-ins, and look-alike classes and
    refused connections went unseen in batches."""
    import importlib.util
    import pkgutil

    from autograder.sandbox.folder import RUNTIME_PACKAGE, RUNTIME_SOURCE

    spec = importlib.util.spec_from_file_location(
        RUNTIME_PACKAGE, RUNTIME_SOURCE / "__init__.py",
        submodule_search_locations=[str(RUNTIME_SOURCE)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[RUNTIME_PACKAGE] = package
    spec.loader.exec_module(package)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{RUNTIME_PACKAGE}.{info.name}")


def _forget_runtime() -> None:
    """A runner is trusted: it imports the runtime as autograder.sandbox_runtime, as a cold
    runner does, and probes imported here must not find `agsandbox` (their stand-ins are the
    trusted side's)."""
    from autograder.sandbox.folder import RUNTIME_PACKAGE

    for name in [n for n in sys.modules if n.split(".")[0] == RUNTIME_PACKAGE]:
        del sys.modules[name]


def _become_runner(message: bytes, fds: list[int], zygotes_fd: int) -> None:
    """In a fresh fork of the server (its descriptors already closed): become the runner, as
    `python -I -m autograder.runner.suite` would be."""
    try:
        from autograder.protocol.fork_channel import WarmZygotes
        from autograder.protocol.job import Job
        from autograder.runner.suite import run

        _forget_runtime()
        os.setsid()
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with us
        results_fd, log_fd = fds
        job = Job(**json.loads(message))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.chdir(job.output_dir)
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as suite.main
        os.umask(0o077)
        zygotes = WarmZygotes(socket.socket(fileno=zygotes_fd))
        code = run(job, results_fd, zygotes=zygotes)
        sys.stdout.flush()  # pytest's summary, for runner.log
        sys.stderr.flush()
        os._exit(code)
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        os._exit(70)


def _become_zygote(message: bytes, fds: list[int]) -> None:
    """In a fresh fork of the server: enter one submission's sandbox and serve as its zygote.

    Exactly what `python -c <launcher> ... -- python -c <boot> zygote FD` does, minus the two
    interpreter starts and the torch import: new session, only the zygote's socket and output
    left open, the sandbox's environment, cgroup and limits, then the launcher's namespaces,
    file-system view and unprivileged user (see isolation_launcher.enter_namespaces; in `uid`
    mode, the sandbox user alone: enter_uid)."""
    try:
        from autograder.sandbox import client as sandbox
        from autograder.sandbox import launcher as isolation_launcher
        from autograder.sandbox.folder import RUNTIME_PACKAGE

        worker = importlib.import_module(f"{RUNTIME_PACKAGE}.worker")  # see _import_runtime

        request = json.loads(message)
        control_fd, out_fd = fds
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        for target, source in ((0, null), (1, out_fd), (2, out_fd)):
            os.dup2(source, target)
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd != control_fd:
                try:
                    os.close(fd)  # whatever else the server held (its sockets are closed)
                except OSError:
                    pass
        spec = request["spec"]
        try:
            sandbox.enter_limits(request["rlimits"], request["cgroup_procs"])
            os.chdir(spec["cwd"])
            os.environ.clear()
            os.environ.update(spec["env"])
            _as_a_cold_interpreter()
            if spec["mode"] == "uid":  # the sandbox user, in its folder (a locked-down container)
                isolation_launcher.enter_uid(spec)
            elif spec["mode"] == "namespaces":
                isolation_launcher.enter_namespaces(spec)  # returns in PID 1, as the sandbox user
            else:
                raise RuntimeError(f"no warm zygote in isolation mode {spec['mode']!r}")
        except Exception as exc:  # noqa: BLE001 - say why as the launcher does, and fail as it
            print(f"isolation launcher: {exc}", file=sys.stderr, flush=True)
            os._exit(isolation_launcher.FAILED)
        # Not dumpable (changing uid cleared the flag; the zygote clears it anyway, as in a cold
        # sandbox): its workers may not ptrace it.
        sys.path.append(spec["cwd"])  # the student's folder last, as in the usual boot
        sys.argv[:] = ["sandbox"]
        _forget_the_grader()
        worker.main(["zygote", str(control_fd)])
    except BaseException:  # noqa: BLE001 - say why, then fail like the launcher does
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(121)


def _forget_the_grader() -> None:
    """The grader's modules out of sys.modules, as in a cold sandbox, where `import autograder`
    finds nothing (its files are not in the sandbox's view): the server imported them, and a
    zygote needs none of them once inside. `__main__` is an empty module, not the server's."""
    import types

    for name in [n for n in sys.modules if n == "autograder" or n.startswith("autograder.")]:
        del sys.modules[name]
    sys.modules["__main__"] = types.ModuleType("__main__")


def _as_a_cold_interpreter() -> None:
    """What a cold sandbox's fresh `python -I -S -B` has and a fork of this server would not:
    no bytecode written into the sandbox, no site builtins (exit, quit, help...), and the
    temp folder found again from the sandbox's TMPDIR (the server's detect() fixed its own)."""
    import builtins
    import tempfile

    sys.dont_write_bytecode = True
    for name in ("exit", "quit", "help", "copyright", "credits", "license"):
        builtins.__dict__.pop(name, None)
    tempfile.tempdir = None


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with its batch worker
    serve(int(sys.argv[1]))
