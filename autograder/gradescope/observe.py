"""The part Gradescope's own harness plays in a container: PID 1 of a try-out run.

Run as root by `autograder.gradescope.container.run_submission` (standard library only: it runs
with the base image's python3). It runs /autograder/run_autograder from /autograder, times it,
reads the container's peak memory, then watches for `settle` seconds more: what the submission
left running, and whether results.json or run_autograder change after grading has ended. Its
record goes to a root-only folder that no sandbox can write.
"""

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = "/autograder/results/results.json"
RUN = "/autograder/run_autograder"
PEAK_FILES = ("/sys/fs/cgroup/memory/memory.max_usage_in_bytes",  # cgroup v1
              "/sys/fs/cgroup/memory.peak")  # cgroup v2 (Linux 5.19+)


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def peak_memory():
    for path in PEAK_FILES:
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def oom_kills():
    """How many processes the container's memory limit killed (the peak above counts the page
    cache too, so it may touch the limit while the kernel only reclaims cache)."""
    for path, prefix in (("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill "),
                         ("/sys/fs/cgroup/memory.events", "oom_kill ")):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(prefix):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def processes():
    """Every process but this one: 'pid uid name'."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if fields["State"].split()[0] != "Z":  # a zombie is dead, only not yet reaped
                found.append(f"{entry} uid={fields['Uid'].split()[0]} {fields['Name'].strip()}")
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile
    return found


def main():
    settle = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    record = {"run_autograder_before": digest(RUN)}
    started = time.monotonic()
    with open(os.path.join(HERE, "stdout"), "wb") as out:
        proc = subprocess.Popen([RUN], cwd="/autograder", stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        record["exit_code"] = proc.wait()
    record["seconds"] = round(time.monotonic() - started, 2)
    record["peak_memory"] = peak_memory()
    record["oom_kills"] = oom_kills()
    record["results_at_exit"] = digest(RESULTS)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:  # as PID 1, reap what is orphaned to us meanwhile
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.1)
    record["results_later"] = digest(RESULTS)
    record["run_autograder_later"] = digest(RUN)
    record["leftover"] = processes()
    partial = os.path.join(HERE, "record.partial")
    with open(partial, "w") as f:
        json.dump(record, f)
    os.replace(partial, os.path.join(HERE, "record.json"))


if __name__ == "__main__":
    main()
