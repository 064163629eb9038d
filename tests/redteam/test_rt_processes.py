"""Red team: exits, kills, fork and memory bombs, loops and sleeps, filling the disk.

Each sandbox worker is a fresh process per submission (restarted after any crash), in its own
process group, PID namespace and uid with resource limits; a failure costs only the test in
flight, and every process is gone when grading ends.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from red_team import (
    ADD_NUMBERS,
    ADD_RANKS,
    ANSWERS,
    CODING_TESTS,
    DIVIDE,
    DIVIDE_ZERO,
    HONEST,
    SCALE,
    SCALE_GPU,
    SHORT_LIMIT,
    assert_sound,
    legit_max,
    observation,
)

pytestmark = pytest.mark.slow  # each grading takes 5-15 s (~2 minutes in all)

EXITS_IN_CALLS = """
import os, sys


def add(a, b):
    os._exit(0)  # status 0 must not pass for success


def divide(a, b):
    if b == 0:
        sys.exit(0)
    return a / b


def scale(x):
    try:
        raise SystemExit(0)
    finally:
        pass
"""

KILLS = """
import os, signal, time


def _in_our_namespace():
    # Only when PID 1 is this sandbox's zygote, i.e. in the sandbox's own PID namespace: then
    # kill(1) reaches the zygote and kill(-1) only this namespace, never the machine's init or
    # the grader's processes.
    with open("/proc/1/cmdline", "rb") as f:
        pid1 = f.read()  # a zygote, cold (its boot) or forked by a warm runner server
    if b"agsandbox.worker" not in pid1 and b"autograder.runner.warm" not in pid1:
        raise RuntimeError("not attempted: not inside a sandbox's namespaces")


def add(a, b):
    _in_our_namespace()
    os.kill(os.getppid(), signal.SIGKILL)  # the zygote: PID 1 of its namespace shrugs these off
    os.kill(1, signal.SIGSTOP)
    os.kill(1, signal.SIGTERM)
    raise RuntimeError("KILL{survived its own attacks}KILL")


def divide(a, b):
    if b == 0:
        os.killpg(0, signal.SIGKILL)  # its own process group (and so itself)
    return a / b


def scale(x):
    _in_our_namespace()
    try:
        os.kill(-1, signal.SIGKILL)  # kill -9 -1: every process this uid may signal
    except ProcessLookupError:
        pass  # nothing else of ours to kill in the namespace but PID 1, which is exempt
    os.kill(1, signal.SIGINT)  # Python's SIGINT handler: this one ends the zygote
    time.sleep(30)  # and with it this process (PDEATHSIG) or the call's time limit
"""

FORK_BOMB = """
@@GOOD@@
import ctypes, os, time


def _daemon():
    # Double fork and setsid: a process outside the worker's process group, renamed so the test
    # can look for it on the host after grading. It would live for a minute.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"@@TOKEN@@", 0, 0, 0)  # PR_SET_NAME
            time.sleep(60)
        os._exit(0)


def _in_our_namespace():
    # Only when PID 1 is this sandbox's zygote, i.e. in the sandbox's own PID namespace: then
    # kill(1) reaches the zygote and kill(-1) only this namespace, never the machine's init or
    # the grader's processes.
    with open("/proc/1/cmdline", "rb") as f:
        pid1 = f.read()  # a zygote, cold (its boot) or forked by a warm runner server
    if b"agsandbox.worker" not in pid1 and b"autograder.runner.warm" not in pid1:
        raise RuntimeError("not attempted: not inside a sandbox's namespaces")


def _running(name):
    for pid in os.listdir("/proc"):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == name:
                return True
        except OSError:
            pass
    return False


def scale(x):
    _in_our_namespace()  # where the daemon dies with the namespace
    _daemon()
    time.sleep(0.2)
    daemon = _running("@@TOKEN@@")
    spawned, error = 0, None
    for _ in range(300):  # bounded: at most 300 processes, each only sleeping for 20 s
        try:
            os.posix_spawn("/bin/sleep", ["sleep", "20"], {})
        except OSError as exc:
            error = type(exc).__name__
            break
        spawned += 1
    raise RuntimeError(f"FORK{{{spawned} started, then {error}; daemon running: {daemon}}}FORK")
"""

MEMORY_BOMB = """
@@GOOD@@
import ctypes, mmap, os, torch


