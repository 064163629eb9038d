"""How sandbox processes are isolated on this machine (proven once per process and setting).

- `namespaces`: each sandbox gets its own mount, PID, network, IPC and UTS namespaces and a
  file-system view holding only system and Python folders (read-only) and its own folder; as root
  it also runs as an unprivileged uid of its own. Needs root, or unprivileged user namespaces.
- `uid` (root where namespaces are refused, as in a Docker container with default confinement):
  an unprivileged uid of its own, no new privileges, limits; file permissions are the wall for the
  file system. Needs the grader's Python to be readable and executable by other users.
- `none`: resource limits, a scrubbed environment and a refusal of non-loopback sockets inside the
  sandbox; nothing stops student code from reading files its user can read. Only for a grader
  that is not root (a TA's laptop without user namespaces: student code runs as the TA's own
  unprivileged user), or by the explicit opt-in AUTOGRADER_UNSAFE_NO_ISOLATION=1
  (`--unsafe-no-isolation`), for debugging the engine. Reports say so plainly.

`detect` proves a mode by starting an isolated probe. As root it never settles for `none`: when
neither namespaces nor uid works it raises `IsolationUnavailable`, and so does a mode forced with
AUTOGRADER_ISOLATION that does not start here. Grading then refuses; the message says what was
asked, what failed and how to fix it.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from autograder.sandbox.processes import ended_text

LAUNCHER = (Path(__file__).resolve().parent / "launcher.py").read_text()
UID_RANGE = (61000, 64999)
# The grader's own ranks (observer.py) become a uid of their own range: never a sandbox's, which
# the grader kills by uid (a grading's strays and, at its end, all its processes).
OBSERVER_UID_RANGE = (60000, 60999)
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")

ISOLATION_ENV = "AUTOGRADER_ISOLATION"  # unset or "auto", or a mode to insist on
FORCEABLE = ("namespaces", "uid")
UNSAFE_ENV = "AUTOGRADER_UNSAFE_NO_ISOLATION"  # "1": no isolation at all, whoever runs it
UNSAFE_OPT_IN = f"{UNSAFE_ENV}=1 (or --unsafe-no-isolation)"


REFUSED = "student code cannot be isolated here"  # how every refusal begins (see _detect)


class IsolationUnavailable(Exception):
    """Student code cannot be isolated here as it must be, so nothing may be graded: the
    grader's set-up is at fault, never a submission. The message says what was asked, what
    failed and how to fix it (first line: what and why; then the fixes)."""

    # The CLI's exit status for it: its own, so that a caller (run_autograder) tells it from
    # the other errors by the status, not by the message.
    EXIT_STATUS = 3


@dataclass(frozen=True)
class Isolation:
    mode: str  # "namespaces" | "uid" | "none"
    drop_uid: bool = False
    user_namespace: bool = False
    unsafe: bool = False  # "none" by the explicit unsafe opt-in (UNSAFE_ENV)

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
        if self.mode == "none" and self.unsafe:
            user = "root" if os.geteuid() == 0 else "the grader's user"
            return common + [f"NOT isolated, by the unsafe opt-in {UNSAFE_OPT_IN}: student "
                             f"code runs as {user} and can read and change whatever {user} "
                             "can; for debugging the engine only, never for grading students"]
        if self.mode == "none":
            return common + ["NOT isolated: student code can read files this user can read "
                             "(run as root, or enable user namespaces, for full isolation)"]
        extra = ["own PID namespace (cannot see or signal the grader)",
                 "own network namespace (loopback only)",
                 "private file-system view (no hidden tests, key, solution or results)"]
        if self.drop_uid:
            extra.append("unprivileged user of its own, process limit")
        return common + extra


def sandbox_ids(uids: tuple[int, int] = UID_RANGE) -> tuple[int, int]:
    """A fresh unprivileged uid/gid for one submission's sandboxes (or, from another range,
    for one of the grader's own processes)."""
    uid = uids[0] + secrets.randbelow(uids[1] - uids[0])
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


def detect() -> Isolation:
    """The strongest isolation that works here, proven by starting an isolated probe.

    AUTOGRADER_ISOLATION unset (or `auto`): as root, namespaces, else uid, else
    IsolationUnavailable (never `none`: student code must not run as root); not as root, user
    namespaces, else `none` (student code runs as this unprivileged user; reports say so).
    AUTOGRADER_ISOLATION=namespaces or =uid insists on that mode: IsolationUnavailable when it
    does not start, as for any other value. AUTOGRADER_UNSAFE_NO_ISOLATION=1: `none`, whoever
    runs it (the engine's own tests, debugging); reports say it was an unsafe opt-in.
    """
    return _detect(os.environ.get(ISOLATION_ENV, ""), os.environ.get(UNSAFE_ENV, ""),
                   os.geteuid() == 0)


