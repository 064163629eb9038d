"""autograder.sandbox.cgroups: one cgroup per sandbox for its memory and processes, and its removal.

Real cgroups where this process may create them (root with a writable hierarchy, v1 or v2): the
limits are written, a process that joins is held to them (forks refused past `max_pids`, killed
past `memory_bytes`), and `remove` / `remove_left_by` leave no process and no folder behind.
Where cgroups cannot be created, `create` must say so with None (the rlimits are then the
limits) and leave nothing behind: that path is tested everywhere. How grading behaves without
any cgroup is tests/redteam/test_rt_escape.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox import cgroups
from autograder.sandbox.cgroups import Cgroup, remove_left_by

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cgroup():
    made = Cgroup.create(64 << 20, 8)
    if made is None:
        pytest.skip("this process may not create cgroups here (needs root and a writable "
                    "cgroup hierarchy); the refusal path is tested below")
    yield made
    made.remove()


def v2(group: Cgroup) -> bool:
    return (cgroups.ROOT / "cgroup.controllers").exists()


def joined(group: Cgroup, body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `body` in a child that first writes itself into the cgroup (as a zygote does)."""
    script = ("import os, sys\n"
              f"for path in {group.procs_files!r}:\n"
              "    with open(path, 'w') as f:\n"
              "        f.write(str(os.getpid()))\n" + textwrap.dedent(body))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_our_own_cgroup_is_read_from_proc():
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, names, path = line.split(":", 2)
        for name in filter(None, names.split(",")):
            assert cgroups._own(name) == cgroups.ROOT / name / path.lstrip("/")
        if names == "":
            assert cgroups._own(None) == cgroups.ROOT / path.lstrip("/")
    with pytest.raises(OSError, match="no no-such-controller cgroup"):
        cgroups._own("no-such-controller")


def test_create_writes_the_limits_and_names_the_folder_after_its_creator(cgroup):
    assert cgroup.folders and all(f.is_dir() for f in cgroup.folders)
    assert all(f.name.startswith(f"autograder-{os.getpid()}-") for f in cgroup.folders)
    assert cgroup.procs_files == [str(f / "cgroup.procs") for f in cgroup.folders]
    if v2(cgroup):
        (folder,) = cgroup.folders
        assert (folder / "memory.max").read_text().strip() == str(64 << 20)
        assert (folder / "memory.swap.max").read_text().strip() == "0"
        assert (folder / "pids.max").read_text().strip() == "8"
    else:
        memory, pids = cgroup.folders
        assert memory.parent == cgroups._own("memory")
        assert pids.parent == cgroups._own("pids")
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert (pids / "pids.max").read_text().strip() == "8"


def test_a_process_in_the_cgroup_cannot_fork_past_max_pids(cgroup):
    result = joined(cgroup, """
        children = []
        try:
            for _ in range(50):
                pid = os.fork()
                if pid == 0:
                    import time
                    time.sleep(30)
                    os._exit(0)
                children.append(pid)
        except BlockingIOError:
            print("refused after", len(children), flush=True)
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "refused after 7"  # itself and 7 children: 8 pids


def test_a_process_in_the_cgroup_is_killed_past_its_memory(cgroup):
    result = joined(cgroup, """
        hog = b"\\x01" * (256 << 20)  # touched pages, four times the cgroup's memory
        print("allocated", len(hog), flush=True)
    """)
    assert "allocated" not in result.stdout
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr)


def test_remove_kills_everything_left_inside_then_deletes_it(cgroup):
    # A child that left its session and process group: only the cgroup still holds it.
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        for path in {cgroup.procs_files!r}:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        if os.fork() == 0:
            os.setsid()
            print(os.getpid(), flush=True)
            time.sleep(600)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    detached = int(child.stdout.readline())
    assert alive(detached) and alive(child.pid)
    cgroup.remove()
    assert child.wait(timeout=10) == -signal.SIGKILL
    for _ in range(100):
        if not alive(detached):
            break
        time.sleep(0.05)
    assert not alive(detached)
    assert not any(f.exists() for f in cgroup.folders)
    cgroup.remove()  # a second removal is harmless


def test_remove_left_by_cleans_up_after_a_creator_that_was_killed():
    script = textwrap.dedent("""
        import os, subprocess, sys, time
        from autograder.sandbox.cgroups import Cgroup
        group = Cgroup.create(64 << 20, 16)
        if group is None:
            print("none", flush=True)
            sys.exit(0)
        sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for path in group.procs_files:
            with open(path, "w") as f:
                f.write(str(sleeper.pid))
        print(sleeper.pid, *group.folders, flush=True)
        os.kill(os.getpid(), 9)  # killed: removes nothing itself
    """)
    creator = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60, cwd=REPO)
    if creator.stdout.strip() == "none":
        pytest.skip("this process may not create cgroups here")
    assert creator.returncode == -signal.SIGKILL, creator.stderr
    sleeper, *folders = creator.stdout.split()
    folders = [Path(f) for f in folders]
    assert alive(int(sleeper)) and all(f.is_dir() for f in folders)
    remove_left_by(os.getpid())  # ours: nothing of the creator's is touched
    assert alive(int(sleeper)) and all(f.is_dir() for f in folders)
    remove_left_by(creator_pid(folders[0]))
    for _ in range(100):
        if not alive(int(sleeper)):
            break
        time.sleep(0.05)
    assert not alive(int(sleeper))
    assert not any(f.exists() for f in folders)


def creator_pid(folder: Path) -> int:
    return int(folder.name.split("-")[1])


def test_where_no_hierarchy_is_writable_create_says_none_and_leaves_nothing(tmp_path,
                                                                          monkeypatch):
    # A /sys/fs/cgroup with no controller mounted (a default Docker container's is read-only
    # or empty): the per-process rlimits are then the only limits.
    monkeypatch.setattr(cgroups, "ROOT", tmp_path)
    assert Cgroup.create(64 << 20, 8) is None
    assert list(tmp_path.rglob("*")) == []
    remove_left_by(os.getpid())  # nothing to find, nothing raised


def test_a_v2_hierarchy_without_the_memory_controller_leaves_no_empty_cgroup(monkeypatch):
    # cgroup v2 where memory is not enabled for our subtree (systemd without delegation, a
    # hybrid host's /sys/fs/cgroup/unified): the folder is made, memory.max cannot be written.
    unified = Path("/sys/fs/cgroup/unified")
    if not (unified / "cgroup.controllers").exists() or \
            "memory" in (unified / "cgroup.controllers").read_text().split():
        pytest.skip("needs a cgroup v2 hierarchy without the memory controller (a hybrid host)")
    monkeypatch.setattr(cgroups, "ROOT", unified)
    try:
        base = cgroups._own(None)
        probe = base / f"autograder-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError:
        pytest.skip("this process may not create cgroups in the v2 hierarchy")
    try:
        assert Cgroup.create(64 << 20, 8) is None
        assert list(base.glob(f"autograder-{os.getpid()}-*")) == []
    finally:
        for left in base.glob(f"autograder-{os.getpid()}-*"):
            left.rmdir()
