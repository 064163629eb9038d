"""autograder.sandbox.observer: a rank of the grader's own in the student's process group.

The observer runs trusted code (the functions below, in a fork of this process), joins the
group the student's rank makes at the grader's store, and records what that rank posted: the
grade can rest on it, where a student rank's own report could be forged.
"""

import os
import time

import pytest
import torch
import torch.distributed as dist

from autograder.runner.observe import hold_until_waiting, join_group, observe, posted
from autograder.sandbox.client import ObservedFailure, SandboxTimeout, StudentError
from autograder.sandbox.isolation import OBSERVER_UID_RANGE, UID_RANGE
from autograder.sandbox.observer import Observed, ObserverBroken, until_blocked

PROBES = """
def send_values(mod, rank, world_size, port, own):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    values = torch.tensor(own)
    mod.contribute(values)
    return {"rank": rank, "pid": __import__("os").getpid()}
"""

HONEST = """
import torch.distributed as dist
def contribute(values):
    dist.all_reduce(values)
"""


def received(seat, size):
    """The observer: contributes zeros, so the sum is exactly what the student's rank sent."""
    join_group(seat)
    buffer = torch.zeros(size)
    seat.note(f"all_reduce #0 ({size} float32)")
    posted(seat, dist.all_reduce(buffer, async_op=True))
    return {"got": buffer.tolist(), "uid": os.getuid(), "pid": os.getpid()}


def run(sandbox, tmp_path, values, observer_rank=0, wait=2.0, size=None):
    per_rank = [None, None]
    per_rank[1 - observer_rank] = values
    return sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                             per_rank=per_rank,
                             observer=observe(received, size or len(values),
                                              rank=observer_rank, wait=wait))


@pytest.mark.parametrize("observer_rank", [0, 1])
def test_the_observer_records_what_the_students_rank_sent(make_sandbox, tmp_path,
                                                           observer_rank):
    sandbox = make_sandbox(HONEST, PROBES)
    values = [float(v) for v in torch.randn(5)]
    results = run(sandbox, tmp_path, values, observer_rank)
    assert results.observed["got"] == pytest.approx(values)
    # the student's rank alone ran in the sandbox, with its own rank number
    assert results.ranks == [1 - observer_rank] and results[0]["rank"] == 1 - observer_rank
    assert results.stores[0].ranks_met() == [0, 1]  # both met at the grader's store
    assert (tmp_path / "observer" / "observer.jsonl").exists()
    # it reads what the student's rank sends through gloo's C++: never as root, nor as the
    # sandbox's uid (which could signal or trace it)
    uid = results.observed["uid"]
    assert uid != sandbox.ids[0] and (uid != 0 or os.geteuid() != 0)
    if os.geteuid() == 0:  # a uid of its own range: never any grading's sandbox's, which the
        # grader kills by uid (a concurrent batch's strays killed an observer once)
        assert OBSERVER_UID_RANGE[0] <= uid <= OBSERVER_UID_RANGE[1]
        assert not UID_RANGE[0] <= uid <= UID_RANGE[1]


def test_kept_ranks_serve_the_rank_number_they_served(make_sandbox, tmp_path):
    sandbox = make_sandbox(HONEST, PROBES)
    first = run(sandbox, tmp_path, [1.0], observer_rank=0)[0]["pid"]
    other = run(sandbox, tmp_path, [2.0], observer_rank=1)[0]["pid"]  # rank 0: a fresh one
    again = run(sandbox, tmp_path, [3.0], observer_rank=0)
    assert other != first and again[0]["pid"] == first
    assert again.observed["got"] == [3.0]


def test_clean_scenarios_share_one_observer_process(make_sandbox, tmp_path):
    """Forking a process that has torch loaded for every scenario, and ending it, cost more
    than most observers' work: one serves the next scenario once it was reset after a
    scenario it saw nothing wrong in; each scenario's record is its own."""
    sandbox = make_sandbox(HONEST, PROBES)
    first = run(sandbox, tmp_path / "a", [1.0, 2.0])
    second = run(sandbox, tmp_path / "b", [3.0])
    assert first.observed["got"] == [1.0, 2.0] and second.observed["got"] == [3.0]
    assert second.observed["pid"] == first.observed["pid"]