@cache  # by what decides it: a test (or a CLI flag) that changes the environment is obeyed
def _detect(forced: str, unsafe: str, root: bool) -> Isolation:
    if unsafe not in ("", "0", "1"):
        raise IsolationUnavailable(f"{UNSAFE_ENV}={unsafe!r} is neither 1 (no isolation, "
                                   "for debugging the engine) nor 0; set it to one or unset it")
    if forced not in ("", "auto", *FORCEABLE):
        raise IsolationUnavailable(
            f"{ISOLATION_ENV}={forced!r} is not accepted: use namespaces or uid, or leave it "
            f"unset (the strongest mode that works here). To run student code without "
            f"isolation, only to debug the engine, set {UNSAFE_OPT_IN} instead")
    if unsafe == "1":
        if forced in FORCEABLE:
            raise IsolationUnavailable(f"{ISOLATION_ENV}={forced} and {UNSAFE_ENV}=1 ask for "
                                       "isolation and for none: unset one of them")
        return Isolation("none", unsafe=True)
    if forced == "uid" and not root:
        raise IsolationUnavailable(
            f"{ISOLATION_ENV}=uid was asked for, but uid mode needs the grader to run as root "
            f"(it gives each submission an unprivileged uid of its own), and it runs as uid "
            f"{os.geteuid()}.\nTo fix: run the grader as root, or leave {ISOLATION_ENV} unset")
    candidates = ([Isolation("namespaces", drop_uid=True), Isolation("uid", drop_uid=True)]
                  if root else [Isolation("namespaces", user_namespace=True)])
    if forced in FORCEABLE:
        candidates = [c for c in candidates if c.mode == forced]
    failures: list[tuple[Isolation, str]] = []
    for candidate in candidates:
        reason = _probe(candidate)
        if reason is None:
            return candidate
        failures.append((candidate, reason))
    if not root and forced not in FORCEABLE:
        return Isolation("none")  # a TA's laptop: student code runs as the TA, unprivileged
    asked = (f"{ISOLATION_ENV}={forced} was asked for" if forced in FORCEABLE
             else "the grader runs as root, where student code may only run isolated")
    tried = "; ".join(f"{c.mode} mode failed: {reason}" for c, reason in failures)
    fixes = [_fix(c) for c, _ in failures]
    fixes.append(f"only to debug the engine, never to grade students: {UNSAFE_OPT_IN} runs "
                 "student code without isolation")
    raise IsolationUnavailable(f"{REFUSED} ({asked}), so nothing "
                               f"is graded: {tried}.\nTo fix:\n" +
                               "\n".join(f"  - {fix}" for fix in fixes))


_FIXES = {
    "namespaces": "namespaces: the grader's container must allow unshare and mount: run it "
                  "with --cap-add SYS_ADMIN (and, where AppArmor confines it, "
                  "--security-opt apparmor=unconfined)",
    "user namespaces": "namespaces: enable unprivileged user namespaces (sysctl "
                       "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
                       "kernel.apparmor_restrict_unprivileged_userns=0), or grade as root",
    "uid": "uid: the grader must run as root, and its Python (the interpreter a venv links "
           "to, the standard library, site-packages) must be readable and executable by other "
           "users: a system Python and a venv under /opt, as the Gradescope setup makes, not "
           "one under /root or a private home folder",
}


def _fix(isolation: Isolation) -> str:
    if isolation.mode == "uid":
        return _FIXES["uid"]
    return _FIXES["namespaces" if isolation.drop_uid else "user namespaces"]


def _probe(isolation: Isolation) -> str | None:
    """Why `isolation` does not work here (None: it does), from an isolated probe process."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="isolation-check-") as tmp:
        folder, mount = Path(tmp) / "sandbox", Path(tmp) / "root"
        folder.mkdir()
        mount.mkdir()
        ids = sandbox_ids()
        try:
            prepare_folder(folder, isolation, ids)
        except OSError as exc:  # e.g. a user namespace that maps no uid of UID_RANGE
            return f"the probe's folder could not be given to uid {ids[0]} ({exc})"
        probe = [sys.executable, "-I", "-S", "-c", "import os; print(os.getpid(), os.getuid())"]
        command = wrap(probe, folder, {"PATH": "/usr/bin:/bin"}, isolation, ids, mount, 64)
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except OSError as exc:
            return f"the launcher could not be started ({exc})"
        except subprocess.TimeoutExpired:
            return "the probe did not finish within 30 s"
    expected_uid = str(ids[0]) if isolation.drop_uid else "0"
    pid, uid = (result.stdout.split() + ["", ""])[:2]
    namespaced = isolation.mode == "namespaces"
    if result.returncode == 0 and uid == expected_uid and (pid == "1") == namespaced:
        return None
    if result.returncode == 0:
        return (f"the probe ran as uid {uid or '?'} with pid {pid or '?'}, not as uid "
                f"{expected_uid}" + (" with pid 1" if namespaced else ""))
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("isolation launcher:")]
    reason = (said or lines or [ended_text(result.returncode)])[-1][:300]
    closed = _closed_to_others(ids[0]) if isolation.mode == "uid" else None
    return f"{reason} ({closed})" if closed else reason


def _closed_to_others(uid: int) -> str | None:
    """Why other users cannot run this Python (a folder they cannot enter, a file they cannot
    read), or None: what makes `uid` mode fail where the grader's venv is private."""
    paths = sysconfig.get_paths()
    needed = dict.fromkeys([sys.executable, os.path.realpath(sys.executable), paths["stdlib"],
                            paths["platstdlib"], paths["purelib"], paths["platlib"]])
    for path in map(Path, needed):
        for part in [*reversed(path.parents), path]:
            try:
                mode = part.stat().st_mode
            except OSError:
                continue
            want = stat.S_IXOTH | (stat.S_IROTH if part == path else 0)
            if mode & want != want:
                return (f"{part} has mode {stat.S_IMODE(mode):04o}: other users, the "
                        f"sandbox's uid {uid} among them, cannot "
                        f"{'read' if part == path else 'enter'} it, so they cannot run {path}")
    return None
