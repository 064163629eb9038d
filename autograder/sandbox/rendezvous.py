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

The server runs in a child of the runner; what is read back is capped (`MAX_KEYS`, key
length).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
from dataclasses import dataclass

# What the ranks' environment needs for `init_process_group` to be a client of this store.
AGENT_STORE_ENV = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}

MAX_KEYS = 2000  # more than any honest scenario writes; past it the store counts as flooded
MAX_KEY_CHARS = 300

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PR_SET_PDEATHSIG = 1
# A gloo group's rendezvous: each rank writes its address under
# `<group prefix><generation>//<device>//<pair index>/<rank>` (torch 2.13: "default_pg/0//cpu//0/1"
# for a group made from an init_method, "0//cpu//0/1" for one given a store of its own).
_GLOO_RANK_KEY = re.compile(r"^(?P<group>(?:[^/]+/)*\d+)//[a-z]+//\d+/(?P<rank>\d+)$")


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


class TrustedStore:
    """A TCPStore server at `host` (a loopback address) on a port the sandbox of `netns_pid`
    can reach, in a child
    of the runner that joined the sandbox's network namespace (the server's own client must
    connect from there too). A hostile client can make it big or kill it; it is not the
    runner, and a store that broke shows no rendezvous."""

    def __init__(self, netns_pid: int | None, host: str = "127.0.0.1",
                 timeout_s: float = 30.0) -> None:
        self._channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._pid = os.fork()
        if self._pid == 0:  # only what the store needs: the runner has threads
            self._channel.close()
            _serve(theirs, netns_pid, host)
        theirs.close()
        self._channel.settimeout(timeout_s)
        try:
            said = self._channel.recv(512).decode(errors="replace")
        except OSError as exc:
            said = f"no answer ({exc})"
        if not said.startswith("port "):
            self.close()
            raise StoreUnavailable(f"the rendezvous store could not start: {said.strip()}")
        self.port = int(said.split()[1])

    def view(self) -> StoreView:
        """What the store holds now (once: the server stops after it)."""
        data = b""
        try:
            self._channel.sendall(b"v")
            while len(data) <= _MAX_VIEW_BYTES:
                chunk = self._channel.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
            view = json.loads(data) if len(data) <= _MAX_VIEW_BYTES else {}
        except (OSError, ValueError):
            view = {}
        keys = view.get("keys") if type(view) is dict else None
        if type(keys) is not list:
            return StoreView(self.port, ())
        return StoreView(self.port, tuple(str(k)[:MAX_KEY_CHARS] for k in keys[:MAX_KEYS]),
                         view.get("flooded") is True)

    def close(self) -> None:
        self._channel.close()
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)


_MAX_VIEW_BYTES = MAX_KEYS * (MAX_KEY_CHARS + 8) + 1000


def _serve(channel: socket.socket, netns_pid: int | None, host: str) -> None:
    """The store's process: join the sandbox's network namespace, serve, answer one view."""
    try:
        # None of the runner's descriptors (sandbox channels, pipes) stays open in here.
        os.closerange(3, channel.fileno())
        os.closerange(channel.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the runner
        if netns_pid is not None and not _same_netns(netns_pid):
            if os.geteuid() != 0:  # our own user namespace first: we own it, and hold its caps
                _join(libc, f"/proc/{netns_pid}/ns/user", _CLONE_NEWUSER)
            _join(libc, f"/proc/{netns_pid}/ns/net", _CLONE_NEWNET)
        import datetime

        import torch.distributed as dist

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        store = dist.TCPStore(host, port, None, True, datetime.timedelta(seconds=30),
                              wait_for_workers=False, master_listen_fd=listener.fileno())
        channel.sendall(f"port {port}\n".encode())
        channel.recv(1)  # the runner asks once the scenario ended (or closes: it is over)
        count = int(store.num_keys())
        if count > MAX_KEYS:
            view: dict = {"keys": [], "flooded": True}
        else:
            view = {"keys": [str(k)[:MAX_KEY_CHARS] for k in store.list_keys()[:MAX_KEYS]]}
        channel.sendall(json.dumps(view).encode())
    except BaseException as exc:  # noqa: BLE001 - the runner says what failed
        try:
            channel.sendall(f"{type(exc).__name__}: {exc}"[:500].encode())
        except OSError:
            pass
    os._exit(0)


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
