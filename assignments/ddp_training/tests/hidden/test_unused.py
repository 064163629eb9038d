"""Part F: wrap_with_unused, a model whose forward skips a branch in some steps, on gloo ranks.

Every rank trains on its own drawn batches; the state after the last step must equal plain
SGD on the mean of the ranks' losses, computed here (DDP averages the gradients, and a
parameter that no rank used in a step gets no update).
"""

import copy

import pytest
import torch

from autograder.testing import assert_ranks_met, drawn, error_text

import probes


def expected_state(model, per_rank, pattern, lr):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step, use in enumerate(pattern):
        optimizer.zero_grad()
        loss = sum(probes.mse(model(batches[step][0], use), batches[step][1])
                   for batches in per_rank) / len(per_rank)
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.timeout_s(150)
def test_unused_branch(student):
    """wrap_with_unused: training goes on when a branch is skipped, gradients averaged over ranks"""
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    world, lr, steps = rng.choice([2, 3]), rng.choice([0.05, 0.1]), rng.randint(4, 6)
    # Used, skipped, then drawn: a skipped step is always followed by another one.
    pattern = [True, False] + [rng.random() < 0.5 for _ in range(steps - 2)]
    model = probes.BranchMLP()
    per_rank = [[(torch.randn(n, 4), torch.randn(n, 1)) for n in
                 [rng.randint(2, 6) for _ in range(steps)]] for _ in range(world)]
    want = expected_state(model, per_rank, pattern, lr)
    reports = student.run_ranks(probes.unused_ranks, world, model, lr, pattern,
                                per_rank=per_rank)
    assert_ranks_met(reports, world, "the grader's own process group")
    for rank, report in enumerate(reports):
        if "error" in report:
            error = report["error"]
            where = (f"training step {report['step'] + 1} (branch "
                     f"{'used' if pattern[report['step']] else 'skipped'})"
                     if "step" in report else "wrap_with_unused")
            raise AssertionError(f"rank {rank}: {where} raised {error_text(error)}")
        assert report.get("wrapper") == "DistributedDataParallel", (
            f"rank {rank}: wrap_with_unused must return a DistributedDataParallel, got "
            f"{report.get('wrapper')}")
        for name, value in want.items():
            got = report["state"].get(name)
            assert got is not None and got.shape == value.shape and torch.allclose(
                got, value, atol=1e-5, rtol=1e-4), (
                f"rank {rank}: after {steps} steps {name!r} differs from training on the "
                "gradients averaged over every rank")
