"""Sandbox processes seen from the host: identity, killing, memory room, GPU presence.

Only the standard library: the trusted parent (grading one submission) uses these to clean up
after its runners without importing torch.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path


def seconds_text(seconds: float) -> str:
    """'12', '3', '1.5', '0.4': tenths below 10 s when they are not 0."""
    if seconds >= 9.95:
        return f"{seconds:.0f}"
    return f"{seconds:.1f}".removesuffix(".0")


# What the trusted processes of one grading may need beside its sandboxes: the parent (no
# torch) and the runner (pytest and torch imported), measured at about 90 + 260 MB RSS on the
# reference (bench/worst_cases.py), with room for a large reply being decoded.
TRUSTED_RESERVE = 400 << 20


MIN_SANDBOX_MEMORY = 256 << 20


def container_memory_limit() -> int | None:
    """The memory limit of the cgroup this grader runs in (the tightest of its ancestors:
    Gradescope's container, Docker's --memory), or None when there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, names, path = line.split(":", 2)
        if names == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():  # v2
            folder = Path("/sys/fs/cgroup") / path.lstrip("/")
            while True:
                found += _limit_in(folder / "memory.max")
                if folder == Path("/sys/fs/cgroup") or folder == folder.parent:
                    break
                folder = folder.parent
        elif "memory" in names.split(","):  # v1: the kernel sums up the ancestors for us
            try:
                stat = (Path("/sys/fs/cgroup/memory") / path.lstrip("/") /
                        "memory.stat").read_text()
            except OSError:
                continue
            for entry in stat.splitlines():
                if entry.startswith("hierarchical_memory_limit "):
                    found += _limit_in(None, entry.split()[1])
    return min(found) if found else None


def _limit_in(path: Path | None, text: str | None = None) -> list[int]:
    try:
        value = (text if text is not None else path.read_text()).strip()
        number = int(value)
    except (OSError, ValueError, AttributeError):
        return []
    return [number] if number < (1 << 50) else []  # "max" or the v1 page-rounded infinity


def sandbox_memory_bytes(configured: int, share: int | None = None) -> int:
    """The memory limit of one sandbox's cgroup: grading.yml's, or less when this grader's own
    container is smaller. Then a submission that takes all the memory it can is killed inside
    its sandbox and the grader, which writes results.json, never is. `share`: sandboxes that
    may run at once (batch workers, AUTOGRADER_SANDBOX_SHARE), each with its trusted processes.
    """
    limit = container_memory_limit()
    if limit is None:
        return configured
    if share is None:
        try:
            share = max(1, int(os.environ.get("AUTOGRADER_SANDBOX_SHARE", "1")))
        except ValueError:
            share = 1
    room = (limit - share * TRUSTED_RESERVE) // share
    return max(MIN_SANDBOX_MEMORY, min(configured, room))


def gpu_device_present() -> bool:
    return Path("/dev/nvidiactl").exists()


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def namespace_pid(pid: int) -> int | None:
    """The pid a process has in its innermost PID namespace (itself when not namespaced)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return pid


def process_start_time(pid: int) -> str | None:
    """When a process started (clock ticks since boot), to tell it from a later one that got
    the same pid; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def kill_if_same(pid: int, started: str | None) -> None:
    """SIGKILL `pid` if it is still the process that started at `started`."""
    if started is not None and process_start_time(pid) == started:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def wait_ended(processes: dict[int, str], timeout: float) -> dict[int, str]:
    """Wait until each of `processes` (pid -> start time) has ended: gone, or a zombie (its
    memory freed). A SIGKILLed process ends only once it is scheduled, which on a loaded machine
    takes a while. Returns those still running at `timeout` (e.g. stuck in uninterruptible I/O)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        running = {}
        for pid, started in processes.items():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 19 and fields[19] == started and fields[0] not in ("Z", "X", "x"):
                running[pid] = started
        if not running or time.monotonic() >= deadline:
            return running
        processes = running
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


@dataclass(frozen=True)
class ProcessEntry:
    """One process as /proc shows it, for telling a sandbox's strays from what it runs."""

    ppid: int
    uid: int  # real uid
    started: str  # clock ticks since boot (see process_start_time)
    dying: bool  # a zombie, exiting, or with SIGKILL pending: already on its way out


_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)
PF_EXITING = 0x4  # task flag (/proc/PID/stat field 9): do_exit has begun