def bomb(touch):
    hoard, got = [], 0
    try:
        for _ in range(24):  # bounded: at most 3 GiB, in 128 MiB blocks
            block = mmap.mmap(-1, 128 << 20)
            hoard.append(block)
            if touch:  # really use the memory: write every byte
                ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(block)), 1, len(block))
            got += 128
    except (MemoryError, OSError):
        pass
    hoard.clear()  # (the mappings go with the last references)
    return got


# At import (60 s allowed), once per submission: touch every page until the limit.
if not os.path.exists("bombed"):
    open("bombed", "w").close()
    print(f"MEMORY{{{bomb(touch=True)} MiB touched at import}}MEMORY")


def scale(x):
    got = bomb(touch=False)
    try:
        torch.empty(8 << 30, dtype=torch.uint8)
        big = "allocated"
    except RuntimeError as exc:
        big = type(exc).__name__
    raise RuntimeError(f"MEMORY{{{got} MiB reserved in a call, 8 GiB tensor: {big}}}MEMORY")
"""

LOOPS_IN_CALLS = """
@@GOOD@@
import time


def divide(a, b):
    if b == 0:
        time.sleep(10 ** 6)  # a long sleep
    return a / b


def scale(x):
    while True:  # an infinite loop
        pass
"""

DISK_FILL = """
@@GOOD@@
import os


def scale(x):
    # Files in the sandbox's own folder (also its TMPDIR): each is capped by RLIMIT_FSIZE
    # (64 MiB); is the total? Bounded: at most 6 files, 384 MiB, removed with the grader's folder.
    block, written = b"\\0" * (1 << 20), 0
    try:
        for i in range(6):
            with open(os.path.join(os.getcwd(), f"fill{i}.bin"), "wb") as f:
                for _ in range(64):
                    f.write(block)
                    written += 1
    except OSError as exc:
        error = type(exc).__name__
    else:
        error = None
    raise RuntimeError(f"DISK{{{written} MiB, then {error}}}DISK")
