"""Make ddp_training's mutants and alternative solutions from its reference solution.

The sibling of scripts/make_mutants.py (same header format, same one-edit-at-a-time check):
each mutant is the reference with one classic mistake of multi-process training, and names the
hidden tests that must catch it. The mutants are not committed: the acceptance test
(tests/assignments/test_ddp_training_grading.py) makes them at run time with `write_mutants`.
What this script writes into the tree is the demo's partly correct example,
assignments/ddp_training/examples/partial/ (a few mutants' mistakes, half of the key):

    .venv/bin/python scripts/make_ddp_training_mutants.py              # (re)write the example
    .venv/bin/python scripts/make_ddp_training_mutants.py --check      # exit 1 if it differs
    .venv/bin/python scripts/make_ddp_training_mutants.py --write DIR  # mutants, alternatives

grading.yml's `generators` lists this script, so `autograder generate [--check]` covers it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "assignments" / "ddp_training" / "solution" / "ddp_training.py"
PARTIAL = ROOT / "assignments" / "ddp_training" / "examples" / "partial"

_spec = importlib.util.spec_from_file_location("make_mutants", ROOT / "scripts" / "make_mutants.py")
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

LAUNCH = "init_from_env: 2 nodes x 2 GPUs"
UNUSED = "wrap_with_unused: training goes on when a branch is skipped"
MUTANTS: list[tuple] = [
    ("launch_device_from_rank", "init_from_env", "picks cuda:RANK instead of cuda:LOCAL_RANK",
     [LAUNCH],
     '        device = torch.device("cuda", local_rank)\n',
     '        device = torch.device("cuda", rank)\n'),
    ("launch_no_local_rank_check", "init_from_env", "accepts LOCAL_RANK >= WORLD_SIZE",
     ["init_from_env: a missing or inconsistent variable"],
     """    if not 0 <= local_rank < world_size:
        raise ValueError(f"LOCAL_RANK must be in [0, WORLD_SIZE={world_size}), got "
                         f"{local_rank}")
""", ""),
    ("launch_always_gloo", "init_from_env", "always gloo, even with a GPU per local rank",
     [LAUNCH],
     '        backend = "nccl" if gpus > local_rank else "gloo"',
     '        backend = "gloo"'),
    ("epochs_no_set_epoch", "train_epochs", "forgets set_epoch (the same shuffle every epoch)",
     ["train_epochs: a new shuffle each epoch", "train_epochs: start_epoch resumes"],
     """        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
""", ""),
    ("epochs_ignores_start", "train_epochs", "always starts at epoch 0",
     ["train_epochs: start_epoch resumes"],
     "    for epoch in range(start_epoch, epochs):",
     "    for epoch in range(epochs - start_epoch):"),
    ("accumulate_no_sync_everywhere", "accumulate_step",
     "no_sync() on the last micro-batch too: gradients never all-reduced",
     ["accumulate_step: under DDP"],
     "        sync = contextlib.nullcontext() if last or not hasattr(model, \"no_sync\") \\\n",
     "        sync = contextlib.nullcontext() if not hasattr(model, \"no_sync\") \\\n"),
    ("accumulate_not_divided", "accumulate_step", "loss not divided by the number of micro-batches",
     ["accumulate_step: under DDP", "accumulate_step: an unwrapped model"],
     "            (loss / k).backward()", "            loss.backward()"),
    ("accumulate_without_no_sync", "accumulate_step", "all-reduces on every micro-batch",
     ["accumulate_step: under DDP"],
     "        sync = contextlib.nullcontext() if last or not hasattr(model, \"no_sync\") \\\n"
     "            else model.no_sync()\n",
     "        sync = contextlib.nullcontext()\n"),
    ("save_every_rank", "save_checkpoint", "every rank writes the checkpoint",
     ["save_checkpoint: rank 0 writes"],
     "    if not grouped or dist.get_rank() == 0:\n", "    if True:\n"),
    ("save_no_barrier", "save_checkpoint", "no barrier: other ranks return before the file exists",
     ["save_checkpoint: rank 0 writes"],
     """    if grouped:
        dist.barrier()
