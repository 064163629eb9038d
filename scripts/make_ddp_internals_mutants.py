"""Make ddp_internals' mutants and alternative solutions from its reference solution.

The sibling of scripts/make_ddp_training_mutants.py (same header format, same one-edit-at-a-time
check): each mutant is the reference with one classic mistake of hand-written data parallelism,
and names the hidden tests that must catch it. The mutants are not committed: the acceptance test
(tests/assignments/test_ddp_internals_grading.py) makes them at run time with `write_mutants`.
What this script writes into the tree is the demo's partly correct example,
assignments/ddp_internals/examples/partial/ (a few mutants' mistakes, half of the key):

    .venv/bin/python scripts/make_ddp_internals_mutants.py              # (re)write the example
    .venv/bin/python scripts/make_ddp_internals_mutants.py --check      # exit 1 if it differs
    .venv/bin/python scripts/make_ddp_internals_mutants.py --write DIR  # mutants, alternatives

grading.yml's `generators` lists this script, so `autograder generate [--check]` covers it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "assignments" / "ddp_internals" / "solution" / "ddp_internals.py"
PARTIAL = ROOT / "assignments" / "ddp_internals" / "examples" / "partial"

_spec = importlib.util.spec_from_file_location("make_mutants", ROOT / "scripts" / "make_mutants.py")
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

AVERAGE = "average_gradients: one all_reduce per parameter, divided first"
SKIPS = "average_gradients: a parameter without a gradient gets no collective"
OVERLAP = "overlapped_gradient_sync: all_reduces start in the hooks"
BUCKETS = "bucketed_gradient_sync: one all_reduce per bucket, started during backward"
FILLS = "bucketed_gradient_sync: buckets in reverse order, none over the cap"
OWNERS = "shard_owners: each parameter to the rank owning the fewest elements so far"
ZERO1 = "zero1_adam: averaged gradients, Adam on its own shard"
MIXED = "memory_per_rank: mixed-precision Adam"
OTHER = "memory_per_rank: other byte sizes"
FSDP = "fsdp2_shard: each block, then the root"
FSDP_DTYPE = "fsdp2_shard: parameters gathered in bfloat16"
WHOLE = "full_state_dict: on rank 0, every parameter whole"
EMPTY = "full_state_dict: other ranks take part in the gathering"
HOOK = "bf16_compression_hook: each bucket sent in bfloat16"
MUTANTS: list[tuple] = [
    ("average_no_division", "average_gradients", "sums the gradients without dividing them",
     [AVERAGE, SKIPS],
     "            parameter.grad.div_(world_size)\n            dist.all_reduce(",
     "            dist.all_reduce("),
    ("average_divides_after", "average_gradients",
     "divides after the all_reduce (the average, but not the contract's collectives)",
     [AVERAGE, SKIPS],
     "            parameter.grad.div_(world_size)\n            dist.all_reduce(parameter.grad)\n",
     "            dist.all_reduce(parameter.grad)\n            parameter.grad.div_(world_size)\n"),
    ("average_reversed", "average_gradients", "all_reduces in reverse parameter order",
     [AVERAGE, SKIPS],
     "    for parameter in model.parameters():\n        if parameter.grad is not None:\n"
     "            parameter.grad.div_(world_size)",
     "    for parameter in reversed(list(model.parameters())):\n"
     "        if parameter.grad is not None:\n            parameter.grad.div_(world_size)"),
    ("average_skips_biases", "average_gradients", "leaves the biases' gradients local",
     [AVERAGE, SKIPS],
     "        if parameter.grad is not None:\n            parameter.grad.div_(world_size)",
     "        if parameter.grad is not None and parameter.dim() > 1:\n"
     "            parameter.grad.div_(world_size)"),
    ("average_a_copy", "average_gradients", "all_reduces a copy, the gradient stays local",
     [AVERAGE, SKIPS],
     "            dist.all_reduce(parameter.grad)\n",
     "            dist.all_reduce(parameter.grad.clone())\n"),
    ("average_max", "average_gradients", "reduces with MAX instead of a sum",
     [AVERAGE, SKIPS],
     "            dist.all_reduce(parameter.grad)\n",
     "            dist.all_reduce(parameter.grad, op=dist.ReduceOp.MAX)\n"),
    ("overlap_after_backward", "overlapped_gradient_sync",
     "sends every gradient in finish(), after backward",
     [OVERLAP],
     "        pending.append(dist.all_reduce(parameter.grad, async_op=True))\n",
     "        pending.append(parameter)\n",
     "        for work in pending:\n            work.wait()\n",
     "        for parameter in pending:\n            dist.all_reduce(parameter.grad)\n"),
    ("overlap_blocking_hook", "overlapped_gradient_sync",
     "waits for each all_reduce inside its hook",
     [OVERLAP],
     "        pending.append(dist.all_reduce(parameter.grad, async_op=True))\n",
     "        dist.all_reduce(parameter.grad)\n"),
    ("overlap_no_wait", "overlapped_gradient_sync", "finish() does not wait",
     [OVERLAP],
     "        for work in pending:\n            work.wait()\n", ""),
    ("overlap_pre_accumulation_hook", "overlapped_gradient_sync",
     "hooks the gradient before it is accumulated (Tensor.register_hook)",
     [OVERLAP],
     "    def hook(parameter: torch.Tensor) -> None:\n"
     "        parameter.grad.div_(world_size)\n"
     "        pending.append(dist.all_reduce(parameter.grad, async_op=True))\n",
     "    def hook(grad: torch.Tensor) -> torch.Tensor:\n"
     "        grad = grad / world_size\n"
     "        pending.append(dist.all_reduce(grad, async_op=True))\n"
     "        return grad\n",
     "            parameter.register_post_accumulate_grad_hook(hook)\n",
     "            parameter.register_hook(hook)\n"),
    ("bucket_forward_order", "bucketed_gradient_sync",
     "fills the buckets in the order of model.parameters()",
     [BUCKETS, FILLS],
     "    for parameter in reversed([p for p in model.parameters() if p.requires_grad]):\n",
     "    for parameter in [p for p in model.parameters() if p.requires_grad]:\n"),
    ("bucket_per_parameter", "bucketed_gradient_sync", "ignores the cap: one bucket each",
     [BUCKETS, FILLS],
     "        if not buckets or (buckets[-1] and size + nbytes > cap):\n",
     "        if not buckets or buckets[-1]:\n"),
    ("bucket_over_the_cap", "bucketed_gradient_sync",
     "closes a bucket only once it is over the cap",
     [BUCKETS, FILLS],
     "        if not buckets or (buckets[-1] and size + nbytes > cap):\n",
     "        if not buckets or (buckets[-1] and size > cap):\n"),
    ("bucket_no_copy_back", "bucketed_gradient_sync",
     "never copies the averages back into the gradients",
     [BUCKETS, FILLS],
     "                parameter.grad.copy_(flat[offset:offset + count].view_as(parameter.grad))\n",
     ""),
    ("bucket_after_backward", "bucketed_gradient_sync",
     "starts every bucket's all_reduce in finish(), after backward",
     [BUCKETS],
     "            pending.append((buckets[index], flat, dist.all_reduce(flat, async_op=True)))\n",
     "            pending.append((buckets[index], flat, None))\n",
     "        for bucket, flat, work in pending:\n            work.wait()\n",
     "        for bucket, flat, work in pending:\n            dist.all_reduce(flat)\n"),
    ("bucket_no_wait", "bucketed_gradient_sync",
     "finish() copies the buckets back without waiting for their all_reduce",
     [BUCKETS, FILLS],
     "        for bucket, flat, work in pending:\n            work.wait()\n",
     "        for bucket, flat, work in pending:\n"),
    ("owners_round_robin", "shard_owners", "deals the parameters round robin",
     [OWNERS],
     "        rank = min(range(world_size), key=lambda r: (held[r], r))\n",
     "        rank = len(owners) % world_size\n"),
    ("owners_ties_to_the_last", "shard_owners", "breaks ties towards the highest rank",
     [OWNERS],
     "        rank = min(range(world_size), key=lambda r: (held[r], r))\n",
     "        rank = min(range(world_size), key=lambda r: (held[r], -r))\n"),
    ("zero1_full_state", "zero1_adam", "every rank keeps Adam's state for every parameter",
     [ZERO1],
     "    optimizer = torch.optim.Adam(own, lr=lr, betas=betas, eps=eps)\n",
     "    optimizer = torch.optim.Adam(parameters, lr=lr, betas=betas, eps=eps)\n"),
    ("zero1_no_broadcast", "zero1_adam", "never broadcasts the updated parameters",
     [ZERO1],
     "        for parameter, owner in zip(parameters, owners, strict=True):\n"
     "            dist.broadcast(parameter.data, src=owner)\n", ""),
    ("zero1_broadcast_from_rank_0", "zero1_adam", "broadcasts every parameter from rank 0",
     [ZERO1],
     "            dist.broadcast(parameter.data, src=owner)\n",
     "            dist.broadcast(parameter.data, src=0)\n"),
    ("zero1_local_gradients", "zero1_adam", "steps on its own rank's gradients",
     [ZERO1],
     "            grad.div_(world_size)  # (average_gradients' collectives)\n"
     "            dist.all_reduce(grad)\n",
     "            pass\n"),
    ("memory_zero2_keeps_grads", "memory_per_rank", "ZeRO-2 does not split the gradients",
     [MIXED, OTHER],
     '"zero2": ("optimizer", "grads")', '"zero2": ("optimizer",)'),
    ("memory_zero1_splits_params", "memory_per_rank", "ZeRO-1 splits the parameters too",
     [MIXED, OTHER],
     '"zero1": ("optimizer",)', '"zero1": ("optimizer", "params")'),
    ("memory_bits_not_bytes", "memory_per_rank", "counts bits, not bytes",
     [MIXED, OTHER],
     "    held = {part: num_params * size /", "    held = {part: 8 * num_params * size /"),
    ("fsdp_root_only", "fsdp2_shard", "shards the root only, not each block",
     [FSDP, FSDP_DTYPE],
     "    for block in blocks:\n        fully_shard(block, mp_policy=policy)\n", ""),
    ("fsdp_blocks_only", "fsdp2_shard", "shards each block but not the root",
     [FSDP, FSDP_DTYPE],
     "    fully_shard(model, mp_policy=policy)\n", ""),
    ("fsdp_not_sharded", "fsdp2_shard", "returns the model unsharded",
     [FSDP, FSDP_DTYPE],
     "    for block in blocks:\n        fully_shard(block, mp_policy=policy)\n"
     "    fully_shard(model, mp_policy=policy)\n", ""),
    ("fsdp_blocks_stay_gathered", "fsdp2_shard",
     "keeps the blocks' parameters gathered after forward (reshard_after_forward=False)",
     [FSDP, FSDP_DTYPE],
     "        fully_shard(block, mp_policy=policy)\n",
     "        fully_shard(block, mp_policy=policy, reshard_after_forward=False)\n"),
    ("fsdp_ignores_dtype", "fsdp2_shard", "ignores param_dtype",
     [FSDP_DTYPE],
     "    policy = MixedPrecisionPolicy() if param_dtype is None else \\\n"
     "        MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)\n",
     "    policy = MixedPrecisionPolicy()\n"),
    ("fsdp_reduces_in_bf16", "fsdp2_shard", "reduces the gradients in param_dtype too",
     [FSDP_DTYPE],
     "MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)",
     "MixedPrecisionPolicy(param_dtype=param_dtype)"),
    ("state_on_every_rank", "full_state_dict", "returns the whole state dict on every rank",
     [EMPTY],
     "StateDictOptions(full_state_dict=True, cpu_offload=True)",
     "StateDictOptions(full_state_dict=True)"),
    ("state_sharded", "full_state_dict", "returns the model's own state dict of DTensors",
     [WHOLE, EMPTY],
     "    return get_model_state_dict(model, options=options)\n",
     "    return model.state_dict()\n"),
    ("state_local_shards", "full_state_dict", "returns each rank's own shards",
     [WHOLE, EMPTY],
     "    return get_model_state_dict(model, options=options)\n",
     "    return {name: value.to_local() for name, value in model.state_dict().items()}\n"),
    ("state_rank_0_alone", "full_state_dict", "only rank 0 takes part in the gathering",
     [EMPTY],
     "    options = StateDictOptions(full_state_dict=True, cpu_offload=True)\n",
     "    if dist.get_rank() != 0:\n        return {}\n"
     "    options = StateDictOptions(full_state_dict=True, cpu_offload=True)\n"),
    ("hook_float16", "bf16_compression_hook", "compresses to float16 instead of bfloat16",
     [HOOK],
     "    compressed = buffer.to(torch.bfloat16)", "    compressed = buffer.to(torch.float16)"),
    ("hook_no_compression", "bf16_compression_hook", "sends the gradients in float32",
     [HOOK],
     "    compressed = buffer.to(torch.bfloat16).div_", "    compressed = buffer.clone().div_"),
    ("hook_no_division", "bf16_compression_hook", "never divides by the world size",
     [HOOK],
     "    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())\n",
     "    compressed = buffer.to(torch.bfloat16)\n"),
    ("hook_no_copy_back", "bf16_compression_hook",
     "returns the bucket's buffer without the averages",
     [HOOK],
     "        return buffer.copy_(future.value()[0])\n", "        return buffer\n"),
]

# Correct solutions written differently: each must get every point of its functions.
ALTS: list[tuple] = [
    ("alt_faithful",
     "# ALT: correct, written otherwise: torch's own reduction per gradient in a list,\n"
     "# the hooks keeping (parameter, work) pairs, the arithmetic through a table of stages.\n",
     "    for parameter in model.parameters():\n        if parameter.grad is not None:\n"
     "            parameter.grad.div_(world_size)\n            dist.all_reduce(parameter.grad)\n",
     "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
     "    for grad in grads:\n        grad.mul_(1.0 / world_size)\n"
     "        dist.all_reduce(grad, op=dist.ReduceOp.SUM)\n",
     '    split = {"ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "grads"),\n'
     '             "zero3": ("optimizer", "grads", "params")}\n',
     '    split = {f"zero{stage}": ("optimizer", "grads", "params")[:stage]\n'
     "             for stage in (1, 2, 3)}\n"
     '    split["ddp"] = ()\n'),
    ("alt_gathered_by_hand",
     "# ALT: correct, written otherwise: the state dict gathered with DTensor.full_tensor and\n"
     "# kept on rank 0; the hook decompressing with .float() before the copy.\n",
     "    options = StateDictOptions(full_state_dict=True, cpu_offload=True)\n"
     "    return get_model_state_dict(model, options=options)\n",
     "    from torch.distributed.tensor import DTensor\n"
     "    whole = {name: value.full_tensor() if isinstance(value, DTensor) else value\n"
     "             for name, value in model.state_dict().items()}\n"
     "    if dist.get_rank() != 0:\n        return {}\n"
     "    return {name: value.detach().cpu() for name, value in whole.items()}\n",
     "        return buffer.copy_(future.value()[0])\n",
     "        buffer.copy_(future.value()[0].float())\n        return buffer\n"),
]

# The demo's partly correct example: a few of the mistakes above, and half of the key.
PARTIAL_MISTAKES = ("overlap_no_wait", "memory_zero2_keeps_grads")


def mutant_files(solution: str) -> dict[str, str]:
    """File name -> content of every mutant and every alternative solution."""
    return _base.edited_files(solution, MUTANTS, ALTS)


def write_mutants(folder: Path, solution: str | None = None) -> list[Path]:
    """Write every mutant and alternative into `folder` (made if missing); their paths."""
    return _base.write_files(folder, mutant_files(solution or SOLUTION.read_text()))


def committed_files(solution: str) -> dict[Path, str]:
    """Path -> content of the committed files made from the mutants: the partial example."""
    return _base.partial_example(solution, MUTANTS, PARTIAL_MISTAKES, PARTIAL, "ddp_internals",
                                 SOLUTION.parents[1] / "questions.yml")


if __name__ == "__main__":
    sys.exit(_base.run(None, __doc__, SOLUTION, committed_files, write_mutants))
