"""Memory and process limits for a whole sandbox (zygote and workers) through cgroups.

Best effort: used when this process may create cgroups (root, cgroup v1 or v2); otherwise the
per-process rlimits are the limits. On a GPU grader this is the memory limit that works, since
CUDA reserves far more address space than RLIMIT_AS allows.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    """One sandbox's cgroup(s); `procs_files` are what a process writes itself into."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @property
    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> Cgroup | None:
        # Named after the creating process, so its parent can clean up if it is killed.
        name = f"autograder-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            if (ROOT / "cgroup.controllers").exists():
                folder = _own(None) / name
                folder.mkdir()
                made = cls([folder])  # removed again if a limit cannot be written
                (folder / "memory.max").write_text(str(memory_bytes))
                (folder / "memory.swap.max").write_text("0")
                (folder / "pids.max").write_text(str(max_pids))
                return made
            memory = _own("memory") / name
            pids = _own("pids") / name
            memory.mkdir()
            made = cls([memory])
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            pids.mkdir()
            made.folders.append(pids)
            (pids / "pids.max").write_text(str(max_pids))
            return made
        except OSError:
            if "made" in locals():
                made.remove()
            return None

    def remove(self) -> None:
        """Kill whatever is left in the cgroup, then delete it."""
        for folder in self.folders:
            for _ in range(50):
                try:
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def remove_left_by(pid: int) -> None:
    """Remove the cgroups a (dead) process created, killing what is left in them."""
    for controller in (None, "memory", "pids"):
        try:
            base = _own(controller)
        except OSError:
            continue
        folders = list(base.glob(f"autograder-{pid}-*"))
        if folders:
            Cgroup(folders).remove()


def _own(controller: str | None) -> Path:
    """This process's cgroup folder for `controller` (None: the unified v2 hierarchy)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or controller in names.split(","):
            base = ROOT if controller is None else ROOT / controller
            return base / path.lstrip("/")
    raise OSError(f"no {controller or 'unified'} cgroup")