def test_an_observer_that_cannot_be_pickled_is_the_graders_mistake(make_sandbox, tmp_path):
    """It goes to its process pickled: a lambda fails, plainly, before any rank runs, and the
    process waiting for scenarios serves the next one."""
    sandbox = make_sandbox(HONEST, PROBES)
    first = run(sandbox, tmp_path / "a", [1.0])
    with pytest.raises(TypeError, match="pickled"):
        sandbox.run_ranks("send_values", 2, (), 60, tmp_path / "b", "contribute",
                          per_rank=[None, [1.0]], observer=observe(lambda seat: {}, rank=0))
    third = run(sandbox, tmp_path / "c", [3.0])
    assert third.observed["got"] == [3.0] and third.observed["pid"] == first.observed["pid"]


def test_after_a_failure_the_next_scenario_gets_a_fresh_observer(make_sandbox, tmp_path):
    """What it saw go wrong may have left its group (or gloo) in any state: its process ends."""
    student = HONEST.replace("dist.all_reduce(values)", "dist.all_reduce(values * 2)")
    sandbox = make_sandbox(student, PROBES)
    first = run(sandbox, tmp_path / "a", [1.0])
    assert first.observed["got"] == [2.0]  # (nothing wrong here: a record of what it got)
    with pytest.raises(ObservedFailure):
        sandbox.run_ranks("send_values", 2, (), 60, tmp_path / "b", "contribute",
                          per_rank=[None, [1.0]], observer=observe(expected_one, rank=0))
    third = run(sandbox, tmp_path / "c", [4.0])
    assert third.observed["got"] == [8.0] and third.observed["pid"] != first.observed["pid"]


def expected_one(seat):
    """An observer that finds fault with anything but 1.0."""
    record = received(seat, 1)
    return record if record["got"] == [1.0] else {"failure": f"got {record['got']}"}


def leaves_a_thread(seat):
    """An observer that leaves a thread of its own running past its scenario."""
    import threading
    import time as clock

    threading.Thread(target=clock.sleep, args=(5,)).start()
    return received(seat, 1)


KEPT = []


def keeps_its_group(seat):
    """An observer with a gloo device that outlives its scenario (something holds it past
    destroy_process_group that the reset does not know of: here, a global)."""
    record = received(seat, 1)
    KEPT.append(dist.ProcessGroupGloo.create_default_device())
    return record


class Sharded:
    """A model's state in a cycle (as FSDP2's modules are) that holds the group's mesh."""

    def __init__(self, mesh):
        self.mesh, self.me = mesh, self


def shards_on_the_group(seat):
    """An observer that leaves what FSDP2 leaves: DTensors on a mesh of its group (whose specs
    DTensor's caches keep) and a reference cycle holding that mesh."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate

    record = received(seat, 1)
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    local = DTensor.from_local(torch.ones(2), mesh, [Replicate()], run_check=False)
    record["sum"] = (local * 2 + 1).to_local().tolist()
    Sharded(mesh)
    return record


def test_what_fsdp2_leaves_goes_at_the_reset(make_sandbox, tmp_path):
    """Its group's gloo device is freed with the group (groups.destroy_process_groups): the
    process serves the next scenario, with nothing of this one's group alive."""
    sandbox = make_sandbox(HONEST, PROBES)
    sharded = sandbox.run_ranks("send_values", 2, (), 60, tmp_path / "a", "contribute",
                                per_rank=[None, [1.0]],
                                observer=observe(shards_on_the_group, rank=0))
    assert sharded.observed["sum"] == [3.0, 3.0]
    after = run(sandbox, tmp_path / "b", [2.0])
    assert after.observed["got"] == [2.0] and after.observed["pid"] == sharded.observed["pid"]


@pytest.mark.parametrize("first", [False, True])
def test_an_observer_whose_group_lives_on_is_not_reused(make_sandbox, tmp_path, first):
    """Its gloo thread and sockets would still be there in the next scenario: a fresh process
    takes it, whether or not the process served a scenario before."""
    sandbox = make_sandbox(HONEST, PROBES)
    if not first:
        run(sandbox, tmp_path / "0", [0.5])
    kept = sandbox.run_ranks("send_values", 2, (), 60, tmp_path / "a", "contribute",
                             per_rank=[None, [1.0]], observer=observe(keeps_its_group, rank=0))
    after = run(sandbox, tmp_path / "b", [2.0])
    assert after.observed["got"] == [2.0] and after.observed["pid"] != kept.observed["pid"]


