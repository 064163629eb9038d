"""autograder.sandbox_runtime.fork_server: the one fork-server loop (zygotes, warm runner servers).

A real server in its own interpreter, asked over SOCK_SEQPACKET sockets as the sandbox client
and fork_channel ask it: each request forks a child holding the request's descriptors and none
of the server's, with the server's SIGCHLD handler and wakeup pipe undone; the pid goes back at
once and the wait status when the child ends, on the socket that asked; a child that returns or
raises ends with 70; a peer's hangup is the listener's to handle; a failed fork is dropped or
ends the server, as the listener says. Its users' own behaviour: tests/sandbox/test_sandbox.py
(the zygote) and tests/runner/test_warm_runner.py (the warm runner server).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

# Listener A (fd given first) forks children that report on the pipe they are sent and exit
# with the code asked for (or return, or raise); listener B forks the same, and a hangup of B
# ends the server with 3. A request {"fail_fork": true} makes os.fork fail: dropped on A,
# fatal on B.
SERVER = r'''
import json, os, signal, socket, sys
from autograder.sandbox_runtime import fork_server

server = fork_server.ForkServer()
real_fork = os.fork
failing = []


def fork():
    if failing:
        failing.clear()
        raise OSError(11, "fork refused for the test")
    return real_fork()


os.fork = fork


def opened(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def child_for(message, fds):
    request = json.loads(message)
    if request.get("fail_fork"):
        failing.append(1)

    def run():
        (report,) = fds
        seen = {"fds": [fd for fd in range(256) if opened(fd)],
                "report": report, "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
                "wakeup": signal.set_wakeup_fd(-1)}
        os.write(report, json.dumps(seen).encode())
        os.close(report)
        if request["end"] == "return":
            return
        if request["end"] == "raise":
            raise RuntimeError("a child that raises ends with 70 too")
        os._exit(request["end"])

    return fork_server.Child(run)


a, b = (socket.socket(fileno=int(fd)) for fd in sys.argv[1:3])
server.listen(a, size=4096, fds=1, on_request=child_for, fork_errors_fatal=False)
server.listen(b, size=4096, fds=1, on_request=child_for, on_hangup=lambda: os._exit(3))
server.serve_forever()
'''


class Server:
    def __init__(self) -> None:
        self.a, a = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.b, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for sock in (self.a, self.b):
            sock.settimeout(30)
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(a.fileno()), str(b.fileno())],
            pass_fds=(a.fileno(), b.fileno()), stderr=subprocess.PIPE)
        self.server_fds = {a.fileno(), b.fileno()}
        a.close()
        b.close()

    def ask(self, sock: socket.socket, **request) -> tuple[int, int]:
        """(the child's pid, the read end of its report pipe)"""
        read_fd, write_fd = os.pipe()
        socket.send_fds(sock, [json.dumps(request).encode()], [write_fd])
        os.close(write_fd)
        return json.loads(sock.recv(4096))["spawned"], read_fd

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server():
    started = Server()
    yield started
    started.close()


def report_of(read_fd: int) -> dict:
    with open(read_fd, "rb") as pipe:
        return json.loads(pipe.read())


def test_each_request_forks_a_child_that_holds_its_descriptors_and_none_of_the_servers(server):
    pid, read_fd = server.ask(server.a, end=5)
    seen = report_of(read_fd)
    assert json.loads(server.a.recv(4096)) == {"exited": pid, "status": 5 << 8}
    # Only stdio and the request's descriptor: no listening socket, no wakeup pipe.
    assert seen["fds"] == sorted({0, 1, 2, seen["report"]})
    assert seen["sigchld"] and seen["wakeup"] == -1


@pytest.mark.parametrize("end", ["return", "raise"])
def test_a_child_that_returns_or_raises_ends_with_70_never_serving(server, end):
    pid, read_fd = server.ask(server.a, end=end)
    report_of(read_fd)
    assert json.loads(server.a.recv(4096)) == {"exited": pid, "status": 70 << 8}
    # The server still serves (its child never ran the loop in its place).
    pid, read_fd = server.ask(server.a, end=0)
    report_of(read_fd)
    assert json.loads(server.a.recv(4096)) == {"exited": pid, "status": 0}


def test_each_end_is_reported_on_the_socket_that_asked(server):
    first, read_a = server.ask(server.a, end=1)
    second, read_b = server.ask(server.b, end=2)
    report_of(read_a), report_of(read_b)
    assert json.loads(server.b.recv(4096)) == {"exited": second, "status": 2 << 8}
    assert json.loads(server.a.recv(4096)) == {"exited": first, "status": 1 << 8}


def test_a_failed_fork_is_dropped_or_ends_the_server_as_the_listener_says(server):
    read_fd, write_fd = os.pipe()
    socket.send_fds(server.a, [json.dumps({"fail_fork": True, "end": 0}).encode()], [write_fd])
    os.close(write_fd)
    assert os.read(read_fd, 1) == b""  # nobody has the descriptor any more: the server closed it
    os.close(read_fd)
    pid, read_fd = server.ask(server.a, end=0)  # and it serves on
    report_of(read_fd)
    assert json.loads(server.a.recv(4096)) == {"exited": pid, "status": 0}
    read_fd, write_fd = os.pipe()
    socket.send_fds(server.b, [json.dumps({"fail_fork": True, "end": 0}).encode()], [write_fd])
    os.close(write_fd)
    assert server.process.wait(timeout=30) == 1
    assert b"fork refused for the test" in server.process.stderr.read()
    os.close(read_fd)


def test_a_hangup_is_the_listeners_to_handle(server):
    server.a.close()  # forgotten (the default): the server serves on
    pid, read_fd = server.ask(server.b, end=0)
    report_of(read_fd)
    assert json.loads(server.b.recv(4096)) == {"exited": pid, "status": 0}
    server.b.close()
    assert server.process.wait(timeout=30) == 3
