"""Sandbox-side models and scenarios for the ddp_training hidden tests.

This file runs inside the sandbox, next to the student's module; it is not secret and student
code can rewrite it. It holds the model and dataset classes the tests send in (pickled by
reference as `probes.ClassName`) and scenarios: `fn(mod, *args)` for one process,
`fn(mod, rank, world_size, port, *args)` for one rank of several. A scenario sets things up
(environment variables, a gloo group, a DDP wrapper, a counting communication hook), calls the
student's function and reports what happened as plain data. It holds no expected value, no
verdict and none of the solution's logic: the tests compute what is right, outside the sandbox,
from inputs drawn for this grading.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# ----------------------------------------------------------------------------- models, data


class PlainMLP(nn.Module):
    """No BatchNorm, no dropout: DDP training equals full-batch training exactly."""

    def __init__(self, d_in: int = 4, hidden: int = 8, d_out: int = 1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class SlowStateDict(PlainMLP):
    """A PlainMLP whose state_dict takes a while while `slow` (save_ranks sets it around
    save_checkpoint only): rank 0 writes late, so a missing barrier shows on the other ranks."""

    slow = False

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        if self.slow:
            time.sleep(0.6)
        return super().state_dict(*args, **kwargs)


class BranchMLP(nn.Module):
    """A PlainMLP with a residual branch that the forward skips when `use_branch` is False: the
    branch's parameters get no gradient in those steps."""

    def __init__(self, d_in: int = 4, hidden: int = 8, d_out: int = 1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.branch = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor, use_branch: bool = True) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        if use_branch:
            h = h + torch.tanh(self.branch(h))
        return self.fc2(h)