def leaves_a_native_thread(seat):
    """An observer that leaves a thread Python's threading does not count (as gloo's and
    torch's are; gloo's even goes unnamed for a moment after it starts)."""
    import _thread
    import time as clock

    _thread.start_new_thread(clock.sleep, (5,))
    return received(seat, 1)


@pytest.mark.parametrize("leaves", [leaves_a_thread, leaves_a_native_thread],
                         ids=["python", "native"])
def test_an_observer_that_leaves_a_thread_is_not_reused(make_sandbox, tmp_path, leaves):
    sandbox = make_sandbox(HONEST, PROBES)
    first = sandbox.run_ranks("send_values", 2, (), 60, tmp_path / "a", "contribute",
                              per_rank=[None, [1.0]], observer=observe(leaves, rank=0))
    second = run(sandbox, tmp_path / "b", [2.0])
    assert second.observed["got"] == [2.0] and second.observed["pid"] != first.observed["pid"]


@pytest.mark.parametrize("sent, said, wait", [
    # more bytes than the observer posted: gloo aborts the observer, once they come (a wait
    # the student's rank, starting under load, cannot outlast: the abort ends it)
    ("torch.cat([values, values])", "was killed by SIGABRT at: all_reduce #0 (3 float32)",
     20.0),
    # fewer: gloo aborts the student's rank, and the observer's collective fails
    ("values[:1]", "got no matching collective from your ranks at: all_reduce #0", 1.0),
    # none: the observer waits for it in vain
    ("None", "got no matching collective from your ranks at: all_reduce #0", 1.0),
])
def test_a_wrong_collective_is_the_students_failure_and_says_where(make_sandbox, tmp_path,
                                                                    sent, said, wait):
    student = f"""
import torch, torch.distributed as dist
def contribute(values):
    wrong = {sent}
    if wrong is not None:
        dist.all_reduce(wrong)
"""
    sandbox = make_sandbox(student, PROBES)
    started = time.monotonic()
    with pytest.raises(ObservedFailure) as caught:
        run(sandbox, tmp_path, [1.0, 2.0, 3.0], wait=wait)
    assert said in str(caught.value)
    assert "meanwhile" not in str(caught.value)  # (gloo's errors once the observer ended)
    assert time.monotonic() - started < 30  # the observer's wait, not the call's time limit


def test_a_rank_that_never_joins_fails_with_its_own_error(make_sandbox, tmp_path):
    """The observer, still joining, saw nothing: what the student's rank raised is why (an
    import's error, here a collective without a group)."""
    never_joins = PROBES.replace("dist.init_process_group(", "(lambda *a, **k: 0)(")
    sandbox = make_sandbox(HONEST, never_joins)
    with pytest.raises(StudentError, match="Default process group has not been initialized"):
        run(sandbox, tmp_path, [1.0], wait=1.0)


def test_a_rank_that_ends_without_joining_fails_at_the_groups_start(make_sandbox, tmp_path):
    never_joins = PROBES.replace("dist.init_process_group(", "return (lambda *a, **k: 0)(")
    sandbox = make_sandbox(HONEST, never_joins)
    with pytest.raises(ObservedFailure, match="at: joining the scenario's process group"):
        run(sandbox, tmp_path, [1.0], wait=1.0)


def test_what_the_students_rank_raised_comes_with_the_observers_verdict(make_sandbox, tmp_path):
    sandbox = make_sandbox("def contribute(values):\n    raise NotImplementedError\n", PROBES)
    with pytest.raises(ObservedFailure) as caught:
        run(sandbox, tmp_path, [1.0], wait=1.0)
    assert caught.value.student_error is not None
    assert caught.value.student_error.is_a("NotImplementedError")


def test_a_runtime_error_of_the_students_own_comes_with_the_verdict(make_sandbox, tmp_path):
    """Raised while the observer waited in vain, a RuntimeError is the student's own; one
    raised once the observer had ended (gloo's, its peer gone) is left out (see above)."""
    sandbox = make_sandbox("def contribute(values):\n    raise RuntimeError('boom')\n", PROBES)
    with pytest.raises(ObservedFailure, match="meanwhile.*RuntimeError.*boom") as caught:
        run(sandbox, tmp_path, [1.0], wait=1.0)
    assert caught.value.student_error.is_a("RuntimeError")


