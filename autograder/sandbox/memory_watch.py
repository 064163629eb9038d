"""A sandbox's memory limit kept from outside, where neither RLIMIT_AS nor a cgroup holds it.

On a GPU grader the sandbox's address space is not limited (CUDA maps far more than any sane
RLIMIT_AS) and its cgroup is the memory limit. Where no cgroup can be made (a container that may
not write /sys/fs/cgroup, a gVisor sandbox), nothing else would stop a submission from taking
the machine's memory. There the sandbox's client samples the resident memory of the sandbox's
processes and kills one that is over the limit, the limit RLIMIT_AS puts on each process of a
CPU grader; a process can take what it writes in one `INTERVAL` more (about 0.2 GB at 4 GB/s).
"""

from __future__ import annotations

import threading

from autograder.sandbox.processes import kill_if_same, resident_over

INTERVAL = 0.05  # seconds between samples: a scan of /proc costs about 2 ms


class MemoryWatch:
    """Kills every process of the sandbox under `root` (and, with `uid`, of that uid) whose
    resident memory goes over `limit` bytes, until `stop`; `killed`: pid -> bytes seen."""

    def __init__(self, root: int, limit: int, uid: int | None = None) -> None:
        self.root, self.limit, self.uid = root, limit, uid
        self.killed: dict[int, int] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name=f"memory-watch-{root}")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(INTERVAL):
            for pid, (started, resident) in resident_over(self.limit, self.root,
                                                           self.uid).items():
                self.killed[pid] = resident
                kill_if_same(pid, started)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=1)
