"""autograder.sandbox_runtime.wire: the length-prefixed frames both sides of the wall speak.

Over real pipes: frames round-trip whatever their size and bytes, a reader refuses a frame
larger than it accepts before reading it, and a frame cut short (its writer died) or not
arriving in time ends as WireClosed or WireTimeout, never as a partial payload. What the
payload means is the codec's (tests/sandbox_runtime/test_codec.py,
tests/sandbox_runtime/test_codec_limits.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from autograder.sandbox_runtime.wire import (
    HEADER,
    WireClosed,
    WireTimeout,
    WireTooLarge,
    recv,
    send,
)


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.mark.parametrize("payload", [b"", b"x", b"\x00\n\xff" * 7, bytes(range(256)) * 3])
def test_frames_round_trip(pipe, payload):
    read_fd, write_fd = pipe
    send(write_fd, payload)
    assert recv(read_fd, timeout=5) == payload


def test_frames_keep_their_boundaries(pipe):
    read_fd, write_fd = pipe
    for payload in (b"first", b"", b"third frame"):
        send(write_fd, payload)
    assert [recv(read_fd, timeout=5) for _ in range(3)] == [b"first", b"", b"third frame"]


def test_the_header_is_an_8_byte_big_endian_length(pipe):
    read_fd, write_fd = pipe
    send(write_fd, b"abc")
    assert os.read(read_fd, 64) == b"\x00" * 7 + b"\x03abc"
    assert HEADER.size == 8


def test_a_frame_larger_than_a_pipe_buffer_crosses_whole(pipe):
    # 5 MiB: many times a pipe's buffer, so both send and recv loop over partial writes/reads.
    read_fd, write_fd = pipe
    payload = os.urandom(1 << 16) * 80
    writer = threading.Thread(target=send, args=(write_fd, payload))
    writer.start()
    got = recv(read_fd, timeout=30)
    writer.join()
    assert got == payload


def test_a_frame_over_the_cap_is_refused_from_its_header_alone(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, HEADER.pack(1 << 40))  # a terabyte announced, nothing sent
    with pytest.raises(WireTooLarge, match="larger than the 1000 allowed"):
        recv(read_fd, timeout=5, max_bytes=1000)
    # The default cap is the documented 96 MiB reply.
    os.write(write_fd, HEADER.pack(96 * 1024 * 1024 + 1))
    with pytest.raises(WireTooLarge, match="100663297 bytes"):
        recv(read_fd, timeout=5)


def test_a_frame_at_the_cap_is_accepted(pipe):
    read_fd, write_fd = pipe
    send(write_fd, b"y" * 1000)
    assert recv(read_fd, timeout=5, max_bytes=1000) == b"y" * 1000


@pytest.mark.parametrize("written", [b"", b"\x00\x00\x00", HEADER.pack(10) + b"only5"])
def test_a_frame_cut_short_by_its_writer_closing_is_refused(pipe, written):
    read_fd, write_fd = pipe
    os.write(write_fd, written)
    os.close(write_fd)
    with pytest.raises(WireClosed):
        recv(read_fd, timeout=5)


def test_a_writer_process_that_dies_mid_frame_is_a_closed_wire():
    # A real child writes half a frame and is killed: the reader hears the end, not a payload.
    read_fd, write_fd = os.pipe()
    script = ("import os, sys, time\n"
              "from autograder.sandbox_runtime.wire import HEADER\n"
              f"os.write({write_fd}, HEADER.pack(1000) + b'half')\n"
              "print('written', flush=True)\n"
              "time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], pass_fds=(write_fd,),
                             stdout=subprocess.PIPE, text=True)
    os.close(write_fd)
    try:
        assert child.stdout.readline().strip() == "written"
        with pytest.raises(WireTimeout):  # alive and silent: no frame yet
            recv(read_fd, timeout=0.3)
        child.kill()
        with pytest.raises(WireClosed):
            recv(read_fd, timeout=10)
    finally:
        child.kill()
        child.wait()
        os.close(read_fd)


def test_a_frame_that_never_completes_times_out_at_its_deadline(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, HEADER.pack(100) + b"some but not all")
    started = time.monotonic()
    with pytest.raises(WireTimeout):
        recv(read_fd, timeout=0.5)
    assert 0.4 < time.monotonic() - started < 5


def test_a_trickle_of_bytes_cannot_extend_the_deadline(pipe):
    # One byte every 0.1 s keeps the pipe readable; the deadline is for the whole frame.
    read_fd, write_fd = pipe
    stop = threading.Event()

    def trickle() -> None:
        os.write(write_fd, HEADER.pack(1000))
        for _ in range(40):  # 4 s of it at most, then silence
            if stop.wait(0.1):
                break
            os.write(write_fd, b"z")

    writer = threading.Thread(target=trickle)
    writer.start()
    started = time.monotonic()
    try:
        with pytest.raises(WireTimeout):
            recv(read_fd, timeout=0.6)
        assert time.monotonic() - started < 2
    finally:
        stop.set()
        writer.join()


def test_without_a_timeout_recv_waits_for_the_whole_frame(pipe):
    read_fd, write_fd = pipe

    def late() -> None:
        time.sleep(0.3)
        send(write_fd, b"late but whole")

    threading.Thread(target=late).start()
    assert recv(read_fd) == b"late but whole"
