"""Part A: the gradients averaged by hand (average_gradients, overlapped_gradient_sync,
bucketed_gradient_sync, zero1_adam); part C: FSDP2 (fsdp2_shard, full_state_dict) and DDP's
communication hook (bf16_compression_hook).

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
        assert close(got, values), (
            f"{what}: after the steps, {name} differs from training on the whole batch "
            f"(the averaged gradients must be what the optimizer steps on)")


def close(got: torch.Tensor, values: list) -> bool:
    """`got` holds `values` (float32, within 1e-5): any other dtype, size or NaN is not."""
    return got.dtype == torch.float32 and got.numel() == len(values) and \
        torch.allclose(got.flatten(), torch.tensor(values), atol=1e-5)


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


def run_fsdp2(student, case: dict, param_dtype: str | None):
    results = student.run_ranks(
        probes.train_fsdp2, WORLD_SIZE, case["widths"], case["state"], case["lr"], param_dtype,
        per_rank=ranks_of(case),
        observer=observe(observers.fsdp2, case["widths"], case["state"], case["lr"],
                         case["shards"], param_dtype, True, rank=case["observer"]))
    assert_ranks_met(results, WORLD_SIZE, "fsdp2_shard")
    assert results.observed["final"], "fsdp2_shard: the grader's rank gathered no state dict"


@pytest.mark.weight(2)
def test_fsdp2_shard_trains_as_the_whole_batch(student):
    """fsdp2_shard: each block, then the root, sharded with FSDP2"""
    run_fsdp2(student, scenario(), None)


@pytest.mark.weight(2)
def test_fsdp2_shard_computes_in_the_given_dtype(student):
    """fsdp2_shard: parameters gathered in bfloat16, gradients reduced in float32"""
    run_fsdp2(student, scenario(), "bfloat16")


def run_full_state_dict(student, observer_rank: int):
    """The student's full_state_dict on a model that FSDP2 shards as one unit; the grader's
    rank gathers the same state dict and checks it against the whole batch's training."""
    case = {**scenario(), "observer": observer_rank}
    results = student.run_ranks(
        probes.gather_fsdp2, WORLD_SIZE, case["widths"], case["state"], case["lr"],
        per_rank=ranks_of(case),
        observer=observe(observers.fsdp2, case["widths"], case["state"], case["lr"],
                         case["shards"], None, False, rank=observer_rank))
    assert_ranks_met(results, WORLD_SIZE, "full_state_dict")
    return results[0]["state"], results.observed["final"]


def test_full_state_dict_is_whole_on_rank_0(student):
    """full_state_dict: on rank 0, every parameter whole, as plain tensors"""
    got, final = run_full_state_dict(student, 1)
    assert isinstance(got, dict), f"full_state_dict must return a dict, not {got}"
    assert set(got) == set(final), (
        f"full_state_dict on rank 0 must hold every entry of the state dict ({', '.join(final)}),"
        f" not {', '.join(got) or 'none'}")
    for name, values in final.items():
        value = got[name]
        assert isinstance(value, torch.Tensor), (
            f"full_state_dict: {name} must be a plain torch.Tensor, not a {value}")
        assert close(value, values), (
            f"full_state_dict: {name} on rank 0 is not the whole trained parameter in float32 "
            f"({value.numel()} {str(value.dtype).removeprefix('torch.')} values, for "
            f"{len(values)})")


def test_full_state_dict_is_empty_on_other_ranks(student):
    """full_state_dict: other ranks take part in the gathering and get an empty dict"""
    got, _ = run_full_state_dict(student, 0)
    assert got == {}, (
        f"full_state_dict on rank 1 must return an empty dict, not "
        f"{'a dict of ' + str(len(got)) + ' entries' if isinstance(got, dict) else got}")


@pytest.mark.weight(2)
def test_bf16_compression_hook_sends_bfloat16_averages(student):
    """bf16_compression_hook: each bucket sent in bfloat16, divided first, copied back"""
    case = scenario()
    sizes = [4 * t.numel() for t in case["state"].values()]
    # Between the largest parameter and half of them all: DDP makes two buckets or more.
    cap = case["rng"].uniform(max(sizes), max(max(sizes) + 1, sum(sizes) / 2)) / 2**20
    results = student.run_ranks(
        probes.train_compressed, WORLD_SIZE, case["widths"], case["state"], case["lr"], cap,
        per_rank=ranks_of(case),
        observer=observe(observers.compressed, case["widths"], case["state"], case["lr"],
                         case["shards"], cap, rank=case["observer"]))
    assert_ranks_met(results, WORLD_SIZE, "bf16_compression_hook")
    check_final(results, results.observed, "bf16_compression_hook")