def process_table(under: int | None = None) -> dict[int, ProcessEntry]:
    """Every process this one can read in /proc, or with `under` only that process and its
    descendants (those that end meanwhile are kept, as dying)."""
    # Read after every rank scenario (dozens of times a grading): plain reads, no pathlib.
    # `status` (for the uid and pending signals) costs three times what `stat` does, so it is
    # read only for the processes asked about.
    stats = _stats()
    table: dict[int, ProcessEntry] = {}
    for pid in stats if under is None else _descendants(stats, under):
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read().decode(errors="replace")
        except OSError:
            # It ended since its `stat` was read: kept as dying, so that the chain of parents
            # its orphans still name (they may not be reparented yet in this snapshot) holds.
            fields = stats[pid]
            if len(fields) > 19 and fields[1].isdigit():
                table[pid] = ProcessEntry(ppid=int(fields[1]), uid=-1, started=fields[19],
                                          dying=True)
            continue
        lines = {}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in _STATUS_KEYS:
                lines[key] = value
        fields = stats[pid]
        try:
            pending = int(lines["SigPnd"], 16) | int(lines["ShdPnd"], 16)
            table[pid] = ProcessEntry(
                ppid=int(fields[1]), uid=int(lines["Uid"].split()[0]), started=fields[19],
                dying=fields[0] in ("Z", "X", "x") or bool(int(fields[6]) & PF_EXITING)
                or bool(pending & _SIGKILL_BIT))
        except (KeyError, IndexError, ValueError):
            continue
    return table


def _stats() -> dict[int, list[str]]:
    """Every readable process's `stat` fields after its name (field 3 on): plain reads."""
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            stats[int(name)] = stat[stat.rfind(")") + 2:].split()
    return stats


def _descendants(stats: dict[int, list[str]], root: int) -> set[int]:
    """`root` and every process below it, from their `stat` fields (ppid is field 1)."""
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(pid)
    found, queue = set(), [root] if root in stats else []
    while queue:  # (a set: a ppid read mid-reparenting must not loop)
        pid = queue.pop()
        if pid not in found:
            found.add(pid)
            queue.extend(children.get(pid, ()))
    return found


_STATUS_KEYS = frozenset({"Uid", "SigPnd", "ShdPnd"})
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Resident:
    """A process's resident memory, with its start time (to kill it by)."""

    started: str
    bytes: int


def resident_memory(root: int, uid: int | None = None,
                    over: int | None = None) -> dict[int, Resident]:
    """The resident memory of a sandbox's processes: `root` and its descendants and, with
    `uid`, the processes of that uid that hold more than `over` bytes (a process's uid costs a
    `status` read, so only those are asked). Sampled often (see memory_watch): `stat` only."""
    stats = _stats()
    found: dict[int, Resident] = {}
    members = _descendants(stats, root)
    for pid, fields in stats.items():
        try:
            resident = Resident(fields[19], int(fields[21]) * _PAGE)  # rss: stat field 24
        except (IndexError, ValueError):
            continue
        if pid in members or (uid is not None and over is not None and
                              resident.bytes > over and _uid(pid) == uid):
            found[pid] = resident
    return found


def proportional_bytes(pid: int) -> int | None:
    """What a process's resident pages cost, each shared page divided among its sharers (Pss:
    forked workers share most of their zygote's pages), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f.read().decode(errors="replace").splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def oom_victim(pid: int) -> bool:
    """Whether the kernel's OOM killer would take this process first (a worker and what it
    started: see sandbox.client._oom_victim_first)."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "rb") as f:
            return int(f.read()) > 0
    except (OSError, ValueError):
        return False


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read().decode(errors="replace").splitlines():
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def strays(table: dict[int, ProcessEntry], zygote: int | None, keep: Collection[int],
           uid: int | None) -> dict[int, str]:
    """The processes of a sandbox that nothing of it still runs: its members (the zygote's
    descendants and, with `uid`, every process of that uid) that are neither the zygote, nor
    one of its ancestors (the isolation launcher), nor `keep` (live workers) or a descendant
    of one. What a worker started and left behind when it ended (a double fork, a new
    session) is one: in a PID namespace it was reparented to the zygote, in `uid` mode to
    whatever reaps the container's orphans. With no `zygote` (it is gone), every live process
    of `uid` is one. Returns pid -> start time (to kill by)."""
    def ancestors(pid: int) -> list[int]:
        chain, seen = [], set()
        while pid in table and pid not in seen:
            seen.add(pid)
            chain.append(pid)
            pid = table[pid].ppid
        return chain

    above_zygote = set(ancestors(zygote)) if zygote is not None else set()
    found: dict[int, str] = {}
    for pid, entry in table.items():
        if entry.dying or pid in above_zygote:
            continue
        chain = ancestors(pid)
        member = zygote in chain or (uid is not None and entry.uid == uid)
        if member and not any(p in keep for p in chain):
            found[pid] = entry.started
    return found


def kill_group(pid: int) -> None:
    if pid <= 0:  # never a process group of the host (see Zygote.spawn's ended workers)
        return
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def free_port() -> int:
    """A free TCP port on loopback for a gloo rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ended_text(code: int) -> str:
    """How a process ended, from its return code: 'signal SIGKILL' or 'exit status 3'."""
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (root only): a child that takes that uid and calls
    kill(-1), which the kernel delivers to all of the uid's processes at once (a process
    killed mid-fork leaves no child behind)."""
    if os.geteuid() != 0:
        return
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            except BaseException:  # noqa: BLE001, S110 - nothing to kill is fine
                pass
            os._exit(0)
        os.waitpid(pid, 0)