""", ""),
    ("save_wrapped_keys", "save_checkpoint", "saves the DDP wrapper's state dict (module. keys)",
     ["save_checkpoint: rank 0 writes"],
     '        torch.save({"model": _unwrapped(model).state_dict(),',
     '        torch.save({"model": model.state_dict(),'),
    ("load_no_map_location", "load_checkpoint", "torch.load without map_location",
     ["load_checkpoint: every rank loads onto its own GPU"],
     "    checkpoint = torch.load(path, map_location=device)",
     "    checkpoint = torch.load(path)"),
    ("load_forgets_optimizer", "load_checkpoint", "restores the model but not the optimizer",
     ["load_checkpoint: every rank loads onto its own GPU", "load_checkpoint: on CPU ranks"],
     '    optimizer.load_state_dict(checkpoint["optimizer"])\n', ""),
    ("mean_on_rank_zero_only", "global_mean", "reduces to rank 0 only (others keep their value)",
     ["global_mean: every rank gets the mean"],
     "    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)",
     "    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)"),
    ("mean_not_divided", "global_mean", "sums instead of averaging",
     ["global_mean: every rank gets the mean"],
     "    return float(tensor.item()) / dist.get_world_size()", "    return float(tensor.item())"),
    ("evaluate_counts_padding", "evaluate_accuracy", "counts DistributedSampler's padded repeats",
     ["evaluate_accuracy: accuracy over the whole dataset"],
     "                if rank + position * world_size < len(dataset):  # not padding",
     "                if True:"),
    ("evaluate_stays_eval", "evaluate_accuracy", "leaves the model in eval mode",
     ["evaluate_accuracy: accuracy over the whole dataset"],
     "    model.train(was_training)\n", ""),
    ("amp_clip_before_unscale", "amp_train_step", "unscale_ after clipping",
     ["amp_train_step: with a GradScaler"],
     """        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)""",
     """        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)"""),
    ("amp_no_autocast", "amp_train_step", "no autocast: the forward runs in float32",
     ["amp_train_step: bfloat16 autocast", "amp_train_step: with a GradScaler"],
     "    with torch.autocast(device_type=device.type, dtype=dtype):",
     "    with contextlib.nullcontext():"),
    ("unused_plain_ddp", "wrap_with_unused",
     "plain DDP: the step after a skipped branch fails (reduction not finished)",
     [UNUSED],
     "device_ids=device_ids, find_unused_parameters=True)",
     "device_ids=device_ids)"),
    ("unused_static_graph", "wrap_with_unused",
     "static_graph=True instead of find_unused_parameters: the graph changes between steps",
     [UNUSED],
     "device_ids=device_ids, find_unused_parameters=True)",
     "device_ids=device_ids, static_graph=True)"),
    ("unused_not_wrapped", "wrap_with_unused",
     "returns the model unwrapped: each rank trains on its own gradients",
     [UNUSED],
     "    return DistributedDataParallel(model, device_ids=device_ids, "
     "find_unused_parameters=True)",
     "    return model"),
]

# Correct solutions written differently (header `# ALT: ...`), as edits of the reference like
# the mutants': each must score full marks. alt_faithful holds the readings of the docstrings
# that the hidden and public tests once failed (issue 24).
ALTS: list[tuple] = [
    ("alt_faithful",
     "# ALT: correct, as the docstrings read (issue 24): torch's save and load imported by name\n"
     "# (from torch import load, save), load's map_location given by position on the CPU and as\n"
     "# PyTorch's DDP tutorial writes it on GPUs ({'cuda:0': f'cuda:{rank}'}), the accuracy's\n"
     "# counts divided in float32, the launch variables checked in another order.\n",
     "from torch import nn\n", "from torch import load, nn, save\n",
     "    for name in LAUNCH_VARIABLES:\n",
     '    for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK"):\n',
     '''        torch.save({"model": _unwrapped(model).state_dict(),
                    "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
''', '''        save({"model": _unwrapped(model).state_dict(),
              "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
''',
     "    checkpoint = torch.load(path, map_location=device)\n",
     '''    if device.type == "cuda":  # the GPU it was saved from, mapped to this rank's
        checkpoint = load(path, map_location={"cuda:0": f"cuda:{dist.get_rank()}"})
    else:
        checkpoint = load(path, device)
''',
     "    totals = torch.tensor([correct, counted], dtype=torch.float64, device=device)\n",
     "    totals = torch.tensor([correct, counted], dtype=torch.float32, device=device)\n",
     "    return float(totals[0] / totals[1])\n", "    return (totals[0] / totals[1]).item()\n"),
]

# The demo's partly correct example: a few of the mistakes above, and half of the key.
PARTIAL_MISTAKES = ("epochs_no_set_epoch", "save_no_barrier", "amp_clip_before_unscale")


def mutant_files(solution: str) -> dict[str, str]:
    """File name -> content of every mutant and every alternative solution."""
    return _base.edited_files(solution, MUTANTS, ALTS)


def write_mutants(folder: Path, solution: str | None = None) -> list[Path]:
    """Write every mutant and alternative into `folder` (made if missing); their paths."""
    return _base.write_files(folder, mutant_files(solution or SOLUTION.read_text()))


def committed_files(solution: str) -> dict[Path, str]:
    """Path -> content of the committed files made from the mutants: the partial example."""
    return _base.partial_example(solution, MUTANTS, PARTIAL_MISTAKES, PARTIAL, "ddp_training",
                                 SOLUTION.parents[1] / "questions.yml")


if __name__ == "__main__":
    sys.exit(_base.run(None, __doc__, SOLUTION, committed_files, write_mutants))
