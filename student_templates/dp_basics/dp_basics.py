"""DataParallel basics: data-parallel training in PyTorch, from DataParallel to DDP.

Implement every function below. Each docstring is the contract the grader checks, so read it
closely: the edge cases it names are tested. Most of the grading runs on CPU, where there is no
GPU to spread work over; the functions must still behave as documented there.

Part A - DataParallel: wrap a model, predict how a batch is split, emulate one forward pass.
Part B - dtypes: make inputs match a model (the "... must have the same dtype, but got Double
         and Float" error).
Part C - SyncBatchNorm: batch statistics across devices.
Part D - DistributedDataParallel: process groups, wrapping, sharded loading, a training step.
Part E - checkpoints: `module.` prefixes and loading across wrapped and unwrapped models.

Run the public tests with `pytest` in the folder that holds this file.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from itertools import chain
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# Wrappers whose real model lives in `.module`.
WRAPPERS = (nn.DataParallel, DistributedDataParallel)


# --------------------------------------------------------------------------- Part A: DataParallel

def wrap_data_parallel(model: nn.Module, device_ids: list[int] | None = None) -> nn.Module:
    """Wrap `model` in `nn.DataParallel` when GPUs are available.

    - A model already wrapped in `nn.DataParallel` or `DistributedDataParallel` is returned
      unchanged, whatever `device_ids` says: never wrap twice.
    - With CUDA: `ids` is `device_ids`, or every visible GPU when `device_ids` is None or empty.
      Every id must be a visible GPU index (`ValueError` otherwise). The model is moved to
      `cuda:ids[0]` and `nn.DataParallel(model, device_ids=ids, output_device=ids[0])` is returned.
    - Without CUDA: when `device_ids` is None or empty, the model itself is returned, unwrapped
      (on CPU, DataParallel would only add a `module.` prefix to every name). Non-empty
      `device_ids` raise `ValueError` naming the GPUs that are missing.
    """
    raise NotImplementedError("wrap_data_parallel is not implemented yet")


def data_parallel_chunk_sizes(batch_size: int, num_devices: int) -> list[int]:
    """The sizes of the pieces DataParallel's scatter hands to the devices, in device order.

    DataParallel splits the batch with the `torch.chunk` rule: every piece has
    `ceil(batch_size / num_devices)` rows except possibly the last, and fewer than
    `num_devices` pieces are made when the batch runs out (batch 5 on 4 devices -> [2, 2, 1]:
    only 3 devices get work). `ValueError` when `batch_size < 1` or `num_devices < 1`.
    """
    raise NotImplementedError("data_parallel_chunk_sizes is not implemented yet")


def emulate_data_parallel(model: nn.Module, inputs: torch.Tensor,
                          num_replicas: int) -> torch.Tensor:
    """Emulate one `nn.DataParallel` forward pass of `model` over `num_replicas` devices, on CPU.

    Split `inputs` along dim 0 with the chunk rule (`data_parallel_chunk_sizes`), run a replica
    of `model` on each chunk, and concatenate the outputs along dim 0. It must behave like
    DataParallel does on GPUs:
    - the output is what DataParallel would return;
    - gradients of a loss on the output reach the original model's parameters (summed over the
      replicas, as DataParallel's backward does);
    - each replica's forward sees its chunk alone, BatchNorm in train mode included;
    - the original model's buffers (BatchNorm running statistics) are updated from the first
      chunk only: replica 0 shares its buffers with the model, other replicas work on copies.
      Do not restore buffers afterwards with an in-place `copy_` into tensors the forward
      used: autograd saved them for backward, and backward then raises a RuntimeError (a
      variable needed for gradient computation has been modified by an inplace operation).

    Hint: a replica need not be a deep copy of the model. `torch.func.functional_call(model,
    tensors, (chunk,))` runs `model`'s forward with the tensors of the dict `tensors` (names
    as in `named_parameters()` / `named_buffers()`) in place of its own, so each replica can
    use the model's own parameters together with buffers of your choice.
    """
    raise NotImplementedError("emulate_data_parallel is not implemented yet")


# --------------------------------------------------------------------------- Part B: dtypes

def match_input_dtype(inputs: Any, model: nn.Module) -> Any:
    """Return `inputs` made compatible with `model`'s parameters.

    - Floating-point tensors are cast to the dtype of the model's floating-point parameters
      (of its floating-point buffers when it has none) and moved to their device.
    - Integer and bool tensors (indices, masks) keep their dtype but move to that device.
    - NumPy arrays become tensors first (NumPy's default float64 stays float64 as a tensor,
      which a float32 model refuses: "mat1 and mat2 must have the same dtype, but got Double
      and Float" from a Linear layer on torch 2.13), then follow the rules above.
    - Lists, tuples (namedtuples too) and dicts are converted recursively and keep their type.
    - Any other object is returned as it is.
    - A model with no floating-point parameters or buffers leaves dtypes alone.
    - The caller's tensors are never modified in place: return new ones where needed.
    """
    raise NotImplementedError("match_input_dtype is not implemented yet")


# --------------------------------------------------------------------------- Part C: SyncBatchNorm

def convert_to_sync_batchnorm(model: nn.Module, process_group: Any = None) -> nn.Module:
    """Replace every BatchNorm1d/2d/3d in `model` with an equivalent `nn.SyncBatchNorm`.

    BatchNorm layers at any depth are converted, including a model that *is* a BatchNorm layer
    and layers inside DataParallel / DistributedDataParallel wrappers. Each SyncBatchNorm keeps
    the original's weight, bias, running statistics, eps, momentum, `affine` and
    `track_running_stats` flags, `requires_grad` settings and training mode, and uses
    `process_group` (None: the default group). Other modules are left untouched.

    Returns the converted model: callers must use the return value, since a top-level
    BatchNorm cannot be converted in place.
    """
    raise NotImplementedError("convert_to_sync_batchnorm is not implemented yet")


# --------------------------------------------------------------------------- Part D: DDP

def setup_ddp(rank: int, world_size: int, master_port: int, master_addr: str = "127.0.0.1",
              backend: str | None = None) -> torch.device:
    """Initialise the default process group for this rank and return this rank's device.

    - `ValueError` unless `world_size >= 1` and `0 <= rank < world_size`.
    - `RuntimeError` with a clear message if a default process group already exists.
    - The backend is `backend` when given; otherwise `"nccl"` when CUDA has at least
      `world_size` GPUs, else `"gloo"`.
    - Ranks meet at `master_addr:master_port`.
    - With nccl, this rank's GPU `cuda:rank` is made the current CUDA device (pinned) and
      returned; otherwise `torch.device("cpu")` is returned.
    """
    raise NotImplementedError("setup_ddp is not implemented yet")


def wrap_ddp(model: nn.Module, device: torch.device,
             sync_batchnorm: bool = False) -> DistributedDataParallel:
    """Move `model` to `device` and wrap it in `DistributedDataParallel`.

    - With `sync_batchnorm=True` the BatchNorm layers are converted to SyncBatchNorm first;
      SyncBatchNorm cannot train on CPU, so asking for it with a CPU device is a `ValueError`.
    - On CUDA the wrapper gets `device_ids=[device.index]`; on CPU it gets no device_ids.
    Needs an initialised default process group (see `setup_ddp`).
    """
    raise NotImplementedError("wrap_ddp is not implemented yet")


def make_distributed_loader(dataset: Dataset, global_batch_size: int, rank: int, world_size: int,
                            shuffle: bool = True, seed: int = 0,
                            drop_last: bool = False) -> DataLoader:
    """A DataLoader giving rank `rank` of `world_size` its own share of `dataset`.

    - Backed by a `DistributedSampler`: the ranks' shares are disjoint and, together, cover the
      dataset (padded with repeated samples to an equal share per rank unless `drop_last`).
    - `shuffle`, `seed` and `drop_last` are passed on to the sampler (`drop_last`: drop the
      tail that would not split evenly across the ranks instead of padding).
    - Each rank's batch size is `global_batch_size // world_size`, so one step of all ranks
      together processes `global_batch_size` samples; `ValueError` when `world_size` does not
      divide `global_batch_size` (or any argument is out of range).
    - Works without an initialised process group (rank and world size are given explicitly).
    """
    raise NotImplementedError("make_distributed_loader is not implemented yet")


def ddp_train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                   optimizer: torch.optim.Optimizer, loss_fn: Any) -> float:
    """One training step on `batch = (inputs, targets)`; returns the loss as a Python float.

    Move inputs and targets to the model's device, zero the gradients, run the forward pass
    and the loss, backpropagate and step the optimizer. Works for plain and wrapped models.
    """
    raise NotImplementedError("ddp_train_step is not implemented yet")


def cleanup_ddp() -> None:
    """Destroy the default process group if there is one; do nothing otherwise."""
    raise NotImplementedError("cleanup_ddp is not implemented yet")


# --------------------------------------------------------------------------- Part E: checkpoints

def unwrap_model(model: nn.Module) -> nn.Module:
    """The innermost model under any nesting of DataParallel / DistributedDataParallel."""
    raise NotImplementedError("unwrap_model is not implemented yet")


def load_state_dict_flexible(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load `state_dict` into `model`, whichever of them was wrapped.

    The checkpoint may come from a wrapped model (every key starts with `module.`, once per
    level of wrapping) or an unwrapped one, and `model` may be wrapped or not. Only whole
    leading `module.` levels are ever removed: a name such as `submodule.weight` is never
    changed, and neither is a real child that happens to be called `module`. Loading is strict
    otherwise: keys that are really missing or unexpected still raise. The caller's dict is
    never modified.
    """
    raise NotImplementedError("load_state_dict_flexible is not implemented yet")
