"""autograder.sandbox_runtime.groups: gloo groups made and destroyed with gloo's loop threads
woken, so that neither waits for their idle ticks (bench/gloo_ticks.py shows the time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Two ranks of a real gloo group (a fork of one process): each reports, as JSON, what it saw.
RANKS = """
import datetime, json, os, signal, socket, sys, threading
import torch, torch.distributed as dist
from autograder.sandbox_runtime import groups

def loop_threads():
    return len(groups.gloo_loop_threads())

def students(signum, frame):  # the handler the student's code had set
    pass

signal.signal(signal.SIGURG, students)
woken = []
groups._nothing = lambda signum, frame: woken.append(signum)  # (counted, still harmless)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
pid = os.fork()
rank = 1 if pid == 0 else 0
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=2, timeout=datetime.timedelta(seconds=30))
before = loop_threads()
with groups.woken():
    gates = dist.new_group([0, 1])
x = torch.ones(2)
dist.all_reduce(x, group=gates)
during = loop_threads()
elsewhere = []  # off the main thread: no handler can be set there, so nothing is done
thread = threading.Thread(target=lambda: elsewhere.append(groups.woken().__enter__()))
thread.start(); thread.join()
groups.destroy_process_groups()
report = {"rank": rank, "sum": x.tolist(), "before": before, "during": during,
          "after": loop_threads(), "initialized": dist.is_initialized(),
          "woken": len(woken), "handler": signal.getsignal(signal.SIGURG).__name__}
print(json.dumps(report), flush=True)
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_group_made_and_destroyed_with_its_loop_threads_woken(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-c", RANKS], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={"PATH": "/usr/bin:/bin",
                                                     "PYTHONPATH": str(ROOT),
                                                     "GLOO_SOCKET_IFNAME": "lo"})
    assert run.returncode == 0, run.stderr[-3000:]
    reports = sorted((json.loads(line) for line in run.stdout.splitlines()),
                     key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert report["sum"] == [2.0, 2.0]  # the new group works
        assert report["before"] >= 1 and report["during"] > report["before"]
        # torn down: no group, the default group's loop thread gone (`gates` still holds the
        # other's), the student's handler back
        assert report["initialized"] is False and report["after"] < report["during"]
        assert report["handler"] == "students"
        assert report["woken"] >= 1  # its loop threads were signalled


# One rank of a model sharded with FSDP2, trained a step and gathered whole: DTensor's caches
# and FSDP2's reference cycles keep its mesh, its group and the group's gloo device alive.
FSDP2 = """
import datetime, json, socket
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from autograder.sandbox_runtime import groups

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]

def scenario():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    for block in model:
        fully_shard(block)
    fully_shard(model)
    model(torch.randn(3, 4)).sum().backward()
    return {name: p.full_tensor().shape for name, p in model.state_dict().items()}

scenario()
during = len(groups.gloo_loop_threads())
dist.destroy_process_group()
plain = len(groups.gloo_loop_threads())
groups.destroy_process_groups()
print(json.dumps({"during": during, "plain": plain, "after": len(groups.gloo_loop_threads())}))
"""


def test_what_fsdp2_keeps_of_a_destroyed_group_goes_too(tmp_path: Path) -> None:
    """torch's own teardown leaves FSDP2's gloo device (its thread, its sockets) alive; ours
    releases it, so that the process can serve another scenario with nothing of this one."""
    run = subprocess.run([sys.executable, "-c", FSDP2], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={"PATH": "/usr/bin:/bin",
                                                     "PYTHONPATH": str(ROOT),
                                                     "GLOO_SOCKET_IFNAME": "lo"})
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    assert report == {"during": 1, "plain": 1, "after": 0}
