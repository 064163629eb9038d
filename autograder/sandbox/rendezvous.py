"""The rendezvous store of a multi-process scenario, hosted by the trusted side.

Ranks of a scenario may share channels the grader cannot close (files, loopback), so a rank's
report that "the ranks met" proves nothing: a forger can sum the ranks' values through a file.
What proves that a real process group was made is the store the group met at. Here the trusted
runner hosts it, as torchrun's agent does: a `torch.distributed.TCPStore` server on a listening
socket made inside the sandbox's network namespace (the only one its ranks can reach), and the
ranks are told to be its clients (`TORCHELASTIC_USE_AGENT_STORE`, which `init_process_group`
honours for `tcp://` and `env://` alike; a `TCPStore` that student code asks to serve at that
port becomes its client too: sandbox_runtime/agent_store.py). Afterwards the test reads which
ranks registered in it for a process group (`StoreView.ranks_met`): ranks that never called the
real `init_process_group` at the port they were given are not there.

The servers run in a child of the runner (one per sandbox network namespace, `StoreHost`);
what is read back is capped (`MAX_KEYS`, key length). The stores themselves are torch's, which
only the runner imports: whoever makes the sandbox passes them in (`StoreServer`; the runner's
is autograder.runner.stores.TcpStores).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import socket
from dataclasses import dataclass
from typing import Protocol

from autograder.sandbox.untrusted_parse import address_space
from autograder.sandbox_runtime import wire

# What the ranks' environment needs for `init_process_group` to be a client of this store.
AGENT_STORE_ENV = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}

MAX_KEYS = 2000  # more than any honest scenario writes; past it the store counts as flooded
MAX_KEY_CHARS = 300
# What the store host may grow by: the student's ranks write what they like into its stores
# (torch's C++ server), and it runs outside the sandbox's limits. Past it, the host fails.
STORE_HOST_BYTES = 256 << 20

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PR_SET_PDEATHSIG = 1
_M_ARENA_MAX = -8
# A gloo group's rendezvous: each rank writes its address under
# `<group prefix><generation>//<device>//<pair index>/<rank>` (torch 2.13: "default_pg/0//cpu//0/1"
# for a group made from an init_method, "0//cpu//0/1" for one given a store of its own,
# "default_pg/0//1//cpu//0/1" for a `new_group` over the default group's store). An nccl group
# writes only its unique id, from rank 0 ("default_pg/0//cuda//0", seen on torch 2.11 with CUDA
# 13): its ranks show through a gloo group that probes make over the same store.
_GLOO_RANK_KEY = re.compile(r"^(?P<group>(?:[^/]*/)*\d+)//[a-z]+//\d+/(?P<rank>\d+)$")


class StoreServer(Protocol):
    """What serves rendezvous stores inside a `StoreHost`'s process."""

    def start(self, host: str) -> tuple[int, object]:
        """A fresh store listening at `host` on a free port: (its port, the store)."""
        ...

    def count(self, store: object) -> int:
        """How many keys `store` holds."""
        ...

    def keys(self, store: object) -> list[str]:
        """The keys `store` holds."""
        ...


class StoreUnavailable(Exception):
    """The trusted store could not be started: the grader's failure."""


@dataclass(frozen=True)
class StoreView:
    """What one scenario's store holds once the scenario ended: its keys (capped)."""

    port: int
    keys: tuple[str, ...]
    flooded: bool = False

    def ranks_met(self) -> list[int]:
        """The ranks that registered in a default process group at this store, sorted (the
        group whose rendezvous got furthest, when several were made)."""
        groups: dict[str, set[int]] = {}
        for key in self.keys:
            match = _GLOO_RANK_KEY.match(key)
            if match is not None:
                groups.setdefault(match["group"], set()).add(int(match["rank"]))
        return sorted(max(groups.values(), key=len)) if groups else []

    def describe(self) -> str:
        """One line for a test's message: which ranks the grader's store saw."""
        met = self.ranks_met()
        if self.flooded:
            return f"the rendezvous store at port {self.port} was flooded with keys"
        if not met:
            return f"no process group met at the rendezvous store at port {self.port}"
        return f"ranks {met} met at the rendezvous store at port {self.port}"


