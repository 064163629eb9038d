# Appended to a dp_basics module: classes that take the names of torch's without being them.
# wrap_ddp returns a look-alike *named* DistributedDataParallel that averages the gradients with
# torch.distributed.all_reduce during backward (right numbers, not torch's class);
# convert_to_sync_batchnorm relabels BatchNorm layers as a look-alike SyncBatchNorm;
# make_distributed_loader splits the data by hand with a look-alike DistributedSampler. Each of
# those functions must score 0.
import torch as _torch
import torch.distributed as _dist
from torch import nn as _nn


class DistributedDataParallel(_nn.Module):
    """Not torch's: averages the gradients with all_reduce during backward."""

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
            if _dist.is_initialized():
                _dist.all_reduce(flat)
                flat /= _dist.get_world_size()
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