"""

SUBMISSIONS = {
    "os_exit_at_import": dict(files={"toy.py": "import os\nos._exit(0)\n",
                                     "answers.yml": ANSWERS}),
    "sys_exit_at_import": dict(files={"toy.py": "import sys\nsys.exit(0)\n",
                                      "answers.yml": ANSWERS}),
    "exits_in_calls": dict(files={"toy.py": EXITS_IN_CALLS, "answers.yml": ANSWERS}),
    # Never without namespaces: there PID 1 is the machine's init, and nothing caps processes.
    "kill_parent_group_and_everyone": dict(files={"toy.py": KILLS, "answers.yml": ANSWERS},
                                           isolated=True),
    "fork_bomb_and_daemon": dict(files={"toy.py": FORK_BOMB, "answers.yml": ANSWERS},
                                 isolated=True),
    "memory_bomb": dict(files={"toy.py": MEMORY_BOMB, "answers.yml": ANSWERS}),
    "loops_and_sleeps_in_calls": dict(files={"toy.py": LOOPS_IN_CALLS, "answers.yml": ANSWERS},
                                      slow=True),
    "infinite_loop_at_import": dict(
        files={"toy.py": "while True:\n    pass\n", "answers.yml": ANSWERS},
        short=True, slow=True),
    "long_sleep_at_import": dict(
        files={"toy.py": "import time\ntime.sleep(10 ** 6)\n", "answers.yml": ANSWERS},
        short=True, slow=True),
    "fill_the_disk": dict(files={"toy.py": DISK_FILL, "answers.yml": ANSWERS}),
}

RUN = [t for t in CODING_TESTS if t != SCALE_GPU]


@pytest.mark.submission("os_exit_at_import")
def test_os_exit_at_import(graded, secrets):
    assert_sound(graded, legit_max(()), secrets)
    for test in RUN:
        assert "exited with status 0 " in graded.message(test)
        if test != ADD_RANKS:
            assert "during the import of your module" in graded.message(test)


@pytest.mark.submission("sys_exit_at_import")
def test_sys_exit_at_import(graded, secrets):
    assert_sound(graded, legit_max(()), secrets)
    for test in RUN:
        assert "could not be imported: SystemExit: exit(0) at import" in graded.message(test)


@pytest.mark.submission("exits_in_calls")
def test_exits_inside_calls_fail_only_their_tests(graded, secrets):
    assert_sound(graded, legit_max({DIVIDE}), secrets)
    assert graded.passed() >= {DIVIDE}
    assert "exited with status 0 during add" in graded.message(ADD_NUMBERS)
    assert "exited with status 0 in rank 0" in graded.message(ADD_RANKS)
    assert "sys.exit(0) during divide" in graded.message(DIVIDE_ZERO)
    assert "sys.exit(0) during scale" in graded.message(SCALE)


@pytest.mark.submission("kill_parent_group_and_everyone")
def test_killing_parent_group_and_everyone_is_contained(graded, secrets):
    """kill(ppid), SIGSTOP/SIGTERM to PID 1, killpg(0), kill(-1), SIGINT to PID 1."""
    assert_sound(graded, legit_max({DIVIDE}), secrets)
    assert graded.passed() >= {DIVIDE}  # a later, honest test still runs after the kills
    assert observation(graded, ADD_NUMBERS, "KILL") == "survived its own attacks"
    assert "killed by SIGKILL" in graded.message(DIVIDE_ZERO)
    assert graded.status(SCALE) == "failed"
    assert "grading process was killed" not in graded.everything()


def _processes_named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
        except OSError:
            pass
    return pids


@pytest.mark.submission("fork_bomb_and_daemon")
def test_fork_bomb_and_daemon_are_bounded_and_cleaned_up(graded, grader, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {SCALE}
    seen = observation(graded, SCALE, "FORK")
    assert seen.endswith("daemon running: True"), seen
    if any("process limit" in p for p in graded.report["environment"]["protections"]):
        assert int(seen.split()[0]) < 256, "the process limit should stop a fork bomb"
    # The daemon (setsid, double fork) died with the sandbox's PID namespace.
    token = grader.token("fork_bomb_and_daemon")
    deadline = time.monotonic() + 3
    while _processes_named(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_named(token) == []


@pytest.mark.submission("memory_bomb")
def test_memory_bomb_is_stopped_by_the_memory_limit(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {SCALE}
    touched = observation(graded, ADD_NUMBERS, "MEMORY")
    assert int(touched.split()[0]) < 2048, touched  # the toy's limit: 2048 MB per process
    reserved = observation(graded, SCALE, "MEMORY")
    assert int(reserved.split()[0]) < 2048 and "tensor: RuntimeError" in reserved, reserved


@pytest.mark.submission("loops_and_sleeps_in_calls")
def test_loops_and_sleeps_in_calls_time_out(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {DIVIDE_ZERO, SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {DIVIDE_ZERO, SCALE}
    assert "timed out after 3 s during divide" in graded.message(DIVIDE_ZERO)
    assert "timed out after 3 s during scale" in graded.message(SCALE)
    # Stopped by the two tests' 3 s limits, not by the toy's 120 s for the whole part (a loaded
    # CI machine, grading other red-team submissions beside it, took 33 s).
    assert graded.wall < 60, graded.wall


@pytest.mark.submission("infinite_loop_at_import")
def test_infinite_loop_at_import_is_bounded(graded, secrets):
    """A hanging import is waited for once, for one test's time (8 s here), or stopped by the
    submission's time limit (20 s here) when the machine is slow; every test says which."""
    assert_sound(graded, legit_max(()), secrets)
    assert graded.wall < SHORT_LIMIT + 20  # the whole part's limit, far from the sleep's 10**6 s
    why = ("during the import of your module", "importing your module took longer than",
           "time limit")
    for test in set(RUN) - {ADD_RANKS}:  # ranks start fresh sandboxes: they time out on their own
        assert any(w in graded.message(test) for w in why), (test, graded.message(test))


@pytest.mark.submission("long_sleep_at_import")
def test_long_sleep_at_import_is_bounded(graded, secrets):
    assert_sound(graded, legit_max(()), secrets)
    assert graded.wall < SHORT_LIMIT + 20  # the whole part's limit, far from the sleep's 10**6 s


@pytest.mark.submission("long_sleep_at_import")
def test_a_hanging_import_is_stopped_within_the_tests_time_limit(graded):
    first = graded.message(ADD_NUMBERS)
    limit = re.search(r"timed out after (\d+) s during the import", first)
    assert limit and int(limit.group(1)) <= 8, first


@pytest.mark.submission("fill_the_disk")
def test_the_sandbox_cannot_fill_the_graders_disk(graded, secrets):
    written = observation(graded, SCALE, "DISK")
    assert int(written.split()[0]) <= 256, written  # as much as the sandbox's private /tmp


@pytest.mark.submission("fill_the_disk")
def test_filling_the_disk_costs_only_its_test(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {SCALE}

