"""Sandbox-side models and scenarios for the ddp_internals hidden tests.

This file runs inside the sandbox, next to the student's module; it is not secret and student
code can rewrite it. It holds the model the tests train (the grader's own rank builds the same
one from this file's trusted copy) and scenarios `fn(mod, rank, world_size, port, *args)` for
one rank of a process group: they set the group up, train a few steps calling the student's
function and report what their rank ended with. They hold no expected value, no verdict and none
of the solution's logic: a rank of the grader's own in the same group (observers.py) sees every
collective, and the tests compute what is right outside the sandbox.

A gated model (`Net(..., gated=True)`) holds two gates in backward: autograd functions whose
backward needs a value that the grader's rank sends only when it chooses (a broadcast on a group
of its own), and whose result depends on that value non-linearly, so that no gradient below a
gate can be computed before the value comes. The grader's rank uses them to tell gradients sent
during backward from gradients sent after it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

# The rank scenarios' own waits: longer than any honest step, shorter than the call's limit.
GROUP_TIMEOUT = datetime.timedelta(seconds=60)


class Gate(torch.autograd.Function):
    """Identity forward; backward `g * s[0] + s[1] * g * g`, where `s = server(key)`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, key: int, server: Callable) -> torch.Tensor:
        ctx.key, ctx.server = key, server
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        s = ctx.server(ctx.key)
        return grad * s[0] + s[1] * grad * grad, None, None


class Net(nn.Module):
    """Linear blocks with tanh, then a linear head: `widths` = [input, hidden..., output].
    Gated: gate 1 between the last block and the head, gate 2 before the last block."""

    def __init__(self, widths: list[int], gated: bool = False) -> None:
        super().__init__()
        pairs = zip(widths[:-2], widths[1:-1], strict=True)
        self.blocks = nn.ModuleList(nn.Linear(a, b) for a, b in pairs)
        self.head = nn.Linear(widths[-2], widths[-1])
        self.gated = gated
        self.server: Callable[[int], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            if self.gated and i == last:
                x = Gate.apply(x, 2, self.server)
            x = torch.tanh(block(x))
        if self.gated:
            x = Gate.apply(x, 1, self.server)
        return self.head(x)


def built(widths: list[int], state: dict, gated: bool = False) -> Net:
    model = Net(widths, gated)
    model.load_state_dict(state)
    return model


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


def end_of_step(step: int) -> None:
    """One all_reduce of a single int64 after each step: the grader's rank posts it after the
    step's own collectives, so a collective too many or too few meets it."""
    dist.all_reduce(torch.tensor([step + 1], dtype=torch.int64))


def _join(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=GROUP_TIMEOUT)


def _final(model: nn.Module) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def train_averaged(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                   state: dict, lr: float, frozen: list[str], own: list) -> dict:
    """SGD steps on this rank's share of each batch (`own`: [(x, y), ...]), the gradients
    averaged by the student's `average_gradients`; the parameters named in `frozen` get no
    gradient."""
    _join(rank, world_size, port)
    model = built(widths, state)
    for name, parameter in model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step, (x, y) in enumerate(own):
        optimizer.zero_grad()
        loss_of(model, x, y).backward()
        mod.average_gradients(model)
        optimizer.step()
        end_of_step(step)
    return {"final": _final(model)}


def train_overlapped(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                     state: dict, lr: float, observer: int, bucket_size_mb: float | None,
                     gated: bool, own: list) -> dict:
    """As train_averaged, with the student's `overlapped_gradient_sync` (or, with
    `bucket_size_mb`, `bucketed_gradient_sync`), its `finish` called after each backward;
    `gated`: on the gated model, the gates' values coming from rank `observer`."""
    _join(rank, world_size, port)
    model = built(widths, state, gated=gated)
    if gated:
        from agsandbox.groups import woken  # (the sandbox's runtime: ~15 ms less idle)

        with woken():
            gates = dist.new_group(list(range(world_size)), timeout=GROUP_TIMEOUT)

        def server(key: int) -> torch.Tensor:
            value = torch.zeros(2)
            dist.broadcast(value, src=observer, group=gates)
            return value

        model.server = server
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    finish = mod.overlapped_gradient_sync(model) if bucket_size_mb is None else \
        mod.bucketed_gradient_sync(model, bucket_size_mb)
    for step, (x, y) in enumerate(own):
        optimizer.zero_grad()
        loss_of(model, x, y).backward()
        finish()
        optimizer.step()
        end_of_step(step)
    return {"final": _final(model)}


def train_zero1(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                state: dict, owners: list[int], lr: float, betas: tuple[float, float],
                eps: float, own: list) -> dict:
    """Adam steps with the student's `zero1_adam` on this rank's share of each batch; what
    its optimizer holds (the names of its parameters, how many have state)."""
    _join(rank, world_size, port)
    model = built(widths, state)
    optimizer, step = mod.zero1_adam(model, owners, lr, tuple(betas), eps)
    for index, (x, y) in enumerate(own):
        model.zero_grad()
        loss_of(model, x, y).backward()
        step()
        end_of_step(index)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return {"final": _final(model), "stated": len(optimizer.state),
            "owned": [name for name, p in model.named_parameters() if id(p) in held]}


def train_fsdp2(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                state: dict, lr: float, param_dtype: str | None, own: list) -> dict:
    """SGD steps on the model sharded by the student's `fsdp2_shard` (its blocks, then the
    root; `param_dtype` a torch dtype's name or None), then torch's gather of the whole state
    dict on every rank, which the grader's rank takes part in."""
    _join(rank, world_size, port)
    model = built(widths, state)
    dtype = None if param_dtype is None else getattr(torch, param_dtype)
    model = mod.fsdp2_shard(model, list(model.blocks), dtype)
    _train(model, lr, own)
    get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {}


def gather_fsdp2(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                 state: dict, lr: float, own: list) -> dict:
    """SGD steps on the model sharded by FSDP2 as one unit (the root only), then the student's
    `full_state_dict`: what it returned on this rank."""
    _join(rank, world_size, port)
    model = built(widths, state)
    fully_shard(model)
    _train(model, lr, own)
    got = mod.full_state_dict(model)
    if not isinstance(got, dict):
        return {"state": type(got).__name__}
    return {"state": {str(name): value.detach().clone() if type(value) is torch.Tensor
                      else type(value).__name__ for name, value in got.items()}}


def _train(model: nn.Module, lr: float, own: list) -> None:
    """SGD steps on this rank's share of each batch, each followed by end_of_step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step, (x, y) in enumerate(own):
        optimizer.zero_grad()
        loss_of(model, x, y).backward()
        optimizer.step()
        end_of_step(step)


def train_compressed(mod: Any, rank: int, world_size: int, port: int, widths: list[int],
                     state: dict, lr: float, bucket_cap_mb: float, own: list) -> dict:
    """SGD steps of torch's DDP (buckets of `bucket_cap_mb`) with the student's
    `bf16_compression_hook` as its communication hook."""
    _join(rank, world_size, port)
    model = built(widths, state)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)

    def hook(state, bucket):  # (no annotations: DDP checks them, and these would be strings)
        return mod.bf16_compression_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    _train(ddp, lr, own)
    return {"final": _final(model)}
