"""Part B: sharding by value, for drawn sizes: memory_per_rank and shard_owners."""

import pytest

from autograder.testing import drawn, raises_student

import observers

STRATEGIES = {"ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "grads"),
              "zero3": ("optimizer", "grads", "params")}


def expected(num_params: int, world_size: int, strategy: str, sizes: dict) -> dict:
    held = {part: num_params * size / (world_size if part in STRATEGIES[strategy] else 1)
            for part, size in sizes.items()}
    return {**held, "total": sum(held.values())}


def check(student, num_params, world_size, strategy, sizes, given) -> None:
    got = student.memory_per_rank(num_params, world_size, strategy, **given)
    want = expected(num_params, world_size, strategy, sizes)
    assert isinstance(got, dict) and set(got) == set(want), (
        f"memory_per_rank must return a dict with the keys {sorted(want)}")
    for part, value in want.items():
        assert got[part] == pytest.approx(value), (
            f"{strategy} on {world_size} ranks: {part} should be {value:g} bytes per rank, "
            f"got {got[part]}")


@pytest.mark.weight(3)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_memory_per_rank_mixed_precision_adam(student, strategy):
    """memory_per_rank: mixed-precision Adam"""
    rng = drawn()
    num_params, world_size = rng.randint(10**6, 10**9), rng.choice([2, 4, 8, 16, 64])
    check(student, num_params, world_size, strategy,
          {"params": 2, "grads": 2, "optimizer": 12}, {})


@pytest.mark.weight(2)
def test_memory_per_rank_other_sizes_and_unknown_strategies(student):
    """memory_per_rank: other byte sizes (fp32 training, SGD); an unknown strategy raises"""
    rng = drawn()
    for strategy in sorted(STRATEGIES):
        sizes = {"params": rng.choice([2, 4]), "grads": rng.choice([2, 4]),
                 "optimizer": rng.choice([0, 4, 8, 12])}
        check(student, rng.randint(10**5, 10**8), rng.choice([3, 6, 12]), strategy, sizes,
              {"param_bytes": sizes["params"], "grad_bytes": sizes["grads"],
               "optimizer_bytes": sizes["optimizer"]})
    with raises_student("ValueError", "an unknown strategy must raise ValueError"):
        student.memory_per_rank(1000, 4, rng.choice(["zero4", "fsdp", "DDP"]))


@pytest.mark.weight(2)
def test_shard_owners_balances_greedily(student):
    """shard_owners: each parameter to the rank owning the fewest elements so far"""
    rng = drawn()
    for _ in range(4):
        world_size = rng.randint(2, 8)
        # Sizes from a few values: ties between ranks, which the lowest rank wins.
        choices = [rng.randint(1, 5000) for _ in range(3)]
        sizes = [rng.choice(choices) for _ in range(rng.randint(world_size + 1, 30))]
        expected = observers.owners(sizes, world_size)
        got = student.shard_owners(sizes, world_size)
        assert got == expected, (
            f"shard_owners({sizes}, {world_size}) should be {expected}, got {got}")