def received_quietly(seat, size):
    """`received`, saying nothing of what it does once it has joined."""
    join_group(seat)
    buffer = torch.zeros(size)
    posted(seat, dist.all_reduce(buffer, async_op=True))
    return {"got": buffer.tolist()}


def test_an_observer_that_met_the_ranks_gives_the_verdict_whatever_it_noted(make_sandbox,
                                                                             tmp_path):
    """Having joined is what the observer says, not read from how many notes it wrote."""
    sandbox = make_sandbox("def contribute(values):\n    raise NotImplementedError\n", PROBES)
    with pytest.raises(ObservedFailure, match="at: joining") as caught:
        sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                          per_rank=[None, [1.0]],
                          observer=observe(received_quietly, 1, rank=0, wait=1.0))
    assert caught.value.student_error.is_a("NotImplementedError")


def test_a_rank_that_raised_is_ended_so_the_observer_is_not_left_waiting(make_sandbox,
                                                                         tmp_path):
    """Its group outlives a reset when something still holds it (torch's FSDP and DDP do;
    here the student's module): only the rank's end closes its sockets, which ends the
    observer's collective at once rather than after its whole `wait`."""
    student = ("import torch.distributed as dist\nHELD = []\n"
               "def contribute(values):\n"
               "    HELD.append(dist.distributed_c10d._get_default_group())\n"
               "    raise ValueError('not yet')\n")
    sandbox = make_sandbox(student, PROBES)
    started = time.monotonic()
    with pytest.raises(ObservedFailure) as caught:
        run(sandbox, tmp_path, [1.0], wait=30.0)
    assert caught.value.student_error.is_a("ValueError")
    assert time.monotonic() - started < 15
    assert sandbox._kept.processes() == []  # (its reset could not end the observer's wait)


def test_a_rank_that_raised_is_kept_when_its_reset_ends_the_observers_wait(make_sandbox,
                                                                          tmp_path):
    """Nothing holds its group: the reset closes it, the observer's wait ends, and the rank
    serves the next scenario (forking one per scenario was a blank submission's main cost)."""
    sandbox = make_sandbox("def contribute(values):\n    raise ValueError('not yet')\n", PROBES)
    kept = []
    for _ in range(2):
        with pytest.raises(ObservedFailure) as caught:
            run(sandbox, tmp_path, [1.0], wait=30.0)
        assert caught.value.student_error.is_a("ValueError")
        kept.append([process.pid for process in sandbox._kept.processes()])
    assert len(kept[0]) == 1 and kept[1] == kept[0]


def test_the_students_hang_is_not_the_observers_failure(make_sandbox, tmp_path):
    """An observer that saw everything it waited for gives no verdict: a rank that hangs
    afterwards is a hang as without an observer (retried once by the plugin)."""
    student = HONEST + "    import time; time.sleep(60)\n"
    sandbox = make_sandbox(student, PROBES)
    with pytest.raises(SandboxTimeout):
        sandbox.run_ranks("send_values", 2, (), 3, tmp_path, "contribute",
                          per_rank=[None, [1.0]], observer=observe(received, 1, rank=0))


def broken(seat):
    join_group(seat)
    raise ValueError("a bug of the grader's")


def test_an_observer_that_raises_is_the_graders_failure(make_sandbox, tmp_path):
    sandbox = make_sandbox(HONEST, PROBES)
    with pytest.raises(ObserverBroken, match="ValueError: a bug of the grader's"):
        sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                          per_rank=[None, [1.0]], observer=observe(broken, rank=0, wait=1.0))


def test_an_observers_failure_is_inert_text():
    observed = Observed({"failure": "sent \x1b[31mred\x07"}, (), True, None, "")
    assert "\x1b" not in observed.failure() and "\x07" not in observed.failure()
    aborted = Observed(None, ("all_reduce #2 (4 float32)",), True, "was killed by SIGABRT",
                       "terminate called ... Received data size doesn't match expected "
                       "size. 8 vs 4\nAborted")
    assert aborted.failure() == (
        "the grader's own rank in this scenario was killed by SIGABRT at: all_reduce #2 "
        "(4 float32) (Received data size doesn't match expected size. 8 vs 4)")


