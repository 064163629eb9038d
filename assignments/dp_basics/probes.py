"""Sandbox-side models and scenarios for the dp_basics tests.

This file runs inside the sandbox, next to the student's module; it is not secret, and student
code can rewrite any of it. It holds the model classes the tests send in (pickled by reference
as `probes.ClassName`) and probe functions `probe(mod, *args)` (`mod` is the student's module)
for scenarios that need several steps in one process. Probes only *report* what happened, as
plain data (numbers, strings, lists, dicts, tensors): they hold no expected value, no verdict
and none of the reference solution's logic. Whatever they report earns points only when it
matches what the tests compute, outside the sandbox, from inputs drawn for this grading (seeds,
sizes, device ids, per-rank values), so a rewritten probe earns nothing it did not compute.

Rank probes `fn(mod, rank, world_size, port, *args)` run in one fresh process per rank. They
must return promptly: the grader sends the reply back and then ends the process without the
interpreter teardown (gloo teardown on CPU is flaky), so everything here reports errors of the
student's cleanup as data rather than waiting on them.
"""

from __future__ import annotations

import collections
import copy
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------- models


class TinyMLP(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Linear: the BatchNorm makes replicas differ."""

    def __init__(self, d_in: int = 4, hidden: int = 6, d_out: int = 2) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class PlainMLP(nn.Module):
    """No BatchNorm: DDP training equals full-batch training exactly."""

    def __init__(self, d_in: int = 4, hidden: int = 8, d_out: int = 1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class ChunkSizeModel(nn.Module):
    """Each output row is its input's first value plus the size of the chunk it was computed in
    (reveals the split, and depends on the input)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * (x[:, :1] + float(x.shape[0]))


class TokenModel(nn.Module):
    """Embedding lookup: its input must stay an integer index tensor."""

    def __init__(self, vocab: int = 10, dim: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(idx))


class BufferOnly(nn.Module):
    """No parameters at all, only a floating-point buffer."""

    def __init__(self, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((1,), 2.0, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class IntegerOnly(nn.Module):
    """Only integer parameters and buffers: nothing to take a floating dtype from."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.arange(5), requires_grad=False)
        self.register_buffer("offset", torch.tensor(1, dtype=torch.int32))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table[idx] + self.offset


class IntParamFloatBuffer(nn.Module):
    """Integer parameter, floating-point buffer: the buffer decides the dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.arange(4), requires_grad=False)
        self.register_buffer("scale", torch.ones(1, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class ManyNorms(nn.Module):
    """BatchNorm1d/2d/3d at several depths among modules that must stay as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)
        self.bn2d = nn.BatchNorm2d(3, eps=1e-3, momentum=0.3)
        self.block = nn.Sequential(
            nn.Linear(3, 5),
            nn.BatchNorm1d(5, affine=False),
            nn.LayerNorm(5),
            nn.Sequential(nn.InstanceNorm1d(5), nn.BatchNorm3d(4, track_running_stats=False)),
        )
        self.head = nn.GroupNorm(1, 3)
        self.tail = nn.BatchNorm1d(7, momentum=None)


class Holder(nn.Module):
    """A model whose own children are called `module` and `submodule`."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(3, 2)
        self.submodule = nn.Linear(2, 1)
        self.norm = nn.BatchNorm1d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.submodule(self.module(x)))


# Namedtuple batches: their type must survive match_input_dtype.
Pair = collections.namedtuple("Pair", ["features", "mask"])
Batch = collections.namedtuple("Batch", ["x", "idx", "meta"])


class RegressionData(Dataset):
    """A fixed regression set: (features, target) per index."""

    def __init__(self, n: int = 32, d_in: int = 4, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, d_in, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class IndexData(Dataset):
    """Item i is the integer i: a loader over it shows which samples a rank saw."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return int(i)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


# ----------------------------------------------------------------------------- helpers


# Bound when probes.py is imported, before the student's module is: rebinding torch.nn's names
# later does not change what these checks test.
_SYNC_BATCHNORM = nn.SyncBatchNorm
_NORM_BASE = nn.modules.batchnorm._NormBase


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
    return {"type": type(exc).__name__, "types": [c.__name__ for c in type(exc).__mro__],
            "message": str(exc)[:2000]}


def _attempt(fn: Callable, *args: Any, **kwargs: Any) -> dict:
    """Run fn; report {'value': ...} or {'error': {...}} instead of raising."""
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - every failure becomes data for the test
        return {"error": _error(exc)}


def _describe(value: Any) -> Any:
    """The structure of a value as plain data: container types and tensor dtypes/devices."""
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "dtype": str(value.dtype), "device": str(value.device)}
    if isinstance(value, np.ndarray):
        return {"kind": "ndarray", "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"kind": type(value).__name__, "fields": list(getattr(value, "_fields", [])),
                "items": [_describe(v) for v in value]}
    if isinstance(value, list):
        return {"kind": type(value).__name__, "items": [_describe(v) for v in value]}
    if isinstance(value, Mapping):
        return {"kind": type(value).__name__,
                "items": {str(k): _describe(v) for k, v in value.items()}}
    return {"kind": type(value).__name__, "repr": repr(value)[:200]}


def _plain(value: Any) -> Any:
    """A copy the grader can read back: containers become list/tuple/dict, arrays tensors."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return torch.tensor(value)
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or type(value) in (bool, int, float, str):
        return value
    return repr(value)[:200]


def _state(model: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _grads(model: nn.Module) -> dict:
    return {n: (None if p.grad is None else p.grad.detach().cpu().clone())
            for n, p in model.named_parameters()}


def _init_group(rank: int, world_size: int, port: int, backend: str = "gloo") -> None:
    """The grader's own process-group setup, for scenarios that test other functions."""
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    # Every rank fully connected before any goes on (and may tear the group down).
    dist.barrier()


# What a rank must never free. Dropping the last reference to a DDP model destroys its gloo group
# while holding the GIL, and a gloo thread still tearing down the last all-reduce may be waiting
# for the GIL: a deadlock (torch 2.13; about 1 run in 7 once the sandbox preloads torch._dynamo).
# A rank ends with os._exit, so keeping them costs nothing.
_KEPT_ALIVE: list = []


def _keep(*objects: Any) -> None:
    _KEPT_ALIVE.extend(objects)


def _kept(value: Any) -> Any:
    _KEPT_ALIVE.append(value)
    return value


def _store_port() -> int | None:
    """The TCP port the default group's store listens on, if it can be found."""
    try:
        store = dist.distributed_c10d._get_default_store()
        while hasattr(store, "underlying_store"):
            store = store.underlying_store
        return int(store.port)
    except Exception:  # noqa: BLE001 - a store of another kind: report nothing
        return None


def _store_host() -> str | None:
    """The address the default group's store was reached at, if it can be found."""
    try:
        store = dist.distributed_c10d._get_default_store()
        while hasattr(store, "underlying_store"):
            store = store.underlying_store
        return str(store.host)
    except Exception:  # noqa: BLE001 - a store of another kind: report nothing
        return None


# ----------------------------------------------------------------------------- Part A


def wrap_dp_on_gpu(mod: Any, model: nn.Module, device_ids: list[int] | None,
                   inputs: torch.Tensor) -> dict:
    """wrap_data_parallel with CUDA: where the parameters and the gathered output are."""
    wrapped = mod.wrap_data_parallel(model, device_ids)
    report: dict[str, Any] = {
        "type": _class_name(type(wrapped)),
        "device_ids": [int(i) for i in getattr(wrapped, "device_ids", [])],
        "output_device": getattr(wrapped, "output_device", None),
        "param_devices": sorted({str(p.device) for p in wrapped.parameters()}),
    }
    first = torch.device("cuda", report["device_ids"][0]) if report["device_ids"] else "cpu"
    with torch.no_grad():
        out = wrapped(inputs.to(first))
    report["output"] = out
    report["output_device_str"] = str(out.device)
    return report


def wrap_dp_of_ddp(mod: Any, rank: int, world_size: int, port: int, model: nn.Module) -> dict:
    """wrap_data_parallel given a DDP-wrapped model (needs a process group)."""
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(model)
    _keep(ddp)
    report = _attempt(lambda: mod.wrap_data_parallel(ddp) is ddp)
    report["with_ids"] = _attempt(lambda: mod.wrap_data_parallel(ddp, [0]) is ddp)
    return report


def emulate_dp(mod: Any, model: nn.Module, inputs: torch.Tensor, num_replicas: int,
               weights: torch.Tensor | None, train: bool) -> dict:
    """One emulated forward (and backward of sum(out * weights) when weights are given)."""
    model.train(train)
    before = _state(model)
    out = mod.emulate_data_parallel(model, inputs, num_replicas)
    report: dict[str, Any] = {"output": out, "buffers_before": before}
    if weights is not None:
        (out * weights).sum().backward()
        report["grads"] = _grads(model)
    report["buffers"] = {n: b.detach().clone() for n, b in model.named_buffers()}
    report["state"] = _state(model)
    return report


# ----------------------------------------------------------------------------- Part B


def match_dtype(mod: Any, inputs: Any, model: nn.Module) -> dict:
    """match_input_dtype's result (structure and values) and the caller's inputs afterwards."""
    original = _plain(inputs)
    shape_before = _describe(inputs)
    result = mod.match_input_dtype(inputs, model)
    return {
        "structure": _describe(result),
        "values": _plain(result),
        "inputs_after": _plain(inputs),
        "inputs_before": original,
        "inputs_structure_after": _describe(inputs),
        "inputs_structure_before": shape_before,
        "same_object": result is inputs,
    }


def match_dtype_on(mod: Any, inputs: tuple, model: nn.Module, device: str) -> dict:
    """match_input_dtype for a model on `device`; the results as they are (still there)."""
    model = model.to(device)
    result = mod.match_input_dtype(inputs, model)
    return {"structure": _describe(result),
            "device_values": [t for t in result if isinstance(t, torch.Tensor)]}


# ----------------------------------------------------------------------------- Part C


def _norm_report(model: nn.Module, sentinel: Any = None) -> list[dict]:
    rows = []
    for name, m in model.named_modules():
        row: dict[str, Any] = {"name": name, "type": _class_name(type(m)),
                               "training": bool(m.training)}
        if isinstance(m, _NORM_BASE):
            row.update(
                eps=float(m.eps), momentum=m.momentum, affine=bool(m.affine),
                track_running_stats=bool(m.track_running_stats),
                num_features=int(m.num_features),
                weight=None if m.weight is None else m.weight.detach().clone(),
                bias=None if m.bias is None else m.bias.detach().clone(),
                weight_requires_grad=None if m.weight is None else bool(m.weight.requires_grad),
                bias_requires_grad=None if m.bias is None else bool(m.bias.requires_grad),
                running_mean=None if m.running_mean is None else m.running_mean.clone(),
                running_var=None if m.running_var is None else m.running_var.clone(),
                num_batches_tracked=None if getattr(m, "num_batches_tracked", None) is None
                else int(m.num_batches_tracked),
            )
            if isinstance(m, _SYNC_BATCHNORM):
                row["process_group_is_sentinel"] = m.process_group is sentinel \
                    if sentinel is not None else None
                row["process_group_is_none"] = m.process_group is None
        rows.append(row)
    return rows


def convert_syncbn(mod: Any, model: nn.Module, use_sentinel: bool, prepare: str = "",
                   seed: int = 0) -> dict:
    """convert_to_sync_batchnorm on `model` after `prepare` ('freeze', 'eval', 'stats')."""
    seed_all(seed)
    if "stats" in prepare:  # give running statistics values that differ from the defaults
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.num_batches_tracked.fill_(7)
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)
    if "freeze" in prepare:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
                m.weight.requires_grad_(False)
    if "eval" in prepare:
        model.eval()
    if "mixed" in prepare:  # some layers in eval, the rest in train
        for i, m in enumerate(model.modules()):
            m.train(i % 2 == 0)
    before = _norm_report(model)
    sentinel = object() if use_sentinel else None
    converted = mod.convert_to_sync_batchnorm(model, sentinel) if use_sentinel \
        else mod.convert_to_sync_batchnorm(model)
    return {"before": before, "after": _norm_report(converted, sentinel),
            "returned_type": _class_name(type(converted))}


def convert_syncbn_in_ddp(mod: Any, rank: int, world_size: int, port: int) -> dict:
    """convert_to_sync_batchnorm on a DDP-wrapped model (needs a process group)."""
    seed_all(0)
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)))
    _keep(ddp)
    return _attempt(lambda: _norm_report(_kept(mod.convert_to_sync_batchnorm(ddp))))


def syncbn_in_ddp_ranks(mod: Any, rank: int, world_size: int, port: int, model: nn.Module,
                        own: tuple) -> dict:
    """convert_to_sync_batchnorm, then DDP on this rank's (simulated) GPU under a grader-made
    group: one forward and backward pass on this rank's own batch, in train mode."""
    _init_group(rank, world_size, port)
    converted = mod.convert_to_sync_batchnorm(model)
    device = torch.device("cuda", rank)
    ddp = DistributedDataParallel(converted.to(device), device_ids=[rank])
    _keep(ddp)
    x, y = own
    out = ddp(x)
    mse(out, y.to(device)).backward()
    return {"output": out, "grads": _grads(converted), "state": _state(converted),
            "norm_types": sorted({_class_name(type(m)) for m in converted.modules()
                                  if isinstance(m, _NORM_BASE)})}


# ----------------------------------------------------------------------------- Part D


def _store_state() -> dict:
    return {
        "initialized": bool(dist.is_initialized()),
        "backend": str(dist.get_backend()) if dist.is_initialized() else None,
        "rank": int(dist.get_rank()) if dist.is_initialized() else None,
        "world_size": int(dist.get_world_size()) if dist.is_initialized() else None,
        "store_port": _store_port() if dist.is_initialized() else None,
        "store_host": _store_host() if dist.is_initialized() else None,
    }


def _all_reduce_value(x: float) -> float:
    """Sum x over the ranks of the default group (on this rank's GPU under nccl)."""
    value = torch.tensor([x], dtype=torch.float64)
    if dist.get_backend() == "nccl":  # this rank's own GPU, whether or not it was pinned
        value = value.to(torch.device("cuda", dist.get_rank()))
    dist.all_reduce(value)
    return float(value.item())


def _devices_journal() -> list:
    """What the code asked of simulated GPUs, when this worker simulates them."""
    try:
        from agsandbox import simulated_cuda
    except ImportError:
        return []
    return simulated_cuda.journal() if simulated_cuda.active() else []


def setup_ranks(mod: Any, rank: int, world_size: int, port: int, kwargs: dict,
                value: float) -> dict:
    """setup_ddp in each rank, then an all_reduce of this rank's own value: only ranks that
    really met can report the sum of every rank's value."""
    device = mod.setup_ddp(rank, world_size, port, **kwargs)
    report = {"device": str(device), "device_type": type(device).__name__, "port": port,
              **_store_state()}
    if torch.cuda.is_available():
        report["current_cuda_device"] = int(torch.cuda.current_device())
    report["all_reduce"] = _all_reduce_value(value)
    if dist.get_backend() == "nccl":
        # nccl's rendezvous leaves rank 0's key alone in the store; a gloo group over the
        # same store has every rank register there (see autograder.sandbox.rendezvous).
        dist.new_group(backend="gloo")
    report["devices"] = _devices_journal()
    return report


def setup_checks(mod: Any, rank: int, world_size: int, port: int,
                 cases: list[tuple[int, int]], value: float) -> dict:
    """setup_ddp with impossible ranks or world sizes first (what each raised, if anything),
    then a real setup and an all_reduce of this rank's value."""
    rejected = []
    for bad_rank, bad_world in cases:
        attempt = _attempt(lambda r=bad_rank, w=bad_world: str(mod.setup_ddp(r, w, port)))
        attempt["initialized_after"] = bool(dist.is_initialized())
        rejected.append(attempt)
        if dist.is_initialized():
            break  # a group was wrongly made: the real setup below cannot happen
    report: dict[str, Any] = {"rejected": rejected}
    report["setup"] = _attempt(lambda: str(mod.setup_ddp(rank, world_size, port)))
    if dist.is_initialized():
        report["all_reduce"] = _all_reduce_value(value)
    return report


def setup_twice(mod: Any, rank: int, world_size: int, port: int, value: float) -> dict:
    """setup_ddp called a second time while the first group is alive."""
    first = _attempt(lambda: str(mod.setup_ddp(rank, world_size, port)))
    second = _attempt(lambda: str(mod.setup_ddp(rank, world_size, port)))
    report = {"first": first, "second": second, **_store_state()}
    if dist.is_initialized():  # the first group must still work
        report["all_reduce"] = _all_reduce_value(value)
    return report


def ddp_gradients(mod: Any, rank: int, world_size: int, port: int, model: nn.Module,
                  sync_batchnorm: bool | None, own: tuple[str, tuple]) -> dict:
    """wrap_ddp (on this rank's device) under a grader-made gloo group, then one forward and
    backward pass on this rank's own batch: the gradients show whether they were averaged."""
    device, batch = own
    _init_group(rank, world_size, port)
    kwargs = {} if sync_batchnorm is None else {"sync_batchnorm": sync_batchnorm}
    report = _attempt(mod.wrap_ddp, model, torch.device(device), **kwargs)
    _keep(report)
    if "value" not in report:
        return report
    wrapped = report.pop("value")
    report["type"] = _class_name(type(wrapped))
    report["device_ids"] = _plain(getattr(wrapped, "device_ids", None))
    report["param_devices"] = sorted({str(p.device) for p in wrapped.parameters()})
    x, y = batch
    out = wrapped(x)
    mse(out, y.to(out.device)).backward()
    report["grads"] = _grads(model)
    report["devices"] = _devices_journal()
    return report


def ddp_steps(mod: Any, rank: int, world_size: int, port: int, model: nn.Module, lr: float,
              batches: list) -> dict:
    """ddp_train_step on this rank's own batches, the model in a grader-made DDP wrapper."""
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(model)
    _keep(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    losses = []
    for batch in batches:
        loss = mod.ddp_train_step(ddp, batch, optimizer, mse)
        losses.append(loss if type(loss) is float else repr(loss)[:100])
    return {"losses": losses, "state": _state(model)}


def cleanup_ranks(mod: Any, rank: int, world_size: int, port: int, second_port: int,
                  value: float) -> dict:
    """cleanup_ddp with no group, then after a grader-made group; then a new group at
    `second_port` and an all_reduce of this rank's value, which needs the old group gone."""
    report: dict[str, Any] = {"without_group": _attempt(mod.cleanup_ddp)}
    _init_group(rank, world_size, port)
    report["cleanup"] = _attempt(mod.cleanup_ddp)
    report["initialized_after"] = bool(dist.is_initialized())
    report["second_cleanup"] = _attempt(mod.cleanup_ddp)
    again = _attempt(_init_group, rank, world_size, second_port)
    if "error" in again:
        report["reinit"] = again
    else:
        report["all_reduce"] = _all_reduce_value(value)
    return report


def loader_report(mod: Any, dataset: Dataset, global_batch: int, world_size: int,
                  kwargs: dict, epochs: int = 1) -> dict:
    """Every rank's loader built in this one process (no process group): batches per epoch."""
    ranks = []
    for rank in range(world_size):
        loader = mod.make_distributed_loader(dataset, global_batch, rank, world_size, **kwargs)
        # The samplers a DataLoader can hold: its own, and the one inside its batch sampler.
        samplers = {"sampler": getattr(loader, "sampler", None),
                    "batch_sampler.sampler": getattr(getattr(loader, "batch_sampler", None),
                                                     "sampler", None)}
        row: dict[str, Any] = {
            "batch_size": getattr(loader, "batch_size", None),
            "samplers": {where: [_class_name(c) for c in type(s).__mro__]
                         for where, s in samplers.items() if s is not None},
            "epochs": [],
        }
        with_epochs = {id(s): s for s in samplers.values() if hasattr(s, "set_epoch")}
        for epoch in range(epochs):
            for sampler in with_epochs.values():  # what a training loop does each epoch
                sampler.set_epoch(epoch)
            row["epochs"].append([_plain(b) for b in loader])
        ranks.append(row)
    return {"ranks": ranks, "initialized": bool(dist.is_initialized())}


def loader_error(mod: Any, dataset: Dataset, global_batch: int, rank: int,
                 world_size: int) -> dict:
    """make_distributed_loader with arguments that do not fit: what it raised, if anything."""
    report = _attempt(mod.make_distributed_loader, dataset, global_batch, rank, world_size)
    if "value" in report:
        report["value"] = _class_name(type(report["value"]))
    return report


def train_step_report(mod: Any, model: nn.Module, batches: list, lr: float,
                      momentum: float = 0.0, device: str = "cpu", wrap: bool = False) -> dict:
    """ddp_train_step on a model (on `device`; in nn.DataParallel when `wrap`) for each batch;
    losses, and the final weights of the model itself."""
    model = model.to(device)
    stepped = nn.DataParallel(model) if wrap else model
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses = []
    for batch in batches:
        loss = mod.ddp_train_step(stepped, batch, optimizer, mse)
        losses.append(loss if type(loss) is float else {"not_a_float": type(loss).__name__})
    return {"losses": losses, "state": _state(model), "grads": _grads(model),
            "param_devices": sorted({str(p.device) for p in model.parameters()})}


def _init_gpu_group(rank: int, world_size: int, port: int, index: int | None = None,
                    backend: str = "nccl") -> torch.device:
    """The grader's own group on real GPUs, this rank on cuda:index (default cuda:rank)."""
    device = torch.device("cuda", rank if index is None else index)
    torch.cuda.set_device(device)
    _init_group(rank, world_size, port, backend=backend)
    return device


def wrap_ddp_gpu_rank(mod: Any, rank: int, world_size: int, port: int,
                      model: nn.Module) -> dict:
    """On real GPUs, under a grader-made nccl group: wrap_ddp(model, cuda:rank,
    sync_batchnorm=True), and what the wrapper holds."""
    device = _init_gpu_group(rank, world_size, port)
    ddp = _kept(mod.wrap_ddp(model, device, sync_batchnorm=True))
    return {"type": _class_name(type(ddp)),
            "device_ids": [int(i) for i in (getattr(ddp, "device_ids", None) or [])],
            "norm_types": sorted({_class_name(type(m)) for m in ddp.modules()
                                  if isinstance(m, _NORM_BASE)}),
            "param_devices": sorted({str(p.device) for p in ddp.parameters()})}


def syncbn_under_ddp(mod: Any, rank: int, world_size: int, port: int, model: nn.Module,
                     inputs: torch.Tensor, targets: torch.Tensor, lr: float, steps: int,
                     devices: list[int], backend: str) -> dict:
    """On real GPUs: convert_to_sync_batchnorm(model), then the grader's own group (`backend`),
    DDP wrapper on cuda:devices[rank] and SGD steps on this rank's share of the batch. Ranks may
    share a GPU under gloo (nccl refuses two ranks on one device)."""
    device = _init_gpu_group(rank, world_size, port, devices[rank], backend)
    converted = mod.convert_to_sync_batchnorm(model)
    report: dict[str, Any] = {
        "norm_types": sorted({_class_name(type(m)) for m in converted.modules()
                              if isinstance(m, _NORM_BASE)})}
    ddp = _kept(DistributedDataParallel(converted.to(device), device_ids=[device.index]))
    share = inputs.shape[0] // world_size
    x = inputs[rank * share:(rank + 1) * share].to(device)
    y = targets[rank * share:(rank + 1) * share].to(device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        mse(ddp(x), y).backward()
        optimizer.step()
    report["state"] = _state(ddp.module)
    return report


# ----------------------------------------------------------------------------- Part E


def unwrap_in_ddp(mod: Any, rank: int, world_size: int, port: int, inner: nn.Module,
                  inner2: nn.Module) -> dict:
    """unwrap_model on DDP(inner) and on DDP(DataParallel(inner2)): what it returned."""
    _init_group(rank, world_size, port)
    ddp = DistributedDataParallel(inner)
    nested = DistributedDataParallel(nn.DataParallel(inner2))
    _keep(ddp, nested)
    return {"ddp": _attempt(mod.unwrap_model, ddp), "ddp_dp": _attempt(mod.unwrap_model, nested)}


def load_flexible(mod: Any, model: nn.Module, state_dict: Mapping, wrap_levels: int) -> dict:
    """load_state_dict_flexible into `model` wrapped `wrap_levels` times in DataParallel."""
    target = model
    for _ in range(wrap_levels):
        target = nn.DataParallel(target)
    keys_before = list(state_dict.keys())
    values_before = {k: v.clone() for k, v in state_dict.items()}
    metadata = getattr(state_dict, "_metadata", None)
    metadata_before = copy.deepcopy(dict(metadata)) if metadata is not None else None
    report = _attempt(mod.load_state_dict_flexible, target, state_dict)
    if "value" in report:
        report["value"] = _plain(report["value"])
    report["state"] = _state(model)
    report["caller_keys_unchanged"] = list(state_dict.keys()) == keys_before
    report["caller_values_unchanged"] = all(
        k in state_dict and torch.equal(state_dict[k], v) for k, v in values_before.items())
    metadata_after = getattr(state_dict, "_metadata", None)
    report["caller_metadata_unchanged"] = (
        (metadata_after is None) == (metadata_before is None)
        and (metadata_after is None or dict(metadata_after) == metadata_before))
    report["caller_keys_after"] = list(state_dict.keys())
    return report
