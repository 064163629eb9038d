"""A cgroup around a command, for measurements: a CPU quota, a memory limit, its peak memory.

    box = Box(cpu=0.5, memory_mb=768)   # either may be None
    subprocess.run(cmd, preexec_fn=box.enter)
    box.peak_mb(), box.oom_kills(); box.remove()

cgroup v2 (`cpu.max`, `memory.max`, `memory.peak`) or v1 (`cpu.cfs_quota_us`,
`memory.limit_in_bytes`, `memory.max_usage_in_bytes`); `Box.available()` says whether this
machine lets us make one (root, a writable cgroup file system). The peak covers the whole process
tree, sandboxes included: their own cgroups nest inside this one.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _own(controller: str | None) -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller and controller in
                                                     names.split(",")):
            base = ROOT if controller is None else ROOT / controller
            return base / path.lstrip("/")
    raise OSError(f"no {controller or 'unified'} cgroup here")


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


class Box:
    def __init__(self, cpu: float | None = None, memory_mb: int | None = None) -> None:
        name = f"bench-{os.getpid()}-{secrets.token_hex(3)}"
        self.folders: list[Path] = []
        self.v2 = _v2()
        self.cpuacct: Path | None = None
        try:
            if self.v2:
                parent = _own(None)
                wanted = " ".join(f"+{c}" for c in ("cpu", "memory", "pids")
                                  if c in (parent / "cgroup.controllers").read_text().split())
                (parent / "cgroup.subtree_control").write_text(wanted)
                folder = parent / name
                folder.mkdir()
                self.folders.append(folder)
                if cpu is not None:
                    (folder / "cpu.max").write_text(f"{int(cpu * PERIOD_US)} {PERIOD_US}")
                if memory_mb is not None:
                    (folder / "memory.max").write_text(str(memory_mb << 20))
                    (folder / "memory.swap.max").write_text("0")
                self.memory = folder
            else:
                self.memory = _own("memory") / name
                self.memory.mkdir()
                self.folders.append(self.memory)
                if memory_mb is not None:
                    (self.memory / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
                if cpu is not None:
                    folder = _own("cpu") / name
                    folder.mkdir()
                    self.folders.append(folder)
                    (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                    (folder / "cpu.cfs_quota_us").write_text(str(int(cpu * PERIOD_US)))
                try:  # CPU accounting, for cpu_seconds()
                    self.cpuacct = _own("cpuacct") / name
                    self.cpuacct.mkdir()
                    self.folders.append(self.cpuacct)
                except OSError:
                    self.cpuacct = None
        except OSError:
            self.remove()
            raise

    @staticmethod
    def available() -> bool:
        try:
            Box().remove()
            return True
        except OSError:
            return False

    def enter(self) -> None:
        """In the child, before exec (preexec_fn): this process and all it starts go in."""
        for folder in self.folders:
            with open(folder / "cgroup.procs", "w") as f:
                f.write("0")

    def peak_mb(self) -> float | None:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.memory / name).read_text()) / (1 << 20)
        except (OSError, ValueError):
            return None

    def cpu_seconds(self) -> float | None:
        """CPU time used by everything that ran in the box (all cores, user and system)."""
        try:
            if self.v2:
                for line in (self.memory / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return None
            if self.cpuacct is None:
                return None
            return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        try:
            if self.v2:
                text = (self.memory / "memory.events").read_text()
            else:
                text = (self.memory / "memory.oom_control").read_text()
            for line in text.splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        for folder in self.folders:
            for _ in range(100):
                try:
                    for pid in (folder / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    for child in folder.iterdir():  # cgroups the grader left (v1: dirs)
                        if child.is_dir():
                            try:
                                child.rmdir()
                            except OSError:
                                pass
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
