"""autograder.sandbox.memory_watch: the memory limit of a sandbox that neither RLIMIT_AS nor a
cgroup limits (a GPU grader that may not make cgroups), kept by sampling from outside.

Real processes taking real memory: a process of the sandbox over the limit is killed, one
under it or outside the sandbox is not; in `uid` mode a process of the sandbox's uid that left
the tree is still the sandbox's; processes each under the limit but over it together lose
workers, the largest first, until they fit. The end to end case (a worker stopped, the call's
message) runs a real sandbox as a GPU grader without cgroups starts it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from autograder.sandbox import client
from autograder.sandbox.client import SandboxFailure
from autograder.sandbox.memory_watch import MemoryWatch

MIB = 1 << 20
LIMIT = 200 * MIB

# Takes 32 MiB more every 20 ms (writing every byte) up to 1 GiB, then waits.
HOG = """
import time
blocks = []
while len(blocks) < 32:
    blocks.append(bytearray(32 << 20))
    time.sleep(0.02)
time.sleep(60)
"""
# Holds `MiB` resident, says so, and waits.
HOLD = """
import sys, time
block = bytearray(int(sys.argv[1]) << 20)
print("holding", flush=True)
time.sleep(60)
"""
# The sandbox's root: starts a hog and a modest process beside it, and reports how each ended.
ROOT = f"""
import subprocess, sys
hog = subprocess.Popen([sys.executable, "-c", {HOG!r}])
modest = subprocess.Popen([sys.executable, "-c", {HOLD!r}, "50"], stdout=subprocess.PIPE)
modest.stdout.readline()
print("hog", hog.wait(), flush=True)
print("modest", modest.poll(), flush=True)
modest.kill()
"""


def hold(mib: int, python: str = sys.executable, **kwargs) -> subprocess.Popen:
    process = subprocess.Popen([python, "-c", HOLD, str(mib)], stdout=subprocess.PIPE,
                               cwd="/", **kwargs)
    assert process.stdout.readline() == b"holding\n"
    return process


def test_a_process_over_the_limit_is_killed_one_under_it_or_outside_is_not():
    outsider = hold(300)  # over the limit, but no process of the sandbox
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True)
    watch = MemoryWatch(root.pid, LIMIT)
    try:
        said = root.communicate(timeout=60)[0].split()
    finally:
        watch.stop()
        outsider.kill()
    assert said == ["hog", "-9", "modest", "None"]  # SIGKILLed; the modest one still ran
    (why,) = watch.killed.values()
    # Stopped while it grew (up to 1 GiB), once seen over: how far over depends on how often
    # a loaded machine let the watch sample.
    # (whole MiB, rounded down: a process 200.5 MiB resident reads "200 MiB", over 200 MiB)
    seen = int(re.fullmatch(r"(\d+) MiB resident, over 200 MiB", why)[1])
    assert 200 <= seen < 1024
    assert outsider.poll() is None or outsider.returncode == -9  # (killed by us, above)


# Another uid may not run this interpreter (under /root): the system's, as the sandbox user.
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="starting a process as another uid needs root (and a system python)")
def test_in_uid_mode_a_process_of_the_uid_outside_the_tree_is_the_sandboxs():
    # A double fork in `uid` mode leaves the zygote's tree, not the sandbox's uid.
    as_user = {"python": SYSTEM_PYTHON, "group": 65534, "extra_groups": []}
    escaped = hold(300, user=65534, **as_user)
    other_uid = hold(300, user=65533, **as_user)
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watch = MemoryWatch(root.pid, LIMIT, uid=65534)
    try:
        assert escaped.wait(timeout=10) == -9
        time.sleep(0.3)
        assert other_uid.poll() is None and root.poll() is None
        assert list(watch.killed) == [escaped.pid] and "resident" in watch.killed[escaped.pid]
    finally:
        watch.stop()
        for process in (escaped, other_uid, root):
            process.kill()
            process.wait()


# A sandbox of processes each under 200 MiB, about 410 MiB together: four workers (70, 80, 90
# and 60 MiB held; oom_score_adj 1000, as a zygote makes its workers) and one that is no worker
# (80 MiB, the zygote, say). Says "ready" once all hold, then how each worker is after 1.5 s.
MANY = f"""
import subprocess, sys, time

def victim():
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")

def hold(mib, **kwargs):
    process = subprocess.Popen([sys.executable, "-c", {HOLD!r}, str(mib)],
                               stdout=subprocess.PIPE, **kwargs)
    process.stdout.readline()
    return process

workers = [hold(mib, preexec_fn=victim) for mib in (70, 80, 90, 60)]
other = hold(80)
print("ready", flush=True)
time.sleep(1.5)
print(*[w.poll() for w in workers], other.poll(), flush=True)
for process in (*workers, other):
    process.kill()
"""


def test_processes_under_the_limit_but_over_it_together_lose_workers_largest_first():
    """As a cgroup's OOM killer: only workers (oom_score_adj 1000) are taken, the largest first,
    each shared page counted once; what fits stays."""
    root = subprocess.Popen([sys.executable, "-c", MANY], stdout=subprocess.PIPE, text=True)
    assert root.stdout.readline() == "ready\n"
    watch = MemoryWatch(root.pid, 200 * MIB)
    try:
        said = root.communicate(timeout=60)[0].split()
    finally:
        watch.stop()
    # Killed largest first until the rest fit: 90, 80 and 70 MiB went; 60 stayed, and the one
    # that is no worker too.
    assert said == ["-9", "-9", "-9", "None", "None"]
    assert len(watch.killed) == 3
    assert all("together, over 200 MiB" in why for why in watch.killed.values())


def test_a_sandbox_without_cgroup_or_address_limit_is_watched(make_sandbox, monkeypatch):
    """As a GPU grader that may not make cgroups starts a sandbox: RLIMIT_AS lifted (CUDA),
    no cgroup. A worker that takes memory is stopped at the limit, and says so."""
    monkeypatch.setattr(client, "gpu_device_present", lambda: True)
    monkeypatch.setattr(client.Cgroup, "create", classmethod(lambda cls, *args: None))
    sandbox = make_sandbox("""
        def add(a, b):
            return a + b

        def eat_memory():
            blocks = []
            while True:
                blocks.append(bytearray(32 << 20))
        """, memory_bytes=1 << 30, call_timeout=30)
    assert sandbox.call("add", (1, 1), {}) == 2
    # Alone over the limit, or with the zygote beside it (which the cgroup would count too).
    with pytest.raises(SandboxFailure, match=r"was stopped at the memory limit \((\d+ MiB "
                                             r"resident|your processes held \d+ MiB together), "
                                             r"over 1024 MiB.*\) during eat_memory"):
        sandbox.call("eat_memory", (), {})
    assert sandbox.call("add", (2, 2), {}) == 4  # a new worker; the zygote was not touched