class StoreHost:
    """A child of the runner, in the network namespace of the sandbox process `netns_pid`
    (None: this one), that hosts the rendezvous stores of that sandbox's scenarios one
    scenario at a time: `open` starts fresh TCPStore servers, `views` reads what they saw and
    stops them. One process for a whole grading, where a fork per store cost ~30 ms of CPU a
    scenario (the runner is large). A hostile client can make it big or kill it; it is not
    the runner, a store that broke shows no rendezvous, and a host that stops answering is
    replaced (Sandbox._stores)."""

    def __init__(self, netns_pid: int | None, server: StoreServer,
                 timeout_s: float = 30.0) -> None:
        self.netns_pid = netns_pid
        self._channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._pid = os.fork()
        if self._pid == 0:  # only what the stores need: the runner has threads
            self._channel.close()
            _host(theirs, netns_pid, server)
        theirs.close()
        self._timeout = timeout_s
        self._ports: list[int] = []
        # False once an answer failed or was malformed (the channel may be out of step) or a
        # store was flooded (its memory stays in the host): the sandbox starts a new host.
        self.usable = True
        said = self._ask(None)
        if said.get("ready") is not True:
            self.close()
            raise StoreUnavailable(f"the rendezvous store could not start: {_why(said)}")

    def open(self, count: int, host: str = "127.0.0.1") -> list[int]:
        """The ports of `count` fresh stores listening at `host` (a loopback address)."""
        said = self._ask({"open": count, "host": host})
        ports = said.get("ports")
        if type(ports) is not list or len(ports) != count or \
                any(type(p) is not int for p in ports):
            raise StoreUnavailable(f"the rendezvous store could not start: {_why(said)}")
        self._ports = ports
        return ports

    def views(self) -> list[StoreView]:
        """What each store of the last `open` holds, in its order; the stores stop after it.
        A host that broke gives empty views (no rendezvous)."""
        ports, self._ports = self._ports, []
        try:
            said = self._ask({"view": True}, limit=len(ports) * _MAX_VIEW_BYTES + 1000)
        except StoreUnavailable:
            said = {}
        views = said.get("views")
        if type(views) is not list or len(views) != len(ports):
            self.usable = False
            return [StoreView(port, ()) for port in ports]
        seen = [_view(port, view) for port, view in zip(ports, views, strict=True)]
        self.usable = not any(view.flooded for view in seen)
        return seen

    def _ask(self, request: dict | None, limit: int = 1 << 16) -> dict:
        """Send `request` (None: only hear the host's first word) and read its answer."""
        try:
            if request is not None:
                _send(self._channel, request)
            answer = json.loads(wire.recv(self._channel.fileno(), self._timeout, limit))
        except (OSError, ValueError, wire.WireClosed, wire.WireTimeout,
                wire.WireTooLarge) as exc:
            raise StoreUnavailable(f"the rendezvous store stopped answering "
                                   f"({str(exc) or type(exc).__name__})") from None
        return answer if type(answer) is dict else {}

    def close(self) -> None:
        self._channel.close()
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)


_MAX_VIEW_BYTES = MAX_KEYS * (MAX_KEY_CHARS + 8) + 1000


def _why(said: dict) -> str:
    return str(said.get("error") or "no answer")[:500]


def _view(port: int, view: object) -> StoreView:
    keys = view.get("keys") if type(view) is dict else None
    if type(keys) is not list:
        return StoreView(port, ())
    return StoreView(port, tuple(str(k)[:MAX_KEY_CHARS] for k in keys[:MAX_KEYS]),
                     view.get("flooded") is True)


def _send(channel: socket.socket, message: dict) -> None:
    wire.send(channel.fileno(), json.dumps(message).encode())


def _host(channel: socket.socket, netns_pid: int | None, server: StoreServer) -> None:
    """The host's process: join the sandbox's network namespace, then serve requests until
    the runner closes the channel."""
    try:
        # None of the runner's descriptors (sandbox channels, pipes) stays open in here.
        os.closerange(3, channel.fileno())
        os.closerange(channel.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the runner
        enter_network(netns_pid)
        # One malloc arena for all the servers' threads: each new arena reserves 64 MiB of
        # address space, which the limit would count.
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)
        limit = address_space() + STORE_HOST_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _send(channel, {"ready": True})
    except BaseException as exc:  # noqa: BLE001 - the runner says what failed
        _answer_error(channel, exc)
        os._exit(0)
    stores: list[tuple[int, object]] = []
    while True:
        try:
            request = json.loads(wire.recv(channel.fileno(), None, 1 << 16))
        except (OSError, ValueError, wire.WireClosed, wire.WireTooLarge):
            os._exit(0)  # the runner closed the channel: the grading is over
        try:
            if type(request) is dict and "open" in request:
                stores = [server.start(str(request["host"])) for _ in range(int(request["open"]))]
                _send(channel, {"ports": [port for port, _ in stores]})
            else:
                views = [_store_view(server, store) for _, store in stores]
                stores = []  # each server stops, and closes its socket, as its store goes
                _send(channel, {"views": views})
        except BaseException as exc:  # noqa: BLE001
            _answer_error(channel, exc)


def _store_view(server: StoreServer, store: object) -> dict:
    if int(server.count(store)) > MAX_KEYS:
        return {"keys": [], "flooded": True}
    view = {"keys": [str(k)[:MAX_KEY_CHARS] for k in server.keys(store)[:MAX_KEYS]]}
    if len(json.dumps(view)) > _MAX_VIEW_BYTES:  # keys JSON writes long (\uXXXX escapes)
        return {"keys": [], "flooded": True}
    return view


def _answer_error(channel: socket.socket, exc: BaseException) -> None:
    try:
        _send(channel, {"error": f"{type(exc).__name__}: {exc}"[:500]})
    except OSError:
        pass


def enter_network(netns_pid: int | None) -> None:
    """Join the network namespace of process `netns_pid` (None: stay in this one). Only in a
    single-threaded process (a fresh fork): joining a user namespace requires it."""
    if netns_pid is None or _same_netns(netns_pid):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() != 0:  # our own user namespace first: we own it, and hold its caps
        _join(libc, f"/proc/{netns_pid}/ns/user", _CLONE_NEWUSER)
    _join(libc, f"/proc/{netns_pid}/ns/net", _CLONE_NEWNET)


def _same_netns(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


def _join(libc: ctypes.CDLL, path: str, kind: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, kind) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)
