"""Sandbox processes: calls, student errors, crashes, exits, hangs and hostile values."""

import os
import secrets
import signal
import time
from collections.abc import Callable

import pytest
import torch

from autograder.sandbox.client import SandboxFailure, SandboxUnavailable, StudentError
from autograder.sandbox.isolation import detect
from autograder.sandbox.processes import gpu_device_present
from autograder.sandbox.rendezvous import MAX_KEYS, STORE_HOST_BYTES, StoreView

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

STUDENT = """
import os, signal, sys, time
import torch

print("imported")

def add(a, b):
    return a + b

def same(x):
    return x

def fail():
    raise ValueError("bad value")

def exit_hard():
    os._exit(0)

def exit_soft():
    sys.exit(3)

def hang():
    while True:
        pass

def sleep():
    time.sleep(60)

def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def always_equal():
    class Equal:
        def __eq__(self, other):
            return True
    return Equal()

def shout(n):
    sys.stdout.write("x" * n)
    return n

def bad_bytes():
    sys.stdout.buffer.write(bytes(range(256)))
    return 1

def eat_memory():
    blocks = []
    while True:
        blocks.append(bytearray(256 << 20))

def leave_child(marker):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # even a child that leaves the process group
        os.execv("/bin/sleep", ["/bin/sleep", marker])
    return pid
"""


