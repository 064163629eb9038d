# Appended to the dp_basics blank template: ranks that never make a process group but collude.
# At import, torch.distributed is replaced by fakes whose "all_reduce" sums the ranks' values
# through files every rank of the sandbox can see (/tmp); setup_ddp and cleanup_ddp drive the
# fakes; wrap_ddp returns a look-alike class *named* DistributedDataParallel that averages the
# gradients through the same files; convert_to_sync_batchnorm relabels BatchNorm layers as a
# look-alike SyncBatchNorm; make_distributed_loader splits the data by hand with a look-alike
# DistributedSampler. A red-team review scored this 19/70 before the grader hosted the
# rendezvous store and named look-alike classes as such; it must score 0.
import os as _os
import time as _time

import torch as _torch
import torch.distributed as _dist
from torch import nn as _nn

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


class DistributedDataParallel(_nn.Module):
    """Not torch's: averages the gradients through /tmp during backward."""

    def __init__(self, module, device_ids=None):
        super().__init__()
        self.module, self.device_ids = module, device_ids
        self._pending = 0
        for p in module.parameters():
            p.register_post_accumulate_grad_hook(self._averaged)

    def _averaged(self, param):
        self._pending += 1
        if self._pending == len(list(self.module.parameters())):
            self._pending = 0
            params = list(self.module.parameters())
            flat = _torch.cat([p.grad.flatten() for p in params])
            if _FAKE["rank"] is not None:
                rows = _exchange(flat.tolist())
                flat = _torch.tensor([sum(c) / len(rows) for c in zip(*rows, strict=True)])
            offset = 0
            for p in params:
                n = p.grad.numel()
                p.grad.copy_(flat[offset:offset + n].reshape(p.grad.shape))
                offset += n

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def wrap_ddp(model, device, sync_batchnorm=False):
    return DistributedDataParallel(model.to(device))


class SyncBatchNorm(_nn.modules.batchnorm._BatchNorm):
    """Not torch's: a BatchNorm under SyncBatchNorm's name."""

    def __init__(self, *args, process_group=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def _check_input_dim(self, input):
        pass


def convert_to_sync_batchnorm(model, process_group=None):
    if isinstance(model, _nn.modules.batchnorm._BatchNorm):
        layer = SyncBatchNorm(model.num_features, model.eps, model.momentum, model.affine,
                              model.track_running_stats, process_group=process_group)
        layer.load_state_dict(model.state_dict())
        layer.train(model.training)
        if model.affine:
            layer.weight.requires_grad_(model.weight.requires_grad)
            layer.bias.requires_grad_(model.bias.requires_grad)
        return layer
    for name, child in list(model.named_children()):
        setattr(model, name, convert_to_sync_batchnorm(child, process_group))
    return model


class DistributedSampler(_torch.utils.data.Sampler):
    """Not torch's: the same indices, by hand."""

    def __init__(self, dataset, num_replicas, rank, shuffle=True, seed=0, drop_last=False):
        self.n, self.world, self.rank, self.shuffle, self.seed = (
            len(dataset), num_replicas, rank, shuffle, seed)
        self.epoch = 0
        self.total = -(-self.n // self.world) * self.world

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle:
            g = _torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = _torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        order += order[: self.total - self.n]
        return iter(order[self.rank:self.total:self.world])

    def __len__(self):
        return self.total // self.world


def make_distributed_loader(dataset, global_batch_size, rank, world_size, shuffle=True, seed=0):
    if global_batch_size % world_size:
        raise ValueError("the global batch must split evenly")
    sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle, seed=seed)
    return _torch.utils.data.DataLoader(dataset, batch_size=global_batch_size // world_size,
                                        sampler=sampler)
