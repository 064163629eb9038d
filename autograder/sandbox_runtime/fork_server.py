"""One fork-server loop: fork a child per request on SOCK_SEQPACKET sockets, report how each ends.

Used by the sandbox zygote (worker.zygote: a fresh worker per request) and by a batch worker's
warm runner server (autograder.runner.warm: a fresh runner per job on its control socket,
a sandbox zygote per request on each runner's channel). Each socket it listens on carries
requests of one kind: a message (JSON, at most `size` bytes) with up to `fds` descriptors. For
each, the server forks; the child's pid goes back on that socket as `{"spawned": pid}` and, once
the child has ended, `{"exited": pid, "status": wait_status}` on the same socket (the trusted
side's reader of both is autograder.protocol.fork_channel.ForkChannel, or the sandbox client's
Zygote).

Only the standard library, and nothing of the trusted side: this file is copied into every
sandbox folder with the rest of the runtime (as `agsandbox.fork_server`), where student code can
change it, which only ever changes what that one sandbox does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Child:
    """What a request makes: `run` is the child's body, called in the fresh fork (it should end
    with os._exit; returning or raising ends the child with status 70). The descriptors that
    came with the request are the child's, as are `fds` (any the handler made for it): the
    server closes its copies of both after the fork."""

    run: Callable[[], Any]
    fds: list[int] = field(default_factory=list)


@dataclass
class _Listener:
    size: int
    fds: int
    on_request: Callable[[bytes, list[int]], Child]
    on_hangup: Callable[[], Any]
    fork_errors_fatal: bool
    children: set[int] = field(default_factory=set)


class ForkServer:
    """Wait on sockets, fork per request, report each child's end where it was asked for.

    A SIGCHLD handler writes to a wakeup pipe, so `select` wakes when a child ends; children
    are reaped with waitpid(-1): every child, including (in a PID namespace, where the zygote
    is PID 1) orphans left by a worker's own children, which are reaped without a report.
    """

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self._listeners: dict[socket.socket, _Listener] = {}

    def listen(self, sock: socket.socket, *, size: int, fds: int,
               on_request: Callable[[bytes, list[int]], Child],
               on_hangup: Callable[[], Any] | None = None,
               fork_errors_fatal: bool = True) -> None:
        """Serve requests on `sock`: `on_request(message, fds)` (in the server) says what to fork.

        `on_hangup`: called when the peer has gone (an empty read, or a failed one); by default
        the socket is just forgotten. `fork_errors_fatal`: an OSError from os.fork ends the
        server (raised); else the request is dropped unanswered (its asker gives up in time).
        """
        self._listeners[sock] = _Listener(size, fds, on_request,
                                          on_hangup or (lambda: self.forget(sock)),
                                          fork_errors_fatal)

    def forget(self, sock: socket.socket) -> None:
        """Stop serving `sock` and close it; how its children end is no longer reported (they
        end on their own when their socket closes)."""
        if self._listeners.pop(sock, None) is not None:
            sock.close()

    def serve_forever(self) -> None:
        while True:
            ready = select.select([self._wake_r, *self._listeners], [], [])[0]
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            self._reap()
            for sock in ready:
                if sock in self._listeners:  # (not forgotten by an earlier hangup)
                    self._serve(sock, self._listeners[sock])

    def _serve(self, sock: socket.socket, listener: _Listener) -> None:
        try:
            message, fds, _, _ = socket.recv_fds(sock, listener.size, listener.fds)
        except OSError:
            message, fds = b"", []
        if not message:
            _close(fds)
            listener.on_hangup()
            return
        try:
            child = listener.on_request(message, fds)
        except BaseException:
            _close(fds)
            raise
        try:
            pid = os.fork()
        except OSError:
            _close([*fds, *child.fds])
            if listener.fork_errors_fatal:
                raise
            return  # nobody hears back: the asker gives up (a runner starts its zygote cold)
        if pid == 0:
            self._become(child)
        _close([*fds, *child.fds])
        listener.children.add(pid)
        _send(sock, {"spawned": pid})

    def _become(self, child: Child) -> None:
        """In the fresh fork: drop the server's parts, then run the child; never returns."""
        try:
            # The handler and wakeup pipe are the server's: a child that forks and waits on its
            # own children (the isolation launcher does) must not write into the server's pipe.
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # Detached before closing, so that no socket object left in this copy of the
            # server's memory closes a number reused later by the child.
            for fd in (self._wake_r, self._wake_w, *(s.detach() for s in self._listeners)):
                os.close(fd)
            child.run()
        finally:
            os._exit(70)  # never back into the server's loop, nor its interpreter's teardown

    def _reap(self) -> None:
        """Report every child that ended to the socket that asked for it."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for sock, listener in self._listeners.items():
                if pid in listener.children:
                    listener.children.discard(pid)
                    _send(sock, {"exited": pid, "status": status})
                    break


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the peer is gone: the next select reads its hangup


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