class Pairs(Dataset):
    """(x, y) rows of two tensors."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, target)


# ----------------------------------------------------------------------------- helpers


try:  # the sandbox's codec knows torch's classes as they were before the student's import
    from agsandbox.caught import note as _note_caught
    from agsandbox.codec import class_name as _class_name
except ImportError:  # on the trusted side, which never runs a scenario
    def _class_name(cls: type) -> str:
        return cls.__name__

    def _note_caught(exc: BaseException) -> None:
        pass


def _error(exc: BaseException) -> dict:
    """A student exception as data for the test; also noted for the grader, which tells a
    NotImplementedError (a stub) by its class, however the test words its failure."""
    _note_caught(exc)
    return {"type": type(exc).__name__, "message": str(exc)[:500]}


def _attempt(fn: Callable, *args: Any, **kwargs: Any) -> dict:
    """Run fn; report {'value': ...} or {'error': {...}} instead of raising."""
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - every failure becomes data for the test
        return {"error": _error(exc)}


def _init_group(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)


def _state(model: nn.Module) -> dict:
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    return {k: v.detach().cpu().clone() for k, v in inner.state_dict().items()}


def _sum_over_ranks(value: float) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(tensor)
    return float(tensor.item())


def _journal() -> list:
    try:
        from agsandbox import simulated_cuda
    except ImportError:
        return []
    return simulated_cuda.journal() if simulated_cuda.active() else []


LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _set_env(env: dict) -> None:
    for name in LAUNCH_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update({k: str(v) for k, v in env.items()})


# ----------------------------------------------------------------------------- Part A


def launch_rank(mod: Any, rank: int, world_size: int, port: int, nodes: int, backend: Any,
                value: float) -> dict:
    """torchrun's environment for process `rank` of `nodes` nodes of world_size // nodes
    processes each, then init_from_env and an all_reduce of this rank's own value."""
    per_node = world_size // nodes
    _set_env({"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank % per_node,
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    kwargs = {} if backend is None else {"backend": backend}
    device = mod.init_from_env(**kwargs)
    report = {"device": str(device), "device_type": type(device).__name__,
              "initialized": bool(dist.is_initialized())}
    if dist.is_initialized():
        report.update(rank=dist.get_rank(), world_size=dist.get_world_size(),
                      backend=str(dist.get_backend()))
        report["all_reduce"] = _sum_over_ranks(value)
    if torch.cuda.is_available():
        report["current_cuda_device"] = int(torch.cuda.current_device())
    report["journal"] = _journal()
    return report


def launch_errors(mod: Any, rank: int, world_size: int, port: int, cases: list[dict],
                  good: dict) -> dict:
    """init_from_env under each broken environment (what it raised, whether a group was made),
    then under a good one-process environment; MASTER_PORT, where an environment has it, is
    the rendezvous store's `port`."""
    results = []
    cases = [{k: (port if k == "MASTER_PORT" else v) for k, v in env.items()} for env in cases]
    good = {**good, "MASTER_PORT": port}
    for env in cases:
        _set_env(env)
        attempt = _attempt(lambda: str(mod.init_from_env(backend="gloo")))
        attempt["initialized_after"] = bool(dist.is_initialized())
        results.append(attempt)
        if dist.is_initialized():
            dist.destroy_process_group()
    _set_env(good)
    report = {"cases": results, "good": _attempt(lambda: str(mod.init_from_env(backend="gloo")))}
    if dist.is_initialized():
        report["world_size"] = dist.get_world_size()
    return report


# ----------------------------------------------------------------------------- Part B


class _Recorder(DistributedSampler):
    """A DistributedSampler that notes the epochs it was given and the indices it gave."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epochs_set: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs_set.append(int(epoch))
        super().set_epoch(epoch)


def epochs_run(mod: Any, model: nn.Module, data: Pairs, ranks: int, rank: int,
               batch_size: int, seed: int, lr: float, epochs: int, start_epoch: int) -> dict:
    """train_epochs on one rank's share (a shuffled DistributedSampler given rank and world
    size, no group needed), plain SGD and MSE."""
    sampler = _Recorder(data, num_replicas=ranks, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    report = _attempt(mod.train_epochs, model, loader, optimizer, mse, epochs, start_epoch)
    report["state"] = _state(model)
    report["epochs_set"] = sampler.epochs_set
    return report


def accumulate_ranks(mod: Any, rank: int, world_size: int, port: int, model: nn.Module,
                     lr: float, micro: list) -> dict:
    """DDP under a gloo group with a communication hook that counts its calls (one per
    gradient bucket per synchronised backward); accumulate_step on this rank's micro-batches."""
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(model)
    calls = []

    def counting_hook(state, bucket):  # noqa: ANN001 - DDP checks the annotations, none given
        calls.append(1)
        tensor = bucket.buffer().div_(world_size)
        return dist.all_reduce(tensor, async_op=True).get_future().then(
            lambda fut: fut.value()[0])

    ddp.register_comm_hook(None, counting_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    report = _attempt(mod.accumulate_step, ddp, micro, optimizer, mse)
    report["hook_calls"] = len(calls)
    report["state"] = _state(ddp)
    return report


def accumulate_plain(mod: Any, model: nn.Module, lr: float, micro: list) -> dict:
    """accumulate_step on a model that is not wrapped, and on an empty list."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    report = _attempt(mod.accumulate_step, model, micro, optimizer, mse)
    report["state"] = _state(model)
    report["empty"] = _attempt(mod.accumulate_step, model, [], optimizer, mse)
    return report


# ----------------------------------------------------------------------------- Part C


def _plain(value: Any) -> Any:
    """Mappings of any kind as dicts, sequences as lists: what the grader can read back."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _simulated() -> bool:
    try:
        from agsandbox import simulated_cuda
    except ImportError:
        return False
    return bool(simulated_cuda.active())


def _location(value: Any) -> Any:
    """torch.load's map_location as data: None, a device as text ("cuda:1"), {"mapping":
    {location: device as text}} for a dict, or {"other": its type's name}."""
    if value is None:
        return None
    if isinstance(value, (str, torch.device)):
        try:
            return str(torch.device(value))
        except (RuntimeError, TypeError, ValueError):
            return str(value)[:100]
    if isinstance(value, dict):
        return {"mapping": {k: _location(v) if isinstance(v, (str, torch.device))
                            else {"other": type(v).__name__}
                            for k, v in list(value.items())[:20] if isinstance(k, str)}}
    return {"other": type(value).__name__}


@contextlib.contextmanager
def _counting_calls(mod: Any, name: str, cpu_storage: bool = False) -> Iterator[list]:
    """Replace torch.<name> (save or load) by a wrapper that notes each call, wherever the
    student's code may reach it: torch, torch.serialization, and the student's module itself
    (`from torch import save`), until the block ends (a rank may serve the next scenario).
    For torch.load the note is where its map_location, given by name or by position, says to
    put the tensors (see _location). With `cpu_storage` (simulated GPUs, which have no CUDA
    storage to deserialise into), the call itself reads onto the CPU; the model's own tensors
    carry the devices."""
    original = getattr(torch, name)
    signature = inspect.signature(original)
    calls: list = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # the call fails as it would have; noted all the same
            calls.append({})
            return original(*args, **kwargs)
        call = {}
        if "map_location" in signature.parameters:
            call["map_location"] = _location(bound.arguments.get("map_location"))
            if cpu_storage:
                bound.arguments["map_location"] = "cpu"
        calls.append(call)
        return original(*bound.args, **bound.kwargs)

    patched = [(home, attr) for home in (torch, torch.serialization, mod)
               for attr, value in list(vars(home).items()) if value is original]
    for home, attr in patched:
        setattr(home, attr, wrapper)
    try:
        yield calls
    finally:
        for home, attr in patched:
            setattr(home, attr, original)


def save_ranks(mod: Any, rank: int, world_size: int, port: int, folder_name: str, model: Any,
               lr: float, steps: int, epoch: int) -> dict:
    """Every rank: a gloo group, DDP, `steps` SGD-with-momentum steps on a fixed batch (so the
    optimizer has state), then save_checkpoint to a shared path; what each rank saw after."""
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    x = torch.linspace(-1, 1, 16).reshape(4, 4)
    for _ in range(steps):
        optimizer.zero_grad()
        mse(ddp(x), x[:, :1]).backward()
        optimizer.step()
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), folder_name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "checkpoint.pt")
    model.slow = True  # (only here: DDP's set-up and what is read back below are not timed)
    with _counting_calls(mod, "save") as saves:
        report = _attempt(mod.save_checkpoint, path, ddp, optimizer, epoch)
    model.slow = False
    report["saves"] = len(saves)
    report["exists_after"] = os.path.exists(path)
    if report["exists_after"]:
        report["checkpoint"] = _attempt(lambda: _plain(torch.load(path, weights_only=False)))
    report["state"] = _state(ddp)
    report["optimizer"] = _plain(optimizer.state_dict())
    return report


