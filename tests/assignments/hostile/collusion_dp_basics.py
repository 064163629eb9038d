# Appended to the dp_basics blank template, with lookalikes_dp_basics.py after it: ranks that
# never make a process group but collude. At import, torch.distributed is replaced by fakes
# whose "all_reduce" sums the ranks' values through files every rank of the sandbox can see
# (/tmp); setup_ddp and cleanup_ddp drive the fakes, and the look-alike DDP class averages its
# gradients through them. A red-team review scored this 19/70 before the grader hosted the
# rendezvous store and named look-alike classes as such; it must score 0.
import os as _os
import time as _time

import torch as _torch
import torch.distributed as _dist

_FAKE = {"rank": None, "world": None, "port": None, "calls": 0}


def _exchange(values):
    """Every rank's list of floats, through files in /tmp (the ranks share it)."""
    _FAKE["calls"] += 1
    tag = f"/tmp/collude-{_FAKE['port']}-{_FAKE['calls']}"
    with open(f"{tag}-{_FAKE['rank']}.tmp", "w") as f:
        f.write(" ".join(repr(float(v)) for v in values))
    _os.rename(f"{tag}-{_FAKE['rank']}.tmp", f"{tag}-{_FAKE['rank']}")
    deadline = _time.time() + 20
    while _time.time() < deadline:
        if all(_os.path.exists(f"{tag}-{r}") for r in range(_FAKE["world"])):
            break
        _time.sleep(0.01)
    rows = []
    for r in range(_FAKE["world"]):
        with open(f"{tag}-{r}") as f:
            rows.append([float(v) for v in f.read().split()])
    return rows


def _fake_init(backend=None, init_method=None, rank=0, world_size=1, **kwargs):
    _FAKE.update(rank=rank, world=world_size, backend=backend or "gloo",
                 port=str(init_method).rsplit(":", 1)[-1])


def _fake_all_reduce(tensor, op=None, group=None, async_op=False):
    rows = _exchange(tensor.flatten().tolist())
    total = [sum(column) for column in zip(*rows, strict=True)]
    tensor.copy_(_torch.tensor(total, dtype=tensor.dtype).reshape(tensor.shape))


_dist.init_process_group = _fake_init
_dist.is_initialized = lambda: _FAKE["rank"] is not None
_dist.get_rank = lambda group=None: _FAKE["rank"]
_dist.get_world_size = lambda group=None: _FAKE["world"]
_dist.get_backend = lambda group=None: _FAKE["backend"]
_dist.all_reduce = _fake_all_reduce
_dist.barrier = lambda *a, **k: _exchange([0.0])
_dist.destroy_process_group = lambda *a, **k: _FAKE.update(rank=None, world=None)


class _Store:
    host = "127.0.0.1"

    @property
    def port(self):
        return int(_FAKE["port"])


_dist.distributed_c10d._get_default_store = lambda: _Store()


def setup_ddp(rank, world_size, master_port, master_addr="127.0.0.1", backend=None):
    if not 0 <= rank < world_size:
        raise ValueError("rank out of range")
    if _dist.is_initialized():
        raise RuntimeError("a default process group already exists: call cleanup_ddp first")
    _dist.init_process_group(backend or "gloo", f"tcp://{master_addr}:{master_port}",
                             rank=rank, world_size=world_size)
    return _torch.device("cpu")


def cleanup_ddp():
    if _dist.is_initialized():
        _dist.destroy_process_group()
