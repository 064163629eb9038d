"""The grader's own rank in the ddp_internals scenarios (autograder.runner.observe).

Trusted: it runs in a process of the grader's, joins the process group of the student's rank
as one of its ranks, and is never copied into the sandbox. It trains the same model as the
student's rank (probes.Net, from the grader's copy of probes.py) on its own share of each
batch, posts the collectives the docstring's contract implies, one by one, and checks what the
student's rank sent in each: its own contribution is known, so the rest of the sum is exactly
what the student's rank contributed. It knows every rank's share of the data (the test drew
them), so what the student's rank must send is computed here, never taken from it.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from autograder.runner.observe import (
    Unanswered,
    hold_until_waiting,
    join_group,
    new_group,
    posted,
    wait_at_most,
)

import probes

TOLERANCE = 1e-5
# (Comparisons are written `not error <= tolerance`: NaN, which a student's rank can send,
# fails them.)


def averaged(seat, widths: list[int], state: dict, lr: float, shards: list,
             frozen: list[str]) -> dict:
    """`average_gradients`: one all_reduce per parameter with a gradient, in `parameters()`
    order, each carrying the gradient divided by the world size."""
    join_group(seat)
    model = probes.built(widths, state)
    _freeze(model, frozen)
    steps = len(shards[seat.rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    names = _names(model)
    count = 0
    for step in range(steps):
        own, expected = _shares(seat, model, shards, step)
        with_grad = [p for p in model.parameters() if p.requires_grad]
        for i, parameter in enumerate(with_grad):
            seat.note(f"step {step}: all_reduce #{i}, {_what([parameter], names)}, in the "
                      f"order of model.parameters()")
            failure = _exchange(seat, [parameter], own, expected, step, names)
            if failure:
                return {"failure": failure}
            count += 1
        if failure := _end_of_step(seat, step):
            return {"failure": failure}
        optimizer.step()
    return {"collectives": count, "final": _final(model)}


def overlapped(seat, widths: list[int], state: dict, lr: float, shards: list,
               gate_values: list | None, hold: float, cap_bytes: float | None = None) -> dict:
    """`overlapped_gradient_sync` (`cap_bytes` None: one collective per parameter, in the order
    the gradients become ready) or `bucketed_gradient_sync` (one per bucket of at most
    `cap_bytes`, in reverse parameter order): the same averages, started during backward and
    waited for before the step.

    Causal, not timed (with `gate_values`; None: an ungated model, no such check): the gated
    model's backward cannot pass gate 1 (below the head) until this rank sends its value, nor
    gate 2 (before the last block) until the head's gradients have arrived here. A rank that
    sends its gradients only after backward never gets gate 2's value; one that waits for a
    collective inside its hook never reaches gate 1.

    Also causal: the last collective of the last step is held back until the student's rank
    is blocked (`hold_until_waiting`, at most `hold` seconds), its gates all sent: a rank that
    waits for it is then waiting, one that steps without waiting has stepped on a gradient that
    is not yet the average, and ends with other parameters (once is enough)."""
    join_group(seat)
    gated = gate_values is not None
    gates = new_group(seat) if gated else None
    model = probes.built(widths, state, gated=gated)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    names = _names(model)
    head = set(model.head.parameters())
    seen: list[list[list[str]]] = []
    for step in range(len(shards[seat.rank])):
        if gated:
            s1, s2 = (torch.tensor(v) for v in gate_values[step])
            model.server = {1: s1, 2: s2}.__getitem__
        order = _ready_order(model, *shards[seat.rank][step])
        groups = [[p] for p in order] if cap_bytes is None else _buckets(model, cap_bytes)
        own, expected = _shares(seat, model, shards, step)
        errors: list[str] = []
        head_done = threading.Event()
        server = None
        if gated:
            reached = threading.Event()
            server = threading.Thread(target=_serve_gates, daemon=True, args=(
                seat, gates, s1, s2, step, reached, head_done, errors))
            server.start()
            reached.wait()
        for i, group in enumerate(groups):
            if errors:
                break
            if i == len(groups) - 1 and step == len(shards[seat.rank]) - 1 and hold:
                if server is not None and head_done.is_set():
                    server.join(seat.wait + 2)  # (the gates sent: nothing else to wait on)
                    if errors:
                        break
                hold_until_waiting(seat, hold)
            seat.note(f"step {step}: all_reduce #{i}, {_what(group, names)}, in the order "
                      f"the gradients are ready")
            try:
                failure = _exchange(seat, group, own, expected, step, names)
            except Unanswered:
                if gated and head & set(group):
                    return {"failure": f"step {step}: {_what(group, names)} did not arrive "
                                       f"while your rank's backward was still running: its "
                                       f"all_reduce must start from the hooks, as soon as "
                                       f"the gradients are ready"}
                raise
            if failure:
                return {"failure": failure}
            if head <= {p for done in groups[:i + 1] for p in done}:
                head_done.set()
        if server is not None:
            server.join(seat.wait + 2)
        if errors:
            return {"failure": errors[0]}
        if failure := _end_of_step(seat, step):
            return {"failure": failure}
        optimizer.step()
        seen.append([[names[p] for p in group] for group in groups])
    return {"collectives": seen, "final": _final(model)}


def _serve_gates(seat, gates, s1: torch.Tensor, s2: torch.Tensor, step: int,
                 reached: threading.Event, head_done: threading.Event, errors: list) -> None:
    """Gate 1's value at once; gate 2's once the head's gradients arrived (see overlapped)."""
    try:
        seat.note(f"step {step}: sending gate 1's value (backward just below the head)")
        posted(seat, dist.broadcast(s1.clone(), seat.rank, group=gates, async_op=True))
    except Unanswered:
        errors.append(f"step {step}: your rank's backward never got past the head: something "
                      f"in it waited for a collective that can only complete later "
                      f"(all_reduce without async_op=True?)")
        return
    finally:
        reached.set()
    if not head_done.wait(seat.wait + 1):
        return  # (the main thread says why)
    try:
        seat.note(f"step {step}: sending gate 2's value (backward before the last block)")
        posted(seat, dist.broadcast(s2.clone(), seat.rank, group=gates, async_op=True))
    except Unanswered as exc:
        errors.append(f"step {step}: your rank's backward did not reach the last block ({exc})")


