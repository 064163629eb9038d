"""autograder.sandbox.processes: telling a sandbox's strays from what it still runs."""

import os
import signal
import subprocess
import time

from autograder.sandbox.processes import (
    ProcessEntry,
    process_start_time,
    process_table,
    strays,
    wait_ended,
)

SANDBOX_UID = 5000


def entry(ppid: int, uid: int = SANDBOX_UID, dying: bool = False) -> ProcessEntry:
    return ProcessEntry(ppid=ppid, uid=uid, started=f"t{ppid}", dying=dying)


# init 1 -> launcher 10 (root) -> zygote 11 -> worker 12 -> its child 13
TABLE = {
    1: entry(0, uid=0),
    10: entry(1, uid=0),
    11: entry(10),
    12: entry(11),
    13: entry(12),
    14: entry(11),  # orphaned in the sandbox's PID namespace: reparented to the zygote
    15: entry(1),  # orphaned in `uid` mode: reparented to the container's init
    16: entry(11, dying=True),  # already killed, not yet reaped
    17: entry(1, uid=0),  # someone else's
    18: entry(15),  # a stray's child
}


def test_what_no_live_worker_runs_is_a_stray():
    assert strays(TABLE, zygote=11, keep={12}, uid=SANDBOX_UID) == {14: "t11", 15: "t1",
                                                                    18: "t15"}


def test_without_a_uid_only_the_zygotes_descendants_are_the_sandboxs():
    assert strays(TABLE, zygote=11, keep={12}, uid=None) == {14: "t11"}


def test_once_its_worker_ended_the_workers_children_are_strays_too():
    assert set(strays(TABLE, zygote=11, keep=set(), uid=None)) == {12, 13, 14}


def test_the_table_is_read_from_proc():
    table = process_table()
    me = table[os.getpid()]
    assert me.ppid == os.getppid() and me.uid == os.getuid() and not me.dying


def test_under_a_process_the_table_holds_its_tree_only():
    # a shell whose child sleeps: the two of them, as the whole table shows them
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    tree: set[int] = set()
    try:
        for _ in range(200):
            full = process_table()
            tree = {pid for pid, entry in full.items() if entry.ppid == shell.pid}
            if tree:
                break
            time.sleep(0.01)
        under = process_table(under=shell.pid)
        assert set(under) == {shell.pid} | tree and len(tree) == 1
        assert all(under[pid] == full[pid] for pid in under)
        assert process_table(under=2**22 + 1) == {}  # (no such pid)
    finally:
        for pid in tree:
            os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_a_dying_parent_still_links_its_orphans_to_the_zygote():
    """A worker that ended while the table was read is kept, as dying: its children, not yet
    reparented in that snapshot, are still found as the sandbox's strays."""
    table = {**TABLE, 12: entry(11, dying=True)}
    assert {13, 14} <= set(strays(table, zygote=11, keep=set(), uid=None))


def test_waiting_for_killed_processes_to_end():
    killed = subprocess.Popen(["sleep", "30"])
    running = subprocess.Popen(["sleep", "30"])
    try:
        started = {p.pid: process_start_time(p.pid) for p in (killed, running)}
        os.kill(killed.pid, signal.SIGKILL)
        # the killed one ends (a zombie until reaped: its memory is freed); the other does not
        assert wait_ended({killed.pid: started[killed.pid]}, timeout=10) == {}
        assert wait_ended({running.pid: started[running.pid]}, timeout=0.2) == \
            {running.pid: started[running.pid]}
        # a pid that is now another process's is not waited for
        assert wait_ended({running.pid: "0"}, timeout=10) == {}
    finally:
        for process in (killed, running):
            process.kill()
            process.wait()
