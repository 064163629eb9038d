"""Part A: average_gradients and overlapped_gradient_sync.

Each scenario is a process group of two ranks: one runs the student's code in the sandbox, the
other is the grader's own (observers.py), which checks every collective the student's rank
posts, in order, and trains the same model on its own share of each batch. Every input (the
model's sizes and weights, the data, the learning rate, the gates' values, which rank is the
grader's) is drawn for this grading; what is right is computed here and in the observer.
"""

import pytest
import torch

from autograder.runner.observe import observe
from autograder.testing import assert_ranks_met, drawn

import observers
import probes

WORLD_SIZE = 2


def scenario(gated: bool = False) -> dict:
    """A model, its weights and each rank's share of every step's batch, drawn."""
    rng = drawn()
    torch.manual_seed(rng.getrandbits(63))
    widths = [rng.randint(3, 5)] + [rng.randint(4, 7) for _ in range(rng.randint(2, 3))] + \
        [rng.randint(1, 3)]
    state = probes.Net(widths, gated).state_dict()
    steps, rows = 3, rng.randint(2, 4)
    shards = [[(torch.randn(rows, widths[0]), torch.randn(rows, widths[-1]))
               for _ in range(steps)] for _ in range(WORLD_SIZE)]
    return {"widths": widths, "state": state, "lr": rng.uniform(0.05, 0.3), "shards": shards,
            "observer": rng.randrange(WORLD_SIZE), "rng": rng}


def check_final(results, observed: dict, what: str) -> None:
    """The student's rank ends with the parameters of training on the whole batch (the
    grader's rank's, whose gradients were the averages it checked)."""
    final = results[0]["final"]
    for name, values in observed["final"].items():
        got = final.get(name) if isinstance(final, dict) else None
        assert isinstance(got, torch.Tensor), f"{what}: the model lost its parameter {name}"
        assert torch.allclose(got.flatten(), torch.tensor(values), atol=1e-5), (
            f"{what}: after the steps, {name} differs from training on the whole batch "
            f"(the averaged gradients must be what the optimizer steps on)")


def ranks_of(case: dict) -> list:
    """Each rank's shares (None for the grader's rank: it gets its own through the observer)."""
    return [None if rank == case["observer"] else case["shards"][rank]
            for rank in range(WORLD_SIZE)]


@pytest.mark.weight(2)
def test_average_gradients_trains_as_the_whole_batch(student):
    """average_gradients: one all_reduce per parameter, divided first, as the whole batch"""
    case = scenario()
    results = student.run_ranks(
        probes.train_averaged, WORLD_SIZE, case["widths"], case["state"], case["lr"], [],
        per_rank=ranks_of(case),
        observer=observe(observers.averaged, case["widths"], case["state"], case["lr"],
                         case["shards"], [], rank=case["observer"]))
    assert_ranks_met(results, WORLD_SIZE, "average_gradients")
    check_final(results, results.observed, "average_gradients")


def test_average_gradients_skips_parameters_without_a_gradient(student):
    """average_gradients: a parameter without a gradient gets no collective"""
    case = scenario()
    names = list(case["state"])
    frozen = case["rng"].sample(names, 2)
    results = student.run_ranks(
        probes.train_averaged, WORLD_SIZE, case["widths"], case["state"], case["lr"], frozen,
        per_rank=ranks_of(case),
        observer=observe(observers.averaged, case["widths"], case["state"], case["lr"],
                         case["shards"], frozen, rank=case["observer"]))
    assert results.observed["collectives"] == 3 * (len(names) - 2)
    check_final(results, results.observed, "average_gradients")


def gates_for(case: dict) -> list:
    """Each step's two gate values, drawn: only the grader's rank knows them."""
    rng = case["rng"]
    return [[[rng.uniform(0.8, 1.6), rng.uniform(0.1, 0.5)] for _ in range(2)]
            for _ in range(len(case["shards"][0]))]