def owners(sizes: list[int], world_size: int) -> list[int]:
    """shard_owners' rule: each parameter to the rank owning the fewest elements so far."""
    held, found = [0] * world_size, []
    for size in sizes:
        rank = min(range(world_size), key=lambda r: (held[r], r))
        found.append(rank)
        held[rank] += size
    return found


def zero1(seat, widths: list[int], state: dict, owned_by: list[int], lr: float,
          betas: list[float], eps: float, shards: list) -> dict:
    """`zero1_adam`: the gradients averaged as `averaged` checks, then every parameter
    broadcast from its owner (`owned_by`, in `parameters()` order). This rank's Adam runs over
    every parameter (Adam is elementwise: the same values as a sharded one), so each value the
    student's rank broadcasts for a parameter it owns is checked against Adam's update."""
    join_group(seat)
    model = probes.built(widths, state)
    adam = torch.optim.Adam(model.parameters(), lr=lr, betas=tuple(betas), eps=eps)
    names = _names(model)
    parameters = list(model.parameters())
    for step in range(len(shards[seat.rank])):
        own, expected = _shares(seat, model, shards, step)
        for i, parameter in enumerate(parameters):
            seat.note(f"step {step}: all_reduce #{i}, {_what([parameter], names)}, in the "
                      f"order of model.parameters()")
            if failure := _exchange(seat, [parameter], own, expected, step, names):
                return {"failure": failure}
        adam.step()
        for i, (parameter, owner) in enumerate(zip(parameters, owned_by, strict=True)):
            seat.note(f"step {step}: broadcast #{i}, {names[parameter]} from rank {owner}, "
                      f"its owner")
            value = parameter.detach().clone()
            received = value if owner == seat.rank else torch.empty_like(value)
            posted(seat, dist.broadcast(received, owner, async_op=True))
            error = float((received - value).abs().max())
            if owner != seat.rank and not error <= TOLERANCE * (1 + float(value.abs().max())):
                return {"failure": f"step {step}: the value of {names[parameter]} that your "
                                   f"rank broadcast (it owns it) is not Adam's update of it "
                                   f"(off by up to {error:.3g})"}
        if failure := _end_of_step(seat, step):
            return {"failure": failure}
    return {"final": _final(model)}


