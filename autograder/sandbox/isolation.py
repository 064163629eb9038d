"""How sandbox processes are isolated on this machine, decided once per process.

- `namespaces`: each sandbox gets its own mount, PID, network, IPC and UTS namespaces and a
  file-system view holding only system and Python folders (read-only) and its own folder; as root
  it also runs as an unprivileged uid of its own. Needs root, or unprivileged user namespaces.
- `uid` (root where namespaces are refused, as in a locked-down container): an unprivileged uid
  of its own, no new privileges, limits; file permissions are the wall for the file system.
- `none` (e.g. a TA's laptop without user namespaces): resource limits, a scrubbed environment and
  a refusal of non-loopback sockets inside the sandbox; nothing stops student code from reading
  files its user can read. Reports say so plainly.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LAUNCHER = (Path(__file__).resolve().parent / "launcher.py").read_text()
UID_RANGE = (61000, 64999)
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")


@dataclass(frozen=True)
class Isolation:
    mode: str  # "namespaces" | "uid" | "none"
    drop_uid: bool = False
    user_namespace: bool = False

    @property
    def protections(self) -> list[str]:
        """What is in force, in words for reports and the CLI."""
        common = ["resource limits (memory, CPU time, file size, open files)",
                  "scrubbed environment", "non-loopback sockets refused inside the sandbox"]
        if self.mode == "uid":
            return common + ["unprivileged user of its own, process limit, no new privileges",
                             "NO namespaces (refused here): student code can read files that "
                             "are readable by others, and see other processes; assignment "
                             "sources must not be world-readable (the Gradescope setup makes "
                             "them root-only)"]
        if self.mode == "none":
            return common + ["NOT isolated: student code can read files this user can read "
                             "(run as root, or enable user namespaces, for full isolation)"]
        extra = ["own PID namespace (cannot see or signal the grader)",
                 "own network namespace (loopback only)",
                 "private file-system view (no hidden tests, key, solution or results)"]
        if self.drop_uid:
            extra.append("unprivileged user of its own, process limit")
        return common + extra


def sandbox_ids() -> tuple[int, int]:
    """A fresh unprivileged uid/gid for one submission's sandboxes."""
    uid = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0])
    return uid, uid


def _binds(sandbox_dir: Path) -> list[tuple[str, bool]]:
    paths = sysconfig.get_paths()
    readonly = [*_SYSTEM_DIRS, sys.base_prefix, sys.prefix, paths["purelib"], paths["platlib"],
                str(Path(sys.executable).resolve().parent), "/sys"]
    return [(p, False) for p in dict.fromkeys(readonly)]


# The devices a sandbox's /dev holds: what Python and torch open, and on a GPU grader the
# NVIDIA ones (control, per-GPU, UVM, capabilities), which CUDA needs.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def devices() -> list[str]:
    return [*DEVICES, *sorted(str(p) for p in Path("/dev").glob("nvidia*"))]


def wrap(argv: list[str], sandbox_dir: Path, env: dict[str, str], isolation: Isolation,
         ids: tuple[int, int] | None, root_mount: Path, max_processes: int,
         disk_bytes: int = 256 << 20) -> list[str]:
    """The command that runs `argv` isolated (unchanged when there is no isolation)."""
    if isolation.mode == "none":
        return argv
    spec = launch_spec(sandbox_dir, env, isolation, ids, root_mount, max_processes, disk_bytes)
    return [sys.executable, "-I", "-S", "-B", "-c", LAUNCHER, json.dumps(spec), "--", *argv]


def launch_spec(sandbox_dir: Path, env: dict[str, str], isolation: Isolation,
                ids: tuple[int, int] | None, root_mount: Path, max_processes: int,
                disk_bytes: int) -> dict:
    """What the isolation launcher needs to build one sandbox (JSON-able)."""
    return {
        "mode": isolation.mode, "root": str(root_mount), "cwd": str(sandbox_dir),
        "binds": _binds(sandbox_dir), "devices": devices(),
        "env": env, "user_namespace": isolation.user_namespace,
        "uid": ids[0] if isolation.drop_uid and ids else None,
        "gid": ids[1] if isolation.drop_uid and ids else None,
        "rlimits": {"RLIMIT_NPROC": max_processes} if isolation.drop_uid else {},
        "disk_bytes": disk_bytes,
    }


def prepare_folder(sandbox_dir: Path, isolation: Isolation, ids: tuple[int, int] | None) -> None:
    """Give the sandbox user its folder (and nothing else)."""
    if isolation.drop_uid and ids:
        for folder, dirs, files in os.walk(sandbox_dir):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, *ids, follow_symlinks=False)


@cache
def detect() -> Isolation:
    """The strongest isolation that works here, proven by starting an isolated process.

    AUTOGRADER_ISOLATION=none turns isolation off (for debugging, or the engine's own tests of
    what happens without it); reports then say so.
    """
    forced = os.environ.get("AUTOGRADER_ISOLATION")
    if forced == "none":
        return Isolation("none")
    if forced == "uid":  # still proven: it needs root and a Python others may run
        uid_only = Isolation("uid", drop_uid=True)
        return uid_only if os.geteuid() == 0 and _works(uid_only) else Isolation("none")
    candidates = ([Isolation("namespaces", drop_uid=True), Isolation("uid", drop_uid=True)]
                  if os.geteuid() == 0 else [Isolation("namespaces", user_namespace=True)])
    for candidate in candidates:
        if _works(candidate):
            return candidate
    return Isolation("none")


def _works(isolation: Isolation) -> bool:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="isolation-check-") as tmp:
        folder, mount = Path(tmp) / "sandbox", Path(tmp) / "root"
        folder.mkdir()
        mount.mkdir()
        ids = sandbox_ids()
        prepare_folder(folder, isolation, ids)
        probe = [sys.executable, "-I", "-S", "-c", "import os; print(os.getpid(), os.getuid())"]
        command = wrap(probe, folder, {"PATH": "/usr/bin:/bin"}, isolation, ids, mount, 64)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        expected_uid = str(ids[0]) if isolation.drop_uid else "0"
        pid, uid = (result.stdout.split() + ["", ""])[:2]
        namespaced = isolation.mode == "namespaces"
        return result.returncode == 0 and uid == expected_uid and (pid == "1") == namespaced