def run_overlapped(student, case: dict, gate_values: list | None,
                   cap_bytes: float | None = None):
    """A scenario of the student's overlapped (cap None) or bucketed sync, observed."""
    bucket_size_mb = None if cap_bytes is None else cap_bytes / 2**20
    results = student.run_ranks(
        probes.train_overlapped, WORLD_SIZE, case["widths"], case["state"], case["lr"],
        case["observer"], bucket_size_mb, gate_values is not None, per_rank=ranks_of(case),
        observer=observe(observers.overlapped, case["widths"], case["state"], case["lr"],
                         case["shards"], gate_values, 0.3, cap_bytes, rank=case["observer"]))
    what = "overlapped_gradient_sync" if cap_bytes is None else "bucketed_gradient_sync"
    assert_ranks_met(results, WORLD_SIZE, what)
    check_final(results, results.observed, what)
    return results


@pytest.mark.weight(3)
def test_overlapped_gradient_sync_communicates_during_backward(student):
    """overlapped_gradient_sync: all_reduces start in the hooks, in ready order, waited for"""
    case = scenario(gated=True)
    run_overlapped(student, case, gates_for(case))


def head_only_cap(case: dict) -> float:
    """A cap that the head's two parameters fill, and that the next parameter would exceed:
    bucket 0 is the head's (gate 2, below it, waits for exactly that bucket)."""
    widths = case["widths"]
    head = 4 * (widths[-2] * widths[-1] + widths[-1])
    return head + case["rng"].uniform(0, 4 * widths[-2] - 1)


@pytest.mark.weight(3)
def test_bucketed_gradient_sync_sends_buckets_during_backward(student):
    """bucketed_gradient_sync: one all_reduce per bucket, started during backward"""
    case = scenario(gated=True)
    run_overlapped(student, case, gates_for(case), head_only_cap(case))


@pytest.mark.weight(2)
def test_bucketed_gradient_sync_fills_buckets_up_to_the_cap(student):
    """bucketed_gradient_sync: buckets in reverse order, none over the cap"""
    case = scenario()
    sizes = [4 * t.numel() for t in case["state"].values()]  # (float32: 4 bytes each)
    # From the largest parameter to half of them all: two buckets or more.
    cap = case["rng"].uniform(max(sizes), max(max(sizes) + 1, sum(sizes) / 2))
    results = run_overlapped(student, case, None, cap)
    assert len(results.observed["collectives"][0]) >= 2


@pytest.mark.weight(3)
def test_zero1_adam_trains_as_adam_with_a_shard_of_the_state(student):
    """zero1_adam: averaged gradients, Adam on its own shard, each parameter from its owner"""
    case = scenario()
    rng = case["rng"]
    names = list(case["state"])
    # Any partition will do (shard_owners' own is graded on its own): drawn, each rank some.
    owners = [rng.randrange(WORLD_SIZE) for _ in names]
    first, second = rng.sample(range(len(names)), 2)
    owners[first], owners[second] = 0, 1
    betas, eps = [rng.uniform(0.8, 0.95), rng.uniform(0.95, 0.999)], 10 ** rng.uniform(-8, -6)
    lr = rng.uniform(0.005, 0.05)
    results = student.run_ranks(
        probes.train_zero1, WORLD_SIZE, case["widths"], case["state"], owners, lr, betas, eps,
        per_rank=ranks_of(case),
        observer=observe(observers.zero1, case["widths"], case["state"], owners, lr, betas,
                         eps, case["shards"], rank=case["observer"]))
    assert_ranks_met(results, WORLD_SIZE, "zero1_adam")
    check_final(results, results.observed, "zero1_adam")
    mine = 1 - case["observer"]
    wanted = [name for name, owner in zip(names, owners, strict=True) if owner == mine]
    report = results[0]
    assert report["owned"] == wanted, (
        f"zero1_adam: rank {mine}'s optimizer must hold exactly the parameters it owns "
        f"({', '.join(wanted)}), not {', '.join(map(str, report['owned'])) or 'none'}")
    assert report["stated"] == len(wanted), (
        "zero1_adam: the optimizer must hold Adam's state for its own parameters only")
