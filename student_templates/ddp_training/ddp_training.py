"""DDP training: what a real DistributedDataParallel job needs beyond the first setup.

Implement every function below. Each docstring is the contract the grader checks, so read it
closely: the edge cases it names are tested. Most of the grading runs on CPU with the gloo
backend (several processes on one machine stand in for several GPUs and nodes); the functions
must behave as documented there.

Part A - launch: a process group from a launcher's (torchrun's) environment, on any node.
Part B - the loop: epochs with a DistributedSampler, gradient accumulation with no_sync().
Part C - checkpoints: save once for all ranks, resume on every rank.
Part D - metrics: averages across ranks, an evaluation that counts every sample once.
Part E - mixed precision: autocast, GradScaler and gradient clipping.
Part F - unused parameters: a model whose forward skips a branch in some steps.

Run the public tests with `pytest` in the folder that holds this file.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# The variables torchrun sets in every process it starts.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _unwrapped(model: nn.Module) -> nn.Module:
    while isinstance(model, (nn.DataParallel, DistributedDataParallel)):
        model = model.module
    return model


# --------------------------------------------------------------------------- Part A: launch

def init_from_env(backend: str | None = None) -> torch.device:
    """Initialise the default process group from torchrun's environment; return this
    process's device.

    - Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT` from
      `os.environ`. A missing or non-integer `RANK`, `WORLD_SIZE` or `LOCAL_RANK`, or a missing
      `MASTER_ADDR` / `MASTER_PORT`, is a `ValueError` whose message names the variable.
    - `ValueError` unless `WORLD_SIZE >= 1`, `0 <= RANK < WORLD_SIZE` and
      `0 <= LOCAL_RANK < WORLD_SIZE`.
    - The backend is `backend` when given; otherwise `"nccl"` when CUDA has more than
      `LOCAL_RANK` GPUs, else `"gloo"`.
    - The group is made with `init_method="env://"` (the variables above say where to meet).
    - With nccl, this process's GPU is `cuda:LOCAL_RANK`: it is made the current CUDA
      device before the group is initialised, and returned. Otherwise `torch.device("cpu")`.
    """
    raise NotImplementedError("init_from_env is not implemented yet")


# --------------------------------------------------------------------------- Part B: the loop

def train_epochs(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer,
                 loss_fn: Any, epochs: int, start_epoch: int = 0) -> list[float]:
    """Train for epochs `start_epoch, ..., epochs - 1`; return each epoch's mean batch loss.

    - Before each epoch, when the loader's sampler has `set_epoch` (a DistributedSampler), call
      it with the epoch number, so every epoch gets its own shuffle (the same on every rank).
    - Each batch `(inputs, targets)` is moved to the model's device; then zero the gradients,
      forward, loss, backward and an optimizer step.
    - The value for an epoch is the mean of its batches' losses (Python floats), on this rank.
    """
    raise NotImplementedError("train_epochs is not implemented yet")


def accumulate_step(model: nn.Module, micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
                    optimizer: torch.optim.Optimizer, loss_fn: Any) -> float:
    """One optimizer step over `k = len(micro_batches)` micro-batches (gradient accumulation).

    - Zero the gradients, then backpropagate each micro-batch's loss divided by `k`, then
      step once.
    - The backward passes of the first `k - 1` micro-batches run inside `model.no_sync()`,
      the last one outside it. A model without `no_sync` (not wrapped) accumulates the same
      way.
    - `ValueError` for an empty list. Returns the mean of the k (undivided) losses as a float.
    """
    raise NotImplementedError("accumulate_step is not implemented yet")


# --------------------------------------------------------------------------- Part C: checkpoints

def save_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    epoch: int) -> None:
    """Save a checkpoint once for all ranks.

    - Only rank 0 (of the default process group, or the only process when there is none)
      writes `path` with `torch.save`: a dict with `"model"` (the state dict of the model
      unwrapped from any DDP/DataParallel, so its keys have no `module.` prefix),
      `"optimizer"` (the optimizer's state dict) and `"epoch"` (`epoch`, the number of epochs
      completed).
    - With a process group, every rank (rank 0 after writing) then calls `dist.barrier()`.
    """
    raise NotImplementedError("save_checkpoint is not implemented yet")


def load_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    device: torch.device) -> int:
    """Resume from a checkpoint written by `save_checkpoint`, on every rank; return its epoch.

    - Read it with `torch.load(path, map_location=device)`.
    - Load `"model"` into the model unwrapped from any DDP/DataParallel, and `"optimizer"`
      into `optimizer`; return `"epoch"`, the epoch to start from (`train_epochs`'
      `start_epoch`, which also sets the sampler's epoch).
    """
    raise NotImplementedError("load_checkpoint is not implemented yet")


# --------------------------------------------------------------------------- Part D: metrics

def global_mean(value: float, device: torch.device | None = None) -> float:
    """The mean of `value` over every rank of the default process group, on every rank.

    Uses `dist.all_reduce` on a float64 tensor on `device` (CPU when None); without an
    initialised process group, returns `value` itself as a float.
    """
    raise NotImplementedError("global_mean is not implemented yet")


def evaluate_accuracy(model: nn.Module, dataset: Dataset, batch_size: int) -> float:
    """Classification accuracy of `model` on the whole `dataset`, computed across all ranks.

    - Each rank evaluates its share, given by `DistributedSampler(dataset, shuffle=False)` over
      the default group, in batches of `batch_size`, in eval mode and without gradients; a
      sample `(x, label)` is right when `model(x).argmax(dim=1) == label`.
    - DistributedSampler pads the shares to equal length with repeated samples; those repeats
      are not counted: every sample of the dataset counts exactly once.
    - Counts (not per-rank accuracies) are summed with `all_reduce`; every rank returns the
      same float. The model's training mode is restored afterwards.
    """
    raise NotImplementedError("evaluate_accuracy is not implemented yet")


# --------------------------------------------------------------------------- Part E: precision

def amp_train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                   optimizer: torch.optim.Optimizer, loss_fn: Any, max_norm: float,
                   scaler: Any = None, dtype: torch.dtype = torch.bfloat16) -> float:
    """One mixed-precision training step with gradient clipping; returns the loss as a float.

    - Move the batch to the model's device, zero the gradients, and run the forward pass and
      the loss under `torch.autocast(device_type=<the device's type>, dtype=dtype)`.
    - Without `scaler`: backward, clip the gradients' total norm to `max_norm` with
      `torch.nn.utils.clip_grad_norm_`, step.
    - With a `torch.amp.GradScaler`: backward on `scaler.scale(loss)`, then
      `scaler.unscale_(optimizer)`, then the clipping, then `scaler.step(optimizer)` and
      `scaler.update()`. Loss scaling matters for float16, whose narrow exponent range lets
      small gradients underflow to zero; bfloat16 has float32's exponent range and needs no
      scaler (pass none), though one does no harm.
    """
    raise NotImplementedError("amp_train_step is not implemented yet")


# --------------------------------------------------------------------------- Part F: unused

def wrap_with_unused(model: nn.Module) -> DistributedDataParallel:
    """Wrap `model` in DistributedDataParallel for training in which some of its parameters
    take no part in some steps (a branch of its forward that is skipped now and then).

    - Make DDP look, in each step, for the parameters that got no gradient and count them as
      ready, so that training goes on and the gradients are still averaged over every rank.
    - The set of parameters used changes from step to step, so the graph is not static: do not
      declare it static (DDP then expects the same parameters in every step).
    - The model stays on its device: on CUDA, `device_ids` is the model's own GPU; on the CPU,
      no `device_ids`. Call it after the default process group is initialised.
    """
    raise NotImplementedError("wrap_with_unused is not implemented yet")
