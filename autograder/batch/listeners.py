"""Which TCP ports a set of processes listens on, read from /proc (Linux): to check that a local
Ray instance serves this machine only (`autograder.batch.ray_workers`) and to test it.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str  # its command name, for messages
    address: str  # the local address it is bound to
    port: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.address)
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
        return (mapped or address).is_loopback

    def __str__(self) -> str:
        return f"{self.process} (pid {self.pid}) on {self.address}:{self.port}"


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (read from /proc/*/stat once)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def listeners(pids: list[int]) -> list[Listener]:
    """The listening TCP sockets (IPv4 and IPv6) held by `pids` in this process's network
    namespace; processes that are gone or not ours to inspect are skipped, and so are those in
    a network namespace of their own (a sandbox's: loopback only, out of the machine's reach;
    its /proc/PID/net tables are that namespace's)."""
    found = []
    ours = os.stat("/proc/self/ns/net").st_ino
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != ours:
                continue
            inodes = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:  # closed meanwhile (the listing's own descriptor is)
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            tables = [Path(f"/proc/{pid}/net/{t}").read_text() for t in ("tcp", "tcp6")]
        except OSError:
            continue
        for table in tables:
            for line in table.splitlines()[1:]:
                fields = line.split()
                if len(fields) < 10 or fields[3] != _LISTEN or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                found.append(Listener(pid, name, _address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp's address: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))
