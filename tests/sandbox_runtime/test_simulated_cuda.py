"""Simulated GPUs (autograder/sandbox_runtime/simulated_cuda.py) with real torch.

Activation is for the life of a process, as in a sandbox worker, so each scenario runs in a
fresh Python process; it prints JSON that the test reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PRELUDE = """
import json, os, sys
import torch, torch._dynamo
import torch.distributed as dist
from torch import nn
from autograder.sandbox_runtime import simulated_cuda as sim
sim.activate(3)
def refused(fn):
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
"""


def run(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cuda_looks_present_and_moves_are_labelled_not_made() -> None:
    out = run("""
        x = torch.randn(2, 3)
        y = x.to("cuda:1")
        z = torch.zeros(2, device="cuda")
        torch.cuda.set_device(2)
        w = torch.ones(1).cuda()
        print(json.dumps({
            "available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "x": str(x.device), "y": str(y.device), "same_values": bool(torch.equal(x, y.cpu())),
            "z": str(z.device), "w": str(w.device), "back": str(y.cpu().device),
            "sum": str((y * 2).sum().device), "is_cuda": y.is_cuda, "index": y.get_device(),
            "bad_ordinal": refused(lambda: torch.ones(1, device="cuda:3")),
            "numpy": refused(lambda: y.numpy()),
            "journal": sim.journal()}))
    """)
    assert out["available"] is True and out["count"] == 3
    assert (out["x"], out["y"], out["z"], out["w"], out["back"], out["sum"]) == (
        "cpu", "cuda:1", "cuda:0", "cuda:2", "cpu", "cuda:1")
    assert out["same_values"] and out["is_cuda"] and out["index"] == 1
    assert "invalid device ordinal" in out["bad_ordinal"]
    assert out["numpy"].startswith("TypeError: can't convert cuda:1")
    assert {"event": "set_device", "device": "cuda:2"} in out["journal"]


def test_mixing_devices_fails_as_on_a_gpu() -> None:
    out = run("""
        model = nn.Linear(3, 1).to("cuda:0")
        batch = torch.randn(4, 3)
        print(json.dumps({
            "params": sorted({str(p.device) for p in model.parameters()}),
            "cpu_batch": refused(lambda: model(batch)),
            "moved": str(model(batch.to("cuda:0")).device),
            "scalar_ok": str((model.weight * torch.tensor(2.0)).device),
            "caller_kept": str(batch.device)}))
    """)
    assert out["params"] == ["cuda:0"] and out["moved"] == "cuda:0"
    assert out["cpu_batch"].startswith("RuntimeError: Expected all tensors to be on the same "
                                       "device")
    assert out["scalar_ok"] == "cuda:0" and out["caller_kept"] == "cpu"


def test_data_parallel_checks_placement_and_gathers_on_output_device() -> None:
    out = run("""
        x = torch.randn(5, 3)
        unmoved = nn.DataParallel(nn.Linear(3, 2), device_ids=[1, 2])
        moved = nn.DataParallel(nn.Linear(3, 2).to("cuda:1"), device_ids=[1, 2],
                                output_device=2)
        every = nn.DataParallel(nn.Linear(3, 2).to("cuda:0"))
        print(json.dumps({
            "unmoved": refused(lambda: unmoved(x)),
            "gathered": str(moved(x).device), "ids": moved.device_ids,
            "default_ids": every.device_ids, "default_out": every.output_device,
            "bad_id": refused(lambda: nn.DataParallel(nn.Linear(3, 2), device_ids=[0, 5]))}))
    """)
    assert "must have its parameters and buffers on device cuda:1" in out["unmoved"]
    assert out["gathered"] == "cuda:2" and out["ids"] == [1, 2]
    assert out["default_ids"] == [0, 1, 2] and out["default_out"] == 0
    assert out["bad_id"] is not None


def test_ddp_keeps_device_ids_runs_nccl_on_gloo_and_averages() -> None:
    out = run("""
        def rank_main(rank, port):
            torch.cuda.set_device(rank)
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=2)
            torch.manual_seed(0)
            model = nn.Linear(3, 1).to(f"cuda:{rank}")
            ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
            x = torch.full((2, 3), float(rank + 1))
            ddp(x).sum().backward()
            cpu_ids = refused(lambda: nn.parallel.DistributedDataParallel(
                nn.Linear(2, 2), device_ids=[rank]))
            with open(f"{folder}/rank{rank}.json", "w") as f:
                json.dump({"backend": dist.get_backend(), "ids": ddp.device_ids,
                           "grad": model.weight.grad.tolist(), "cpu_ids": cpu_ids,
                           "journal": sim.journal()}, f)
            os._exit(0)
        import socket, tempfile
        folder = tempfile.mkdtemp()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        pids = []
        for rank in range(2):
            pid = os.fork()
            if pid == 0:
                rank_main(rank, port)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        print(json.dumps([json.load(open(f"{folder}/rank{r}.json")) for r in range(2)]))
    """)
    for rank, report in enumerate(out):
        assert report["backend"] == "nccl" and report["ids"] == [rank]
        # Rank r's inputs are all r + 1, two rows: the averaged gradient is (2 * 1 + 2 * 2) / 2.
        assert report["grad"] == [[3.0, 3.0, 3.0]]
        assert report["cpu_ids"].startswith("ValueError: DistributedDataParallel device_ids")
        events = [e["event"] for e in report["journal"]]
        assert events.index("set_device") < events.index("init_process_group")