def test_calls_return_decoded_values(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call("add", (2, 3), {}) == 5
    out = sandbox.call("add", (torch.ones(2), torch.ones(2)), {})
    assert torch.equal(out, torch.full((2,), 2.0))


def test_a_returned_argument_is_recognised(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    model = torch.nn.Linear(2, 2)
    assert sandbox.call("same", (model,), {}).identity == "arg0"
    assert sandbox.call("same", (), {"x": model}).identity == "kw:x"


def test_student_exceptions_become_student_errors(make_sandbox):
    with pytest.raises(StudentError) as info:
        make_sandbox(STUDENT).call("fail", (), {})
    assert info.value.type_name == "ValueError" and info.value.message == "bad value"
    assert info.value.is_a("Exception") and "line" in info.value.where


@pytest.mark.parametrize("name, message", [
    ("exit_hard", "your code exited with status 0 during exit_hard"),
    ("exit_soft", r"your code called sys.exit\(3\) during exit_soft"),
    ("segfault", "your code was killed by SIGSEGV"),
    ("missing", "your module has no function named 'missing'"),
    ("always_equal", "returned something the grader cannot check"),
])
def test_failures_are_explained_and_the_sandbox_recovers(make_sandbox, name, message):
    sandbox = make_sandbox(STUDENT)
    with pytest.raises(SandboxFailure, match=message):
        sandbox.call(name, (), {})
    assert sandbox.call("add", (1, 1), {}) == 2


@pytest.mark.parametrize("name", ["hang", "sleep"])
def test_hangs_time_out_and_are_killed(make_sandbox, name):
    sandbox = make_sandbox(STUDENT)
    sandbox.call("add", (1, 1), {})
    pid = sandbox._workers[0].pid
    with pytest.raises(SandboxFailure, match=f"timed out after 1 s during {name}"):
        sandbox.call(name, (), {}, timeout=1)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def running(marker: str) -> bool:
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker in open(f"/proc/{entry}/cmdline").read():
                return True
        except OSError:
            pass
    return False


def within(seconds: float, condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_children_of_the_student_die_with_the_sandbox(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    marker = f"{time.time() % 1000:.6f}"
    sandbox.call("leave_child", (marker,), {})
    deadline = time.monotonic() + 5
    while not running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running(marker)
    sandbox.close()
    deadline = time.monotonic() + 5
    while running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(marker), "a process started by student code outlived its sandbox"


@pytest.mark.skipif(detect().mode == "none", reason="without isolation orphans leave the sandbox")
def test_what_a_worker_left_running_is_stopped_when_the_worker_ends(make_sandbox):
    """A child in a session of its own outlives its worker's process group; once the worker is
    gone (a restart), the sandbox stops it, keeps its zygote, and records it for staff."""
    sandbox = make_sandbox(STUDENT)
    marker = f"{time.time() % 1000:.6f}"
    sandbox.call("leave_child", (marker,), {})
    zygote = sandbox.zygote()
    assert within(5, lambda: running(marker))
    sandbox.call("add", (1, 1), {})
    assert running(marker), "a live worker's children are its own"
    sandbox.restart()  # (killed, it is gone once its zygote has reaped it)
    assert within(2, lambda: not running(marker)), "it outlived the worker that left it"
    assert sandbox.call("add", (1, 2), {}) == 3
    assert sandbox.zygote() is zygote and zygote.alive
    assert [e["kind"] for e in sandbox.events.events] == ["left_running"]


def test_memory_limit_stops_a_memory_bomb(make_sandbox):
    sandbox = make_sandbox(STUDENT, memory_bytes=2 << 30)
    sandbox.call("add", (1, 1), {})
    with pytest.raises(StudentError) as info:
        sandbox.call("eat_memory", (), {}, timeout=30)
    assert info.value.type_name == "MemoryError"


def test_output_is_captured_capped_and_decoded(make_sandbox):
    sandbox = make_sandbox(STUDENT, output_bytes=1000)
    sandbox.call("add", (1, 1), {})
    assert sandbox.take_output() == ("imported\n", False)
    sandbox.call("shout", (5000,), {})
    text, cut = sandbox.take_output()
    assert text == "x" * 1000 and cut
    sandbox.call("bad_bytes", (), {})
    text, _ = sandbox.take_output()
    assert "\ufffd" in text


def test_import_errors_are_reported_with_the_line(make_sandbox):
    sandbox = make_sandbox("def f(:\n    pass\n")
    with pytest.raises(SandboxFailure, match=r"could not be imported: SyntaxError.*line 1"):
        sandbox.call("f", (), {})


def test_sandbox_cannot_import_the_grader(make_sandbox):
    sandbox = make_sandbox("""
        def try_import():
            try:
                import autograder
                return autograder.__file__
            except ImportError as exc:
                return type(exc).__name__
        """)
    assert sandbox.call("try_import", (), {}) == "ModuleNotFoundError"


def test_environment_is_scrubbed(make_sandbox, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET_TOKEN", "s3cret")
    sandbox = make_sandbox("import os\ndef env():\n    return dict(os.environ)\n")
    env = sandbox.call("env", (), {})
    assert "GRADER_SECRET_TOKEN" not in env and "PYTHONPATH" not in env
    assert env["OMP_NUM_THREADS"] == "1"


PROBES = """
def double_add(mod, x):
    return mod.add(x, x)

def rank_value(mod, rank, world_size, port, base):
    return {"rank": rank, "world_size": world_size, "port": port, "value": mod.add(base, rank)}

def rank_group(mod, rank, world_size, port, second_port):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    return {"sum": value.item(), "second_port": second_port}

def rank_own_store(mod, rank, world_size, port):
    # A right way the grader's store must not break: rank 0 "serves" a store of its own.
    import torch, torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    return {"sum": value.item()}

def rank_forged_group(mod, rank, world_size, port):
    # What a forger does: the ranks "meet" through a file every rank can see.
    import os, time
    with open(f"/tmp/forged-{port}-{rank}", "w") as f:
        f.write(str(rank + 1))
    while len([n for n in os.listdir("/tmp") if n.startswith(f"forged-{port}-")]) < world_size:
        time.sleep(0.05)
    time.sleep(0.2)
    return {"sum": float(sum(int(open(f"/tmp/forged-{port}-{r}").read())
                             for r in range(world_size)))}

def rank_flood(mod, rank, world_size, port, keys, tail):
    import datetime, torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30))
    for i in range(keys):
        store.set(f"flood/{rank}/{i}/{tail}", "x")
    # A set is not acknowledged: a rank that ends at once can leave its last ones unread by a
    # loaded server. A get is answered after every command sent before it on this connection.
    store.get(f"flood/{rank}/{keys - 1}/{tail}")
    return {"wrote": keys}

def rank_bloat(mod, rank, world_size, port, megabytes):
    import datetime, torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30))
    chunk = b"x" * (4 << 20)
    for i in range(megabytes // 4):
        store.set(f"bloat/{rank}/{i}", chunk)
    store.get(f"bloat/{rank}/{megabytes // 4 - 1}")
    return {"wrote": megabytes}

def rank_crash(mod, rank, world_size, port):
    import os
    if rank == 1:
        os._exit(7)
    return rank

def rank_leave_state(mod, rank, world_size, port):
    # What a scenario may leave behind: a process group, a variable, grad mode off, a dtype.
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    os.environ["LEFT_BY_LAST"] = "1"
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    print(f"rank {rank} left state")
    return os.getpid()

def rank_state(mod, rank, world_size, port):
    import os, torch, torch.distributed as dist
    return {"pid": os.getpid(), "group": dist.is_initialized(),
            "left": os.environ.get("LEFT_BY_LAST"), "grad": torch.is_grad_enabled(),
            "dtype": str(torch.get_default_dtype())}

def rank_leave_child(mod, rank, world_size, port, detached, seconds):
    # A process of its own, still running when the scenario ends.
    import os, subprocess
    child = subprocess.Popen(["sleep", seconds], start_new_session=detached)
    return {"pid": os.getpid(), "child": child.pid}

def rank_leave_thread(mod, rank, world_size, port):
    import os, threading, time
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    return {"pid": os.getpid()}

def rank_leave_timer(mod, rank, world_size, port, which):
    # A timer left set: in a later scenario its signal would end (or interrupt) the rank.
    import os, signal
    signal.setitimer(getattr(signal, which), 100)
    return os.getpid()

def rank_exit_soon(mod, rank, world_size, port):
    # Replies, then ends while kept: the next scenario must not be blamed for it.
    import os, threading, time
    threading.Thread(target=lambda: (time.sleep(0.3), os._exit(3)), daemon=True).start()
    return os.getpid()
"""


def test_probes_run_next_to_the_student_module(make_sandbox):
    sandbox = make_sandbox(STUDENT, PROBES)
    assert sandbox.probe("double_add", (4,), {}, "add") == 8


def test_ranks_run_in_separate_processes(make_sandbox, tmp_path):
    sandbox = make_sandbox(STUDENT, PROBES)
    results = sandbox.run_ranks("rank_value", 2, (10,), 60, tmp_path, "add")
    assert [r["value"] for r in results] == [10, 11]
    assert results[0]["port"] == results[1]["port"] > 0


def test_the_graders_store_sees_only_a_real_process_group(make_sandbox, tmp_path):
    """Ranks meet at rendezvous stores the grader hosts: a real gloo group registers every
    rank there, also when rank 0 asks for a store of its own at that port (it becomes the
    grader's store's client, as under torchrun's agent); ranks that only pretend to have met
    (through a shared file) leave nothing."""
    sandbox = make_sandbox(STUDENT, PROBES)
    results = sandbox.run_ranks("rank_group", 3, (), 60, tmp_path, "add", stores=2)
    assert [r["sum"] for r in results] == [6.0, 6.0, 6.0]
    assert [store.ranks_met() for store in results.stores] == [[0, 1, 2], []]
    assert results[0]["second_port"] == results.stores[1].port != results.stores[0].port
    own = sandbox.run_ranks("rank_own_store", 2, (), 60, tmp_path, "add")
    assert [r["sum"] for r in own] == [3.0, 3.0] and own.stores[0].ranks_met() == [0, 1]
    forged = sandbox.run_ranks("rank_forged_group", 2, (), 60, tmp_path, "add")
    assert [r["sum"] for r in forged] == [3.0, 3.0]  # the reports alone would pass
    assert forged.stores[0].ranks_met() == []
    assert "no process group met" in forged.stores[0].describe()


def test_the_stores_of_later_scenarios_come_from_a_new_host_when_one_died(make_sandbox,
                                                                          tmp_path):
    """A sandbox's scenarios get their stores from one process of the grader's (a fork of the
    runner per scenario cost ~30 ms of CPU); ranks may break it (make it big, kill it), and
    the next scenario is served by a new one."""
    sandbox = make_sandbox(STUDENT, PROBES)
    sandbox.run_ranks("rank_group", 2, (), 60, tmp_path, "add", stores=2)
    host = sandbox._store_host
    sandbox.run_ranks("rank_value", 2, (10,), 60, tmp_path, "add")
    assert sandbox._store_host is host  # one host for the sandbox's scenarios
    os.kill(host._pid, signal.SIGKILL)
    again = sandbox.run_ranks("rank_group", 2, (), 60, tmp_path, "add", stores=2)
    assert sandbox._store_host is not host
    assert [store.ranks_met() for store in again.stores] == [[0, 1], []]
    sandbox.close()
    assert sandbox._store_host is None


def test_a_store_view_finds_the_ranks_of_a_group_or_a_group_made_over_its_store():
    """Keys as torch writes them (2.13 with gloo here; 2.11 with nccl on an H200): a gloo
    group's rendezvous has each rank's key; an nccl group only rank 0's unique id, so its
    ranks show through a gloo `new_group` over the same store (probes make one)."""
    gloo = ("default_pg/0//cpu//0/0", "default_pg/0//cpu//0/1")
    assert StoreView(1, gloo).ranks_met() == [0, 1]
    assert StoreView(1, ("0//cpu//0/1", "0//cpu//0/0")).ranks_met() == [0, 1]
    nccl = ("default_pg/0//cuda//0",)
    assert StoreView(1, nccl).ranks_met() == []
    subgroup = ("default_pg/0//1//cpu//0/1", "default_pg/0//1//cpu//0/0")
    assert StoreView(1, nccl + subgroup).ranks_met() == [0, 1]


@pytest.mark.parametrize(("keys", "tail"), [
    (MAX_KEYS // 2 + 1, ""),  # too many keys
    (300, "\u00e9" * 250),  # few, but their view would be too long (JSON escapes each \u00e9)
], ids=["count", "escapes"])
def test_a_store_flooded_with_keys_shows_no_rendezvous_and_the_next_one_is_fresh(
        make_sandbox, tmp_path, keys, tail):
    """A flooded store shows no rendezvous, and its host (which holds what was written) is
    replaced before the next scenario."""
    sandbox = make_sandbox(STUDENT, PROBES)
    flooded = sandbox.run_ranks("rank_flood", 2, (keys, tail), 60, tmp_path, "add")
    assert flooded.stores[0].flooded and flooded.stores[0].keys == ()
    assert "flooded" in flooded.stores[0].describe()
    host = sandbox._store_host
    after = sandbox.run_ranks("rank_group", 2, (), 60, tmp_path, "add", stores=2)
    assert sandbox._store_host is not host
    assert not after.stores[0].flooded and after.stores[0].ranks_met() == [0, 1]


def test_ranks_cannot_grow_the_graders_store_host_past_its_bound(make_sandbox, tmp_path):
    """The store host runs outside the sandbox's limits, and the ranks write what they like
    into its stores: past STORE_HOST_BYTES it fails (the ranks' writes with it), not the
    grader, and the next scenario gets a new host."""
    sandbox = make_sandbox(STUDENT, PROBES)
    with pytest.raises(StudentError, match="bloat|Broken pipe|Connection|store"):
        sandbox.run_ranks("rank_bloat", 2, (STORE_HOST_BYTES >> 20,), 60, tmp_path, "add")
    after = sandbox.run_ranks("rank_group", 2, (), 60, tmp_path, "add", stores=2)
    assert after.stores[0].ranks_met() == [0, 1]


def test_a_crashing_rank_is_reported(make_sandbox, tmp_path):
    sandbox = make_sandbox(STUDENT, PROBES)
    with pytest.raises(SandboxFailure, match="exited with status 7 in rank 1"):
        sandbox.run_ranks("rank_crash", 2, (), 60, tmp_path, "add")


def test_ranks_are_kept_between_scenarios_and_reset(make_sandbox, tmp_path):
    """Ranks that all replied serve the next scenario on the same GPUs (a fork and an end of a
    torch process were most of a short scenario's CPU time), reset in between: no process
    group, the environment, grad mode and default dtype as after the import. A scenario's
    output is its own."""
    sandbox = make_sandbox(STUDENT, PROBES)
    first = tmp_path / "first"
    first.mkdir()
    pids = sandbox.run_ranks("rank_leave_state", 2, (), 60, first, "add")
    assert "rank 1 left state" in (first / "rank1.log").read_text()
    second = tmp_path / "second"
    second.mkdir()
    state = sandbox.run_ranks("rank_state", 2, (), 60, second, "add")
    assert [s["pid"] for s in state] == list(pids)
    assert all(s == {"pid": s["pid"], "group": False, "left": None, "grad": True,
                     "dtype": "torch.float32"} for s in state), state
    assert "left state" not in "".join(p.read_text() for p in second.glob("rank*.log"))
    # More ranks than are kept: the kept ones and a fresh one.
    three = sandbox.run_ranks("rank_state", 3, (), 60, tmp_path, "add")
    assert [s["pid"] for s in three][:2] == list(pids) and three[2]["pid"] not in pids
    # Another kind of ranks (simulated GPUs) gets its own; both kinds stay kept.
    simulated = sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add", gpus=2)
    again = sandbox.run_ranks("rank_state", 3, (), 60, tmp_path, "add")
    assert [s["pid"] for s in again] == [s["pid"] for s in three]
    assert [s["dtype"] for s in simulated] == ["torch.float32"] * 2
    kept = host_pids(sandbox)
    assert len(kept) == 5
    sandbox.close()
    assert not any(alive(pid) for pid in kept)


def host_pids(sandbox) -> list[int]:
    """The kept ranks' pids as this process sees them (a rank reports its namespace's)."""
    return [process.pid for process in sandbox._kept.processes()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ranks_of_a_failed_scenario_are_not_kept(make_sandbox, tmp_path):
    sandbox = make_sandbox(STUDENT, PROBES)
    with pytest.raises(SandboxFailure):
        sandbox.run_ranks("rank_crash", 2, (), 60, tmp_path, "add")
    assert sandbox._kept.processes() == []


@pytest.mark.parametrize("which", ["ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"])
def test_ranks_that_leave_a_timer_set_are_not_kept(make_sandbox, tmp_path, which):
    """Its signal would come in a later scenario, the failure that scenario's."""
    sandbox = make_sandbox(STUDENT, PROBES)
    pids = sandbox.run_ranks("rank_leave_timer", 2, (which,), 60, tmp_path, "add")
    state = sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add")
    assert not {s["pid"] for s in state} & set(pids)


def test_a_kept_rank_that_ended_meanwhile_is_replaced_without_blame(make_sandbox, tmp_path):
    sandbox = make_sandbox(STUDENT, PROBES)
    pids = sandbox.run_ranks("rank_exit_soon", 2, (), 60, tmp_path, "add")
    time.sleep(1)  # both ended while kept
    state = sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add")
    assert not {s["pid"] for s in state} & set(pids)


@pytest.mark.parametrize("detached", [False, True], ids=["child", "detached"])
def test_ranks_that_leave_a_process_running_are_not_kept_and_it_is_stopped(
        make_sandbox, tmp_path, detached):
    """What a scenario leaves running must not run beside later tests: a rank with a process
    of its own is ended with it (its process group, or as a stray when it left the group)."""
    sandbox = make_sandbox(STUDENT, PROBES)
    # A duration of this test's own: other test sessions on the machine may run the same.
    seconds = f"60.{secrets.randbelow(10**9)}"
    sandbox.run_ranks("rank_leave_child", 2, (detached, seconds), 60, tmp_path, "add")
    assert host_pids(sandbox) == []
    assert sleeping(seconds) == set()


def sleeping(seconds: str) -> set[int]:
    """The host's `sleep SECONDS` processes."""
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline") as f:
                if f.read() == f"sleep\x00{seconds}\x00":
                    found.add(int(name))
        except OSError:
            pass
    return found


def test_a_rank_that_leaves_a_thread_running_is_not_reused(make_sandbox, tmp_path):
    """A thread of the student's would go on beside later scenarios: the reset refuses it."""
    sandbox = make_sandbox(STUDENT, PROBES)
    sandbox.run_ranks("rank_leave_thread", 2, (), 60, tmp_path, "add")
    first = host_pids(sandbox)  # kept, their reset not read yet
    sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add")
    assert len(first) == 2 and not set(first) & set(host_pids(sandbox))
    assert not any(alive(pid) for pid in first)


def test_without_keep_ranks_every_scenario_has_fresh_ranks(make_sandbox, tmp_path):
    """As on a grader with real GPUs, whose state a reset does not undo."""
    sandbox = make_sandbox(STUDENT, PROBES)
    sandbox.keep_ranks = False
    sandbox.run_ranks("rank_leave_state", 2, (), 60, tmp_path, "add")
    assert host_pids(sandbox) == []
    state = sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add")
    assert [s["left"] for s in state] == [None, None]


def test_kept_ranks_are_bounded_the_other_kinds_going_first(make_sandbox, tmp_path):
    sandbox = make_sandbox(STUDENT, PROBES)
    limit = sandbox._kept.LIMIT
    sandbox.run_ranks("rank_state", limit - 1, (), 60, tmp_path, "add")
    plain = host_pids(sandbox)
    sandbox.run_ranks("rank_state", 2, (), 60, tmp_path, "add", gpus=2)
    kept = host_pids(sandbox)
    assert len(kept) == limit and set(plain) - set(kept) == {plain[-1]}  # one of them went
    assert not alive(plain[-1])


def test_a_call_on_simulated_gpus_leaves_the_plain_worker_running(make_sandbox):
    """Workers are kept by the GPUs they simulate (fixed before the student's import), two at
    most: plain tests on either side of a simulated one share a worker, and a third kind
    retires the oldest."""
    sandbox = make_sandbox(STUDENT)
    assert sandbox.call("add", (1, 1), {}) == 2
    plain = sandbox._workers[0].pid
    assert sandbox.call("add", (1, 2), {}, gpus=2) == 3
    assert sandbox.call("add", (2, 2), {}) == 4
    assert sandbox._workers[0].pid == plain and set(sandbox._workers) == {0, 2}
    assert sandbox.call("add", (2, 3), {}, gpus=3) == 5
    assert set(sandbox._workers) == {2, 3}
    with pytest.raises(ProcessLookupError):
        os.kill(plain, 0)
    sandbox.restart()
    assert sandbox._workers == {}


def test_sandbox_process_leads_its_own_process_group(make_sandbox):
    sandbox = make_sandbox(STUDENT)
    sandbox.call("add", (1, 1), {})
    pid = sandbox._workers[0].pid
    assert os.getpgid(pid) == pid != os.getpgid(0)
    assert signal.SIGKILL  # the group is what restart() kills


# ----------------------------------------------------------------------------- whose failure


def test_a_sandbox_whose_launcher_fails_is_the_graders_failure_and_not_retried(make_sandbox):
    """The launcher cannot copy the sandbox folder into a 4 KiB tmpfs: SandboxUnavailable (the
    grader's), never a SandboxFailure (the student's); later calls fail at once the same way."""
    if detect().mode != "namespaces":
        pytest.skip("only namespaces mode copies the sandbox folder into a tmpfs")
    sandbox = make_sandbox(STUDENT, disk_bytes=4096)
    with pytest.raises(SandboxUnavailable) as first:
        sandbox.call("add", (1, 1), {})
    message = str(first.value)
    assert message.startswith("the isolation launcher failed: the sandbox folder could not be "
                              "copied into its tmpfs"), message
    assert "No space left on device" in message
    assert not isinstance(first.value, SandboxFailure)
    assert "could not start a process for your code" not in message
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable) as again:
        sandbox.run_ranks("rank_value", 2, (10,), 60, sandbox.sandbox_dir.parent, "add")
    assert again.value is first.value and time.monotonic() - started < 1


def test_a_zygote_that_ends_before_serving_a_worker_is_the_graders_failure(make_sandbox):
    """Under an address-space limit torch cannot be loaded in, the zygote ends before it forks
    any worker: no student code ran, so it is the grader's (a limit set too low)."""
    if gpu_device_present():
        pytest.skip("a GPU grader lifts the address-space limit")
    sandbox = make_sandbox(STUDENT, memory_bytes=256 << 20)
    with pytest.raises(SandboxUnavailable, match=r"^the sandbox's first process ended \(exit "
                                                 r"status 1\) before it ran any student code: "
                                                 r"ImportError"):
        sandbox.call("add", (1, 1), {})


def test_a_zygote_gone_after_it_served_a_worker_is_the_students_failure_before_the_graders(
        make_sandbox, tmp_path):
    """Once a zygote has forked a worker, student code ran beside it and may have killed it
    (in `uid` mode a worker has its uid): a failure to fork from it is the student's. A zygote
    gone before it served anyone is the grader's."""
    served = make_sandbox(STUDENT)
    assert served.call("add", (1, 1), {}) == 2
    zygote = served.zygote()
    os.killpg(zygote.popen.pid, signal.SIGKILL)  # the launcher, and its namespace's PID 1
    zygote.popen.wait()
    with pytest.raises(SandboxFailure, match="its parent process ended after your code ran"):
        zygote.spawn("serve", "dp_basics", tmp_path / "served.log")

    fresh = make_sandbox(STUDENT).zygote()
    os.killpg(fresh.popen.pid, signal.SIGKILL)
    fresh.popen.wait()
    with pytest.raises(SandboxUnavailable, match=r"ended \(signal SIGKILL\) before it ran any "
                                                 "student code"):
        fresh.spawn("serve", "dp_basics", tmp_path / "fresh.log")