def fsdp2(seat, widths: list[int], state: dict, lr: float, shards: list,
          param_dtype: str | None, per_block: bool) -> dict:
    """`fsdp2_shard` (`per_block`: each block, then the root) or the model as one unit (the
    root only: `full_state_dict`'s scenarios). This rank runs torch's FSDP2 itself, as the
    docstring says, so each all-gather and reduce-scatter the student's rank posts must match
    its own in order, size and dtype. Then the whole state dict is gathered here too and
    checked against training on the whole batch."""
    join_group(seat)
    wait_at_most(seat)
    model = probes.built(widths, state)
    dtype = None if param_dtype is None else getattr(torch, param_dtype)
    policy = MixedPrecisionPolicy() if dtype is None else \
        MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    units = "each block, then the root" if per_block else "the whole model as one unit"
    if per_block:
        for block in model.blocks:
            fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    gathered = "float32" if dtype is None else param_dtype
    for step, (x, y) in enumerate(shards[seat.rank]):
        seat.note(f"step {step}: FSDP2's forward and backward, sharded as {units} with "
                  f"fully_shard's defaults: parameters all-gathered in {gathered}, gradients "
                  f"reduce-scattered in float32")
        optimizer.zero_grad()
        probes.loss_of(model, x, y).backward()
        optimizer.step()
        if failure := _end_of_step(seat, step):
            return {"failure": failure}
    seat.note("gathering the whole state dict (an all-gather per entry of state_dict(), on "
              "every rank)")
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    tolerance = TOLERANCE if dtype is None else 2e-2
    for name, value in _whole_batch(widths, state, lr, shards).items():
        error = float((full[name] - value).abs().max())
        if not error <= tolerance * (1 + float(value.abs().max())):
            return {"failure": f"after the steps, {name} differs from training on the whole "
                               f"batch (off by up to {error:.3g})"}
    return {"final": {name: value.flatten().tolist() for name, value in full.items()}}


def compressed(seat, widths: list[int], state: dict, lr: float, shards: list,
               bucket_cap_mb: float) -> dict:
    """`bf16_compression_hook`: torch's DDP here too, with the same buckets, and a hook of this
    rank's that sends its own share (its bucket in bfloat16, divided by the world size) and
    checks what the student's rank sent, the rest of the sum: its gradients in bfloat16
    divided by the world size."""
    join_group(seat)
    wait_at_most(seat)
    model = probes.built(widths, state)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    names = _names(model)
    world = seat.world_size
    now: dict = {}
    failures: list[str] = []

    def hook(_, bucket):  # (no annotations: DDP checks them, and these would be strings)
        step, group, buffer = now["step"], bucket.parameters(), bucket.buffer()
        mine = buffer.to(torch.bfloat16).div_(world)
        total = mine.clone()
        what = _what(group, names, "bfloat16")
        seat.note(f"step {step}: the all_reduce of DDP's bucket #{bucket.index()}, {what}")
        try:
            posted(seat, dist.all_reduce(total, async_op=True))
        except Unanswered as exc:
            failures.append(f"the grader's own rank got no matching collective from your "
                            f"ranks at: step {step}: DDP's bucket #{bucket.index()}, {what} "
                            f"({exc})")
            raise
        sent = total.float() - mine.float()
        wanted = torch.cat([now["others"][p].flatten() for p in group])
        # One bfloat16 rounding of the sum: within half a unit in the last place of it.
        off = (sent - wanted).abs() - 2 ** -7 * total.float().abs()
        if not float(off.max()) <= 1e-9:
            failures.append(_compression_error(sent, wanted, total, world, step,
                                               f"DDP's bucket #{bucket.index()} ({what})"))
            raise RuntimeError(failures[-1])
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(buffer.copy_(total))
        return future

    ddp.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    try:
        for step, (x, y) in enumerate(shards[seat.rank]):
            now.update(step=step, others=_others_in_bf16(seat, model, widths, shards, step))
            optimizer.zero_grad()
            probes.loss_of(ddp, x, y).backward()
            optimizer.step()
            if failure := _end_of_step(seat, step):
                return {"failure": failure}
    except Exception:
        if failures:
            return {"failure": failures[0]}
        raise
    return {"final": _final(model)}


# ------------------------------------------------------------------------------- helpers


def _compression_error(sent: torch.Tensor, wanted: torch.Tensor, total: torch.Tensor,
                       world: int, step: int, where: str) -> str:
    undivided = (sent - wanted * world).abs() - 2 ** -7 * world * total.float().abs()
    if float(undivided.max()) <= 1e-9:
        return f"step {step}: your rank sent {where} without dividing by the world size first"
    later = (" (after a first step that was right: did the hook's future copy the averages "
             "back into bucket.buffer()?)" if step else "")
    return (f"step {step}: what your rank sent in {where} is not its gradients in bfloat16 "
            f"divided by the world size (off by up to {float((sent - wanted).abs().max()):.3g})"
            f"{later}")


def _names(model: torch.nn.Module) -> dict:
    return {p: name for name, p in model.named_parameters()}


def _freeze(model: torch.nn.Module, frozen: list[str]) -> None:
    for name, parameter in model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)


def _gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    model.zero_grad()
    probes.loss_of(model, x, y).backward()
    found = {p: p.grad.detach().clone() for p in model.parameters() if p.grad is not None}
    model.zero_grad()
    return found


def _shares(seat, model: torch.nn.Module, shards: list, step: int) -> tuple[dict, dict]:
    """This rank's contribution to each parameter's all_reduce (its gradient / world size)
    and what the other ranks must contribute together."""
    world = seat.world_size
    own = {p: g / world for p, g in _gradients(model, *shards[seat.rank][step]).items()}
    expected = {p: torch.zeros_like(g) for p, g in own.items()}
    for rank in range(world):
        if rank != seat.rank:
            for p, g in _gradients(model, *shards[rank][step]).items():
                expected[p] += g / world
    return own, expected


