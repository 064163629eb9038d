"""The sandbox worker: imports the student's module and runs calls and probes on request.

Started by `autograder.sandbox.client` as `python -I -S -B -c <boot>` with only the sandbox folder
and
site-packages on sys.path. Requests arrive pickled (trusted objects); replies leave as JSON made by
`codec.encode`. Everything here is untrusted territory: student code can change any of it, which
only ever changes what this one sandbox replies.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

from . import agent_store, caught, cells, codec, fork_server, wire

# One message per event the hook notes, on the worker's event channel (see _refuse_network and
# autograder.sandbox.events, the trusted side that reads it).
EVENT_MARK = "autograder-sandbox-event "
MAX_EVENTS = 50  # per process: a loop of refused calls must not flood the channel
# The descriptor the hook writes events to: a worker's own event channel, set when it is forked
# (the zygote runs no student code and has none).
_events_fd: list[int | None] = [None]


class NetworkRefused(PermissionError):
    """The sandbox refused a socket (its audit hook): the trusted side tells it by this class
    (autograder.sandbox.client.NETWORK_REFUSED)."""


def main(argv: list[str]) -> None:
    import signal

    # Ctrl-C is Python's in student code, whatever the grader ignored (a batch worker ignores
    # SIGINT, and its runners, warm or cold, and their sandboxes would inherit that).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _refuse_network()
    if argv[0] == "zygote":
        zygote(int(argv[1]))
    serve(argv[0], int(argv[1]), int(argv[2]), argv[3])


def zygote(control_fd: int) -> None:
    """Import torch once, then fork a fresh worker per request (never importing student code).

    Requests arrive on a SOCK_SEQPACKET socket with four descriptors (request pipe, reply pipe,
    output file, event channel); each child's pid is sent back when forked and its wait status
    when it ends (fork_server.ForkServer).
    """
    import ctypes
    import socket

    # Not dumpable, before anything else runs here: no worker (same uid) may ptrace its zygote,
    # nor read /proc/1/fd or /proc/1/mem. A worker that could would detach the zygote from the
    # grader (setsid, no parent-death signal) and outlive grading. Workers inherit the flag.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE

    import torch

    # The heavy imports every child would repeat. DistributedDataParallel imports torch._dynamo
    # on first use: about 1 s in every rank without this (see probes._keep for what it exposed).
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    # Threads before a fork can deadlock the child: keep torch single-threaded, do no math here.
    torch.set_num_threads(1)

    def worker_for(message: bytes, fds: list[int]) -> fork_server.Child:
        spec = json.loads(message)
        return fork_server.Child(lambda: _become_worker(spec, fds))

    server = fork_server.ForkServer()
    # The runner gone: exit, and the workers die with us (PDEATHSIG).
    server.listen(socket.socket(fileno=control_fd), size=4096, fds=4, on_request=worker_for,
                  on_hangup=lambda: os._exit(0))
    server.serve_forever()


def _become_worker(spec: dict, fds: list[int]) -> None:
    """In a fresh fork of the zygote (the fork server's descriptors already closed)."""
    import ctypes
    import signal

    try:
        os.setsid()  # its own process group, killed as a whole
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the zygote
        request_fd, reply_fd, output_fd, events_fd = fds
        _events_fd[0] = events_fd  # this worker's own channel, read by the trusted side only
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.close(output_fd)
        serve(spec["mode"], request_fd, reply_fd, spec["module"], int(spec.get("gpus") or 0))
    finally:
        os._exit(70)


def serve(mode: str, request_fd: int, reply_fd: int, module_name: str, gpus: int = 0) -> None:
    import torch

    torch.set_num_threads(1)
    if gpus:  # before the student's import: module-level `torch.cuda.is_available()` sees them
        from . import simulated_cuda

        simulated_cuda.activate(gpus) if gpus > 0 else simulated_cuda.hide_gpus()
    # Bound before the student's module runs, so that rebinding `probes.x` or `codec.encode`
    # at import changes nothing here. Defence in depth only: the grade never depends on it,
    # since every result is checked against the reference on inputs drawn by the grader.
    codec.bind_torch_classes()
    agent_store.install()
    scenarios = _load_probes()
    module, import_error = _import_student(module_name)
    handle = functools.partial(_handle, scenarios=scenarios, encode=codec.encode,
                               place=_placer(gpus))
    if mode == "serve":
        _reply(reply_fd, {"ready": True, "import_error": import_error, "id": "ready"})
        while True:
            try:
                request = pickle.loads(wire.recv(request_fd))
            except wire.WireClosed:
                os._exit(0)
            _reply(reply_fd, {**handle(request, module, import_error), "id": request["id"]})
    else:  # "rank": a rank of multi-process scenarios, one scenario at a time
        # Between two scenarios the runner either kills the ranks or, keeping them for the
        # next scenario of the same shape, asks each to reset once all of them have replied.
        # A rank never leaves on its own: one that left early would take the TCP store, or its
        # gloo peer, from ranks still tearing down. It skips interpreter teardown, which on
        # CPU crashes now and then.
        baseline = _baseline()
        while True:
            try:
                request = pickle.loads(wire.recv(request_fd))
            except (wire.WireClosed, OSError):
                os._exit(0)
            if request.get("op") == "reset":
                reply = {"reset": _reset(baseline)}
            else:
                reply = handle(request, module, import_error)
            _reply(reply_fd, {**reply, "id": request["id"]})


def _baseline() -> dict:
    """What a scenario may change for the next one in the same rank, as the import left it."""
    import random
    import threading

    import torch

    return {"env": dict(os.environ), "cwd": os.getcwd(), "grad": torch.is_grad_enabled(),
            "dtype": torch.get_default_dtype(), "threads": threading.active_count(),
            "torch_threads": torch.get_num_threads(), "rng": torch.get_rng_state(),
            "random": random.getstate()}


def _reset(baseline: dict) -> bool:
    """Back to `baseline` between two scenarios of one rank: no process group; the environment,
    working folder, grad mode, default dtype, thread count and random generators as after the
    import; the simulated GPUs' current device and journal as at the start. False if any of it
    failed, or if the scenario left what a reset cannot undo (a thread still running, an alarm
    or a timer set): the runner then ends this rank."""
    try:
        import random
        import signal
        import threading

        import torch
        import torch.distributed as dist

        if dist.is_available():
            from .groups import destroy_process_groups

            destroy_process_groups()  # every group: the default one and any new_group
        timers = [signal.setitimer(timer, 0)[0] for timer in  # (ITIMER_REAL: alarm()'s too)
                  (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)]
        if any(timers):
            return False
        if threading.active_count() > baseline["threads"]:
            return False
        os.environ.clear()
        os.environ.update(baseline["env"])
        os.chdir(baseline["cwd"])
        torch.set_grad_enabled(baseline["grad"])
        torch.set_default_dtype(baseline["dtype"])
        torch.set_num_threads(baseline["torch_threads"])
        torch.set_rng_state(baseline["rng"])
        random.setstate(baseline["random"])
        if f"{__package__}.simulated_cuda" in sys.modules:  # (loaded: this rank simulates)
            from . import simulated_cuda

            simulated_cuda.reset()
        return True
    except BaseException:  # noqa: BLE001 - whatever broke, this rank is not reused
        return False


def _refuse_network() -> None:
    """Refuse sockets to anything but loopback, before any connect (gloo needs loopback); note
    that and other hostile attempts (writes outside the sandbox, reads of grader paths, signals
    to the zygote) for the TA, one message each on the worker's event channel (`_events_fd`).

    Audit hooks cannot be removed once added. Where the sandbox has its own network namespace
    this is a second wall; where it has none, it is the wall (ctypes could go around it). The
    channel is one end of a socket pair whose other end only the trusted side holds, read as
    soon as a message arrives: what was sent cannot be taken back (a socket cannot be
    truncated, rewound or reopened for reading). Student code may send more (adding flags to
    itself) or stop the hook from sending (hiding its later attempts); flooding, malformed
    messages and closing the channel early are flags of their own, seen by the trusted side.
    """
    import ipaddress
    import socket

    allowed_families = {socket.AF_INET, socket.AF_INET6, socket.AF_UNIX, -1}  # -1: from an fd
    # The sandbox folder: HOME in the environment the grader gave it (set before any student
    # code runs), its working folder otherwise.
    home = os.path.normpath(os.environ.get("HOME") or os.getcwd())
    own = home + os.sep
    grader = os.path.dirname(home) + os.sep  # the grader's folder for this submission
    writable = ("/tmp/", "/dev/", "/proc/self/")
    secret = ("/etc/shadow", "/etc/sudoers", "/proc/1/")
    written = [0]
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def note(kind: str, detail: str) -> None:
        events_fd = _events_fd[0]
        if events_fd is None or written[0] >= MAX_EVENTS:
            return
        written[0] += 1
        line = json.dumps({"kind": kind, "detail": detail[:300], "pid": os.getpid()})
        try:
            os.write(events_fd, (EVENT_MARK + line + "\n").encode())
        except OSError:
            pass

    def loopback(address: Any) -> bool:
        if isinstance(address, (str, bytes)):  # AF_UNIX path
            return True
        host = address[0] if isinstance(address, tuple) and address else ""
        if host in ("localhost", ""):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False  # a host name: refused rather than resolved

    def path_of(value: Any) -> str | None:
        try:
            value = os.fsdecode(value)
        except TypeError:
            return None  # a file descriptor
        return os.path.normpath(os.path.join(home, value)) + os.sep

    def guarded(path: str) -> bool:  # the grader's files, hidden tests, other processes
        if path.startswith(own):
            return False
        return path.startswith(grader) or path.startswith(secret) or \
            "/tests/hidden/" in path or "/solution/" in path

    def refuse(kind: str, message: str) -> None:
        note(kind, message)
        raise NetworkRefused(message)

    def hook(event: str, args: tuple) -> None:
        if event == "socket.__new__" and args[1] not in allowed_families:
            refuse("network", "the sandbox allows only IP and Unix sockets")
        if event in ("socket.connect", "socket.sendto", "socket.sendmsg") and len(args) > 1 \
                and not loopback(args[1]):
            refuse("network", f"network access to {args[1]!r} is not allowed in the sandbox")
        if event == "socket.getaddrinfo" and not loopback((args[0],)):
            refuse("network", f"name lookups ({args[0]!r}) are not allowed in the sandbox")
        if event == "open" and args:
            path = path_of(args[0])
            if path is None:
                return
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            if flags & writes and not path.startswith(own) and (
                    path.startswith(grader) or not path.startswith(writable)):
                note("write", f"opened {path[:-1]} for writing")
            elif guarded(path):
                note("read", f"opened {path[:-1]}")
        elif event in ("os.listdir", "os.scandir") and args:
            path = path_of(args[0])
            if path is not None and guarded(path):
                note("read", f"listed {path[:-1]}")
        elif event in ("os.kill", "os.killpg") and args and isinstance(args[0], int):
            target = args[0]
            if target in (1, os.getppid()) or target < 0 or (
                    event == "os.killpg" and target not in (0, os.getpgrp())):
                note("signal", f"{event}({target}, {args[1] if len(args) > 1 else ''})")

    sys.addaudithook(hook)


def _import_student(name: str) -> tuple[Any, dict | None]:
    try:
        return importlib.import_module(name), None
    except SystemExit as exc:
        return None, {"type_names": ["SystemExit"], "qualified": ["builtins.SystemExit"],
                      "message": f"exit({exc.code!r}) at import"}
    except BaseException as exc:  # noqa: BLE001 - every failure must become a report
        info = codec.encode_exception(exc)
        info["where"] = _student_frames(exc, name)
        return None, info


def _student_frames(exc: BaseException, name: str) -> str:
    # Only lines from the student's own file: never the worker's or the grader's paths. A
    # module converted from a notebook names the notebook's cells (cells.py).
    if isinstance(exc, SyntaxError):
        where = cells.locate(_cell_map(exc.filename, name), exc.lineno)
        return f"{where}: {(exc.text or '').strip()}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.basename(f.filename) == f"{name}.py"]
    found = _cell_map(frames[-1].filename, name) if frames else []
    return "; ".join(f"{cells.locate(found, f.lineno)} in {f.name}" for f in frames[-3:])


def _cell_map(filename: str | None, name: str) -> list[tuple[int, int, str]]:
    if not filename or os.path.basename(filename) != f"{name}.py":
        return []
    return cells.load(os.path.dirname(filename), name)


def _load_probes() -> dict[str, Any]:
    """The assignment's scenarios (not secret), as they were before any student code ran."""
    try:
        import probes  # also what pickled requests name their model classes by
    except ModuleNotFoundError:
        return {}
    return {name: value for name, value in vars(probes).items() if callable(value)}


def _placer(gpus: int) -> Callable[[Any], Any]:
    """With simulated GPUs, what the grader sends in starts on the (simulated) CPU."""
    if gpus <= 0:
        return lambda value: value
    from . import simulated_cuda

    return simulated_cuda.place


def _handle(request: dict, module: Any, import_error: dict | None, *,
            scenarios: dict[str, Any], encode: Callable[..., Any],
            place: Callable[[Any], Any]) -> dict:
    if import_error is not None:
        return {"import_error": import_error}
    _take_caught(module)  # (nothing from an earlier request)
    reply = _run(request, module, scenarios, encode, place)
    noted = _take_caught(module)
    if noted:
        reply["caught"] = noted
    return reply


def _take_caught(module: Any) -> list[dict]:
    """What scenarios noted as caught (sandbox_runtime/caught.py), encoded; student code may
    have broken the list or its exceptions: then less is sent, and the reply still goes."""
    found = []
    try:
        for exc in caught.take()[:caught.MAX_NOTED]:
            found.append(_encoded(exc, module.__name__))
    except BaseException:  # noqa: BLE001, S110 - only the notes are lost
        pass
    return found


def _encoded(exc: BaseException, module_name: str) -> dict:
    info = codec.encode_exception(exc)
    info["where"] = _student_frames(exc, module_name)
    return info


def _run(request: dict, module: Any, scenarios: dict[str, Any], encode: Callable[..., Any],
         place: Callable[[Any], Any]) -> dict:
    op, args, kwargs = request["op"], request.get("args", ()), request.get("kwargs", {})
    # A scenario's environment (a rank: the grader hosts the rendezvous store, as torchrun's
    # agent does), set before the call, after the student's import.
    os.environ.update(request.get("env") or {})
    place((args, kwargs))
    if op == "call":
        target = getattr(module, request["name"], None)
        if not callable(target):
            return {"missing": request["name"]}
        identities = {id(a): f"arg{i}" for i, a in enumerate(args)}
        identities.update({id(v): f"kw:{k}" for k, v in kwargs.items()})
    elif op == "probe":
        target = scenarios.get(request["name"])
        if target is None:
            return {"protocol_error": f"unknown scenario {request['name']!r}"}
        args, identities = (module, *args), {}
    else:
        return {"protocol_error": f"unknown op {op!r}"}
    try:
        value = target(*args, **kwargs)
    except SystemExit as exc:
        return {"exited": repr(exc.code)}
    except BaseException as exc:  # noqa: BLE001
        return {"raised": _encoded(exc, module.__name__)}
    try:
        return {"value": encode(value, identities)}
    except codec.CodecError as exc:
        return {"codec_error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - a hostile value's methods may raise anything
        return {"codec_error": f"the returned value could not be read: {type(exc).__name__}"}


def _reply(fd: int, message: dict) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001, S110 - student may have replaced the stream
            pass
    wire.send(fd, json.dumps(message, allow_nan=False).encode())


if __name__ == "__main__":
    main(sys.argv[1:])
