"""A sandbox's memory limit kept from outside, where neither RLIMIT_AS nor a cgroup holds it.

On a GPU grader the sandbox's address space is not limited (CUDA maps far more than any sane
RLIMIT_AS) and its cgroup is the memory limit. Where no cgroup can be made (a container that may
not write /sys/fs/cgroup, a cgroup v2 leaf that already holds processes), nothing else would stop
a submission from taking the machine's memory. There the sandbox's client samples the resident
memory of the sandbox's processes and holds them to the cgroup's limit: a process over it is
killed, as RLIMIT_AS would have refused it; and when they hold more than the limit together
(many processes each under it), the worker holding most is killed, as the cgroup's OOM killer
would (each shared page counted once among its sharers). A process can take what it writes in
one `INTERVAL` more (about 0.2 GB at 4 GB/s).
"""

from __future__ import annotations

import threading

from autograder.sandbox.processes import (
    kill_if_same,
    oom_victim,
    proportional_bytes,
    resident_memory,
)

INTERVAL = 0.05  # seconds between samples: a scan of /proc costs about 2 ms


class MemoryWatch:
    """Holds the sandbox under `root` (and, with `uid`, that uid's processes) to `limit` bytes
    of resident memory until `stop`; `killed`: pid -> why, for the call's message."""

    def __init__(self, root: int, limit: int, uid: int | None = None) -> None:
        self.root, self.limit, self.uid = root, limit, uid
        self.killed: dict[int, str] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name=f"memory-watch-{root}")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(INTERVAL):
            self.sample()

    def sample(self) -> None:
        """Kill what is over the limit now."""
        members = resident_memory(self.root, self.uid, over=self.limit)
        limit_mib = self.limit >> 20
        over = {pid: r for pid, r in members.items() if r.bytes > self.limit}
        for pid, resident in over.items():
            self.killed[pid] = f"{resident.bytes >> 20} MiB resident, over {limit_mib} MiB"
            kill_if_same(pid, resident.started)
        if over or sum(r.bytes for r in members.values()) <= self.limit:
            return  # (resident sizes count shared pages in each sharer: an upper bound)
        shares = {pid: proportional_bytes(pid) or members[pid].bytes for pid in members}
        total = sum(shares.values())
        victims = [pid for pid in members if pid not in self.killed and oom_victim(pid)]
        if total > self.limit and victims:
            pid = max(victims, key=shares.__getitem__)
            self.killed[pid] = (f"your processes held {total >> 20} MiB together, over "
                                f"{limit_mib} MiB; this one {shares[pid] >> 20} MiB")
            kill_if_same(pid, members[pid].started)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=1)
