"""Length-prefixed frames over pipes, shared by both sides of the wall."""

from __future__ import annotations

import os
import select
import struct
import time

HEADER = struct.Struct(">Q")


class WireClosed(Exception):
    """The other end closed the pipe (a process exited)."""


class WireTimeout(Exception):
    """No complete frame arrived in time."""


class WireTooLarge(Exception):
    """A frame larger than the reader accepts."""


def send(fd: int, payload: bytes) -> None:
    data = HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def recv(fd: int, timeout: float | None = None, max_bytes: int = 96 * 1024 * 1024) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if size > max_bytes:
        raise WireTooLarge(f"a reply of {size} bytes is larger than the {max_bytes} allowed")
    return _read_exact(fd, size, deadline)


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WireTimeout()
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            raise WireClosed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