def test_ranks_slow_to_start_are_met_all_the_same(make_sandbox, tmp_path):
    """Meeting waits for the scenario's time (a rank's start is slow on half a CPU); only
    each collective is held to the observer's `wait`."""
    slow = PROBES.replace("    import torch,", "    import time; time.sleep(3)\n    import torch,")
    sandbox = make_sandbox(HONEST, slow)
    assert run(sandbox, tmp_path, [2.0], wait=1.0).observed["got"] == [2.0]


def imports_late(seat):
    """An observer that imports a module nobody imported yet, after its uid was dropped."""
    record = received(seat, 1)
    import pickletools  # noqa: F401  (stdlib, imported by nothing here)

    status = open("/proc/self/status").read()
    return {**record, "caps": status.split("CapEff:")[1].split()[0]}


def test_the_observer_still_imports_what_it_needs_late(make_sandbox, tmp_path):
    """Only the right to read files stays of root's (the interpreter may be under /root)."""
    sandbox = make_sandbox(HONEST, PROBES)
    observed = sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                                 per_rank=[None, [1.0]],
                                 observer=observe(imports_late, rank=0, wait=1.0))
    if os.geteuid() == 0:
        assert observed.observed["uid"] != 0
        assert int(observed.observed["caps"], 16) == 1 << 2  # CAP_DAC_READ_SEARCH alone


def test_ranks_that_run_out_of_time_while_the_observer_waits_timed_out(make_sandbox, tmp_path):
    """The observer's collective fails when we end the student's ranks at their time limit:
    that is a timeout (retried once as a hang by the plugin), not the observer's verdict."""
    slow = "import time\n" + HONEST.replace("    dist.all_reduce", "    time.sleep(60)\n"
                                                                   "    dist.all_reduce")
    sandbox = make_sandbox(slow, PROBES)
    with pytest.raises(SandboxTimeout):
        sandbox.run_ranks("send_values", 2, (), 3, tmp_path, "contribute",
                          per_rank=[None, [1.0]], observer=observe(received, 1, rank=0,
                                                                   wait=30.0))


def held(seat, at_most):
    """An observer that holds its collective back until the student's rank waits for it."""
    join_group(seat)
    blocked = hold_until_waiting(seat, at_most)
    buffer = torch.zeros(1)
    seat.note("all_reduce #0 (1 float32)")
    posted(seat, dist.all_reduce(buffer, async_op=True))
    return {"blocked": blocked, "ranks": list(seat.ranks), "got": buffer.tolist()}


def test_an_observer_knows_when_the_students_rank_waits_for_it(make_sandbox, tmp_path):
    """The observer is told the student's rank processes, and sees (from the kernel) that the
    rank is blocked in the collective it holds back: it need not wait out its limit."""
    sandbox = make_sandbox(HONEST, PROBES)
    results = sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                                per_rank=[None, [5.0]],
                                observer=observe(held, 30.0, rank=0, wait=40.0))
    assert results.observed["blocked"] is True and results.observed["got"] == [5.0]
    assert results.observed["ranks"] == [sandbox._kept.processes()[0].pid]


def test_a_rank_still_running_is_held_for_the_whole_limit(make_sandbox, tmp_path):
    busy = """
import time, torch.distributed as dist
def contribute(values):
    end = time.monotonic() + 3
    while time.monotonic() < end:
        pass
    dist.all_reduce(values)
"""
    sandbox = make_sandbox(busy, PROBES)
    results = sandbox.run_ranks("send_values", 2, (), 60, tmp_path, "contribute",
                                per_rank=[None, [5.0]],
                                observer=observe(held, 0.5, rank=0, wait=10.0))
    assert results.observed["blocked"] is False and results.observed["got"] == [5.0]


def test_until_blocked_reads_the_kernels_view_of_each_thread(tmp_path):
    import subprocess
    import sys

    asleep = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        time.sleep(0.5)  # (the sleeper past its start)
        assert until_blocked((asleep.pid,), 10.0) is True
        assert until_blocked((asleep.pid, ended.pid), 10.0) is True  # an ended one runs nothing
        assert until_blocked((asleep.pid, spinning.pid), 0.3) is False
        # none to look at: as long as without a look
        started = time.monotonic()
        assert until_blocked((), 0.3) is False and time.monotonic() - started >= 0.3
    finally:
        for process in (asleep, spinning):
            process.kill()
            process.wait()