def load_ranks(mod: Any, rank: int, world_size: int, port: int, folder_name: str,
               checkpoint: dict, model: nn.Module, lr: float) -> dict:
    """Rank 0 writes the test's checkpoint; every rank then loads it into a DDP model on its own
    (simulated) GPU, cuda:rank, with a fresh SGD-with-momentum optimizer."""
    _init_group(rank, world_size, port)
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), folder_name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "checkpoint.pt")
    if rank == 0:
        torch.save(checkpoint, path)
    dist.barrier()
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    model = model.to(device)
    ddp = DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    with _counting_calls(mod, "load", cpu_storage=_simulated()) as loads:
        report = _attempt(mod.load_checkpoint, path, ddp, optimizer, device)
    report["loads"] = loads
    report["state"] = _state(ddp)
    report["momentum"] = [optimizer.state[p].get("momentum_buffer") for p in
                          ddp.module.parameters() if p in optimizer.state]
    report["param_devices"] = sorted({str(p.device) for p in ddp.module.parameters()})
    return report


# ----------------------------------------------------------------------------- Part D


def mean_ranks(mod: Any, rank: int, world_size: int, port: int, value: float) -> dict:
    """global_mean of this rank's value without a group, then under a gloo group."""
    report = {"alone": _attempt(mod.global_mean, value)}
    _init_group(rank, world_size, port)
    report["grouped"] = _attempt(mod.global_mean, value)
    return report


def evaluate_ranks(mod: Any, rank: int, world_size: int, port: int, model: nn.Module,
                   batch_size: int, data: Pairs) -> dict:
    """evaluate_accuracy under a gloo group on what this rank is handed, the model in train
    mode before the call."""
    _init_group(rank, world_size, port)
    model.train()
    report = _attempt(mod.evaluate_accuracy, model, data, batch_size)
    report["training_after"] = bool(model.training)
    return report


# ----------------------------------------------------------------------------- Part E


def amp_steps(mod: Any, model: nn.Module, batches: list, lr: float, max_norm: float,
              init_scale: Any) -> dict:
    """amp_train_step over the batches with SGD (with a GradScaler on CPU when init_scale is
    not None); the losses, the final state and the scaler's scale."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = None
    if init_scale is not None:
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
    losses = []
    for batch in batches:
        result = _attempt(mod.amp_train_step, model, batch, optimizer, mse, max_norm, scaler)
        losses.append(result)
        if "error" in result:
            break
    return {"losses": losses, "state": _state(model),
            "scale": None if scaler is None else float(scaler.get_scale())}


# ----------------------------------------------------------------------------- Part F


def unused_ranks(mod: Any, rank: int, world_size: int, port: int, model: nn.Module, lr: float,
                 pattern: list, batches: list) -> dict:
    """A gloo group; wrap_with_unused(model); then plain SGD steps on this rank's batches, the
    branch used or skipped in each step as `pattern` says. Reports the first failure (which step)
    or the model's state after the last step."""
    _init_group(rank, world_size, port)
    report = _attempt(mod.wrap_with_unused, model)
    if "error" in report:
        return report
    wrapped = report.pop("value")
    report["wrapper"] = _class_name(type(wrapped))
    if not isinstance(wrapped, nn.Module):
        return report
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=lr)
    for step, (use, (x, y)) in enumerate(zip(pattern, batches, strict=True)):
        try:
            optimizer.zero_grad()
            mse(wrapped(x, use), y).backward()
            optimizer.step()
        except Exception as exc:  # noqa: BLE001 - every failure becomes data for the test
            report["error"] = _error(exc)
            report["step"] = step
            return report
    report["state"] = _state(wrapped)
    return report