def _exchange(seat, group: list, own: dict, expected: dict, step: int,
              names: dict) -> str | None:
    """Post this rank's share of one all_reduce of `group`'s gradients (flattened, in order);
    their averages become the gradients. A message when what the student's rank sent is not
    its gradients / world size."""
    total = torch.cat([own[p].flatten() for p in group])
    mine = total.clone()
    posted(seat, dist.all_reduce(total, async_op=True))
    sent, wanted = total - mine, torch.cat([expected[p].flatten() for p in group])
    scale = 1 + float(wanted.abs().max())
    error = float((sent - wanted).abs().max())
    if not error <= TOLERANCE * scale:
        what = _what(group, names)
        if float((sent - wanted * seat.world_size).abs().max()) <= \
                TOLERANCE * scale * seat.world_size:
            return (f"step {step}: your rank sent {what} without dividing by the world size "
                    f"first")
        later = (" (after a first step that was right: your rank's model no longer matches "
                 "training on the whole batch; did the optimizer step on the averaged "
                 "gradients?)" if step else "")
        return (f"step {step}: what your rank sent for {what} is not its gradient divided "
                f"by the world size (off by up to {error:.3g}){later}")
    offset = 0
    for parameter in group:
        count = parameter.numel()
        parameter.grad = total[offset:offset + count].view_as(parameter).clone()
        offset += count
    return None


def _what(group: list, names: dict, dtype: str = "float32") -> str:
    if len(group) == 1:
        return f"the gradient of {names[group[0]]} ({group[0].numel()} {dtype})"
    listed = ", ".join(names[p] for p in group)
    return f"the bucket of {listed} ({sum(p.numel() for p in group)} {dtype})"


def _whole_batch(widths: list[int], state: dict, lr: float, shards: list) -> dict:
    """The parameters after SGD on every step's whole batch (the ranks' shares, averaged)."""
    model = probes.built(widths, state)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(len(shards[0])):
        grads = [_gradients(model, *shards[rank][step]) for rank in range(len(shards))]
        for parameter in model.parameters():
            parameter.grad = sum(g[parameter] for g in grads) / len(grads)
        optimizer.step()
    return {name: value.detach() for name, value in model.state_dict().items()}


def _others_in_bf16(seat, model: torch.nn.Module, widths: list[int], shards: list,
                    step: int) -> dict:
    """What the other ranks send together for each parameter, in bfloat16 (as floats), at
    this step: computed on a copy of the model (DDP's own hooks are on this one)."""
    copy = probes.built(widths, {k: v.detach().clone() for k, v in model.state_dict().items()})
    by_name = dict(copy.named_parameters())
    others = {p: torch.zeros_like(p) for p in model.parameters()}
    for rank in range(seat.world_size):
        if rank != seat.rank:
            grads = _gradients(copy, *shards[rank][step])
            for name, parameter in model.named_parameters():
                sent = grads[by_name[name]].to(torch.bfloat16).div_(seat.world_size)
                others[parameter] += sent.float()
    return others


def _buckets(model: torch.nn.Module, cap_bytes: float) -> list[list]:
    """bucketed_gradient_sync's buckets: reverse parameter order, none over the cap but a
    single parameter larger than it."""
    buckets: list[list] = []
    size = 0
    for parameter in reversed([p for p in model.parameters() if p.requires_grad]):
        nbytes = parameter.numel() * parameter.element_size()
        if not buckets or (buckets[-1] and size + nbytes > cap_bytes):
            buckets.append([])
            size = 0
        buckets[-1].append(parameter)
        size += nbytes
    return buckets


def _end_of_step(seat, step: int) -> str | None:
    """probes.end_of_step's all_reduce: what the student's ranks sent must add up to theirs."""
    seat.note(f"step {step}: the scenario's end-of-step all_reduce (one int64), after the "
              f"step's collectives")
    value = torch.zeros(1, dtype=torch.int64)
    posted(seat, dist.all_reduce(value, async_op=True))
    if int(value) != (step + 1) * (seat.world_size - 1):
        return (f"step {step}: your rank's collectives did not line up with one all_reduce "
                f"per parameter (one too many, or of another kind)")
    return None


def _ready_order(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list:
    """The parameters in the order their gradients are complete in this model's backward."""
    order: list = []
    hooks = [p.register_post_accumulate_grad_hook(order.append) for p in model.parameters()]
    try:
        _gradients(model, x, y)
    finally:
        for hook in hooks:
            hook.remove()
    return order


def _final(model: torch.nn.Module) -> dict:
    return {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}
