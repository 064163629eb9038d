"""The grader's GPUs as the runner knows them: counted once, then hidden from its own torch.

The runner is trusted code with torch: hidden tests build models, wrap them in nn.DataParallel
and compare tensors. Where its torch sees CUDA, those lines do something else than on a CPU
grader: nn.DataParallel moves a module to cuda:0 as it is made when there is one GPU, tensors of
two devices meet in a comparison (a grader error), and the runner initialises CUDA. The same
suite would grade differently with the grader's hardware. So the runner counts the GPUs through
NVML, which starts no CUDA driver, keeps the grader's CUDA_VISIBLE_DEVICES for the sandboxes
(where students' code uses the GPUs), and hides every device from itself before anything
touches CUDA: its tests run as on a CPU grader, on any grader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# What selects the GPUs a CUDA program sees: the grader's values go to every sandbox.
VISIBLE = "CUDA_VISIBLE_DEVICES"
# torch.cuda.is_available() asks NVML, not the CUDA driver (which it would initialise).
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


@dataclass(frozen=True)
class GraderGpus:
    """`count` real GPUs that students' code may use; `sandbox_env`: the grader's GPU
    selection, for every sandbox (empty: all of the machine's)."""

    count: int = 0
    sandbox_env: dict[str, str] = field(default_factory=dict)


def hide_from_runner() -> GraderGpus:
    """Count this grader's GPUs, then make them invisible to this process's torch."""
    import torch

    os.environ[NVML_CHECK] = "1"
    count = torch.cuda.device_count()  # NVML's count (0 in a CPU build): one NVML start
    kept = {VISIBLE: os.environ[VISIBLE]} if VISIBLE in os.environ else {}
    os.environ[VISIBLE] = ""  # CUDA and torch's NVML count alike: no device
    if torch.cuda.is_available():  # never true where NVML answers; refuse rather than mix
        raise RuntimeError("the runner could not hide CUDA from its own torch")
    return GraderGpus(count, kept)
