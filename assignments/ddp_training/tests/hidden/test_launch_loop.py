"""Parts A and B: init_from_env, train_epochs, accumulate_step.

Multi-process checks run real gloo ranks (`student.run_ranks`); device decisions are graded
with simulated GPUs (`student.simulated`), so a CPU grader checks them too. Every input and
per-rank value is drawn for this grading; expected values are computed here.
"""

import copy

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from autograder.testing import assert_ranks_met, drawn, error_text

import probes


def values_for(world_size: int) -> list[float]:
    rng = drawn()
    # Distinct: with equal values, each rank's own value times the world size is the sum.
    return [float(v) for v in rng.sample(range(1, 1001), world_size)]


def close(a, b, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol, rtol=1e-4)


def error_of(report: dict, what: str) -> None:
    if "error" in report:
        error = report["error"]
        raise AssertionError(f"{what} raised {error_text(error)}")


# ----------------------------------------------------------------------------- init_from_env


@pytest.mark.weight(3)
@pytest.mark.timeout_s(150)
def test_launch_two_nodes(student):
    """init_from_env: 2 nodes x 2 GPUs: cuda:LOCAL_RANK, nccl, one group of 4"""
    view = student.simulated(2)
    values = values_for(4)
    reports = view.run_ranks(probes.launch_rank, 4, 2, None, per_rank=values)
    assert_ranks_met(reports, 4, "init_from_env")
    for rank, report in enumerate(reports):
        local = rank % 2
        assert report["device"] == f"cuda:{local}", (
            f"process with RANK={rank}, LOCAL_RANK={local} on a node of 2 GPUs must use "
            f"cuda:{local}, got {report['device']} (RANK counts over every node)")
        assert report.get("current_cuda_device") == local, (
            f"RANK={rank}: cuda:{local} must be made the current CUDA device")
        assert report.get("backend") == "nccl", (
            f"with a GPU for every local rank the backend is nccl, got {report.get('backend')}")
        assert (report.get("rank"), report.get("world_size")) == (rank, 4), (
            f"process {rank} must be rank {rank} of 4, got {report.get('rank')} of "
            f"{report.get('world_size')}")
        assert report.get("all_reduce") == sum(values), (
            "an all_reduce over the 4 processes did not add up every rank's value")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_launch_cpu(student):
    """init_from_env: without GPUs, gloo on the CPU from the environment's MASTER_ADDR/PORT"""
    values = values_for(2)
    reports = student.without_gpus().run_ranks(probes.launch_rank, 2, 2, None, per_rank=values)
    assert_ranks_met(reports, 2, "init_from_env")
    for rank, report in enumerate(reports):
        assert report.get("rank") == rank, f"process {rank} must be rank {rank}: {report}"
        assert report["device"] == "cpu", f"without CUDA the device is the CPU, got {report}"
        assert report.get("backend") == "gloo", f"without CUDA the backend is gloo: {report}"
        assert report.get("all_reduce") == sum(values), (
            "an all_reduce over the 2 processes did not add up every rank's value")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(90)
def test_launch_errors(student):
    """init_from_env: a missing or inconsistent variable is a ValueError naming it"""
    rng = drawn()
    world = rng.randint(2, 8)
    # MASTER_PORT becomes the grader's rendezvous store's port in the scenario.
    good = {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_RANK": 0, "MASTER_ADDR": "127.0.0.1"}
    base = {"RANK": world - 1, "WORLD_SIZE": world, "LOCAL_RANK": 0,
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": None}
    missing = rng.choice(probes.LAUNCH_VARIABLES)
    cases = [
        ({k: v for k, v in base.items() if k != missing}, missing, f"{missing} is not set"),
        ({**base, "LOCAL_RANK": world + rng.randint(0, 3)}, "LOCAL_RANK",
         "LOCAL_RANK >= WORLD_SIZE"),
        ({**base, "RANK": world + rng.randint(0, 3)}, "RANK", "RANK >= WORLD_SIZE"),
        ({**base, "WORLD_SIZE": "two"}, "WORLD_SIZE", "WORLD_SIZE is not an integer"),
    ]
    reports = student.without_gpus().run_ranks(probes.launch_errors, 1, [c[0] for c in cases],
                                               good)
    (report,) = reports
    error_of(report["good"], "init_from_env with a valid one-process environment")
    assert_ranks_met(reports, 1, "init_from_env with a valid one-process environment")
    assert report["good"]["value"] == "cpu" and report.get("world_size") == 1, (
        f"a valid one-process environment must give a group of 1 and the CPU: {report['good']}")
    for (_, name, why), result in zip(cases, report["cases"], strict=True):
        error = result.get("error")
        assert error is not None and error["type"] == "ValueError", (
            f"when {why}, init_from_env must raise ValueError, got {result}")
        assert name in error["message"], (
            f"when {why}, the message must name {name}: {error['message'][:200]!r}")
        assert not result["initialized_after"], f"when {why}, no process group may be made"


# ----------------------------------------------------------------------------- train_epochs


def expected_epochs(model, data, ranks, rank, batch_size, seed, lr, epochs, start):
    model = copy.deepcopy(model)
    sampler = DistributedSampler(data, num_replicas=ranks, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    means = []
    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = probes.mse(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        means.append(sum(losses) / len(losses))
    return means, model.state_dict()


def epochs_case(start: int, epochs: int):
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    n = rng.randint(20, 40)
    data = probes.Pairs(torch.randn(n, 4), torch.randn(n, 1))
    model = probes.PlainMLP()
    args = (rng.choice([2, 3]), None, rng.choice([2, 3, 4]), rng.randrange(1 << 20),
            rng.choice([0.05, 0.1, 0.2]), epochs, start)
    ranks = args[0]
    args = (ranks, rng.randrange(ranks), *args[2:])
    return model, data, args


def check_epochs(report, model, data, args) -> None:
    error_of(report, "train_epochs")
    means, state = expected_epochs(model, data, *args)
    got = report["value"]
    assert isinstance(got, list) and len(got) == len(means), (
        f"train_epochs must return one mean loss per epoch run ({len(means)}), got {got!r}")
    for epoch, (value, want) in enumerate(zip(got, means, strict=True), start=args[-1]):
        assert type(value) is float and abs(value - want) <= 1e-4 * max(1, abs(want)), (
            f"epoch {epoch}: mean loss {value!r}, expected {want:.6f}")
    for name, value in state.items():
        assert close(report["state"][name], value), (
            f"after training, {name!r} differs from training with the sampler's shuffle of "
            "each epoch (is set_epoch called before every epoch?)")
    assert report["epochs_set"] == list(range(args[-1], args[-2])), (
        f"the sampler's set_epoch must be called with each epoch number, got "
        f"{report['epochs_set']}")


@pytest.mark.weight(3)
def test_epochs_shuffle(student):
    """train_epochs: a new shuffle each epoch through set_epoch, losses and weights as expected"""
    model, data, args = epochs_case(0, drawn().randint(2, 3))
    report = student.probe(probes.epochs_run, model, data, *args)
    check_epochs(report, model, data, args)


@pytest.mark.weight(1)
def test_epochs_resume(student):
    """train_epochs: start_epoch resumes with that epoch's shuffle"""
    start = drawn().randint(1, 3)
    model, data, args = epochs_case(start, start + 2)
    report = student.probe(probes.epochs_run, model, data, *args)
    check_epochs(report, model, data, args)


# ----------------------------------------------------------------------------- accumulate_step


def micro_batches(k: int, size: int):
    return [(torch.randn(size, 4), torch.randn(size, 1)) for _ in range(k)]


def expected_accumulation(model, per_rank: list[list], lr: float):
    """The gradient of the mean loss over every rank's micro-batches, one SGD step."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    count = sum(len(m) for m in per_rank)
    losses = []
    for micro in per_rank:
        total = 0.0
        for x, y in micro:
            loss = probes.mse(model(x), y)
            (loss / count).backward()
            total += loss.item()
        losses.append(total / len(micro))
    optimizer.step()
    return model.state_dict(), losses


@pytest.mark.weight(3)
@pytest.mark.timeout_s(150)
def test_accumulate_ddp(student):
    """accumulate_step: under DDP, one all-reduce per step and the gradients of the large batch"""
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    k, lr = rng.randint(2, 4), rng.choice([0.1, 0.3])
    model = probes.PlainMLP()
    per_rank = [micro_batches(k, rng.randint(2, 4)) for _ in range(2)]
    state, losses = expected_accumulation(model, per_rank, lr)
    reports = student.run_ranks(probes.accumulate_ranks, 2, model, lr, per_rank=per_rank)
    assert_ranks_met(reports, 2, "the grader's own process group")
    for rank, report in enumerate(reports):
        error_of(report, f"accumulate_step on rank {rank}")
        value = report["value"]
        assert type(value) is float and abs(value - losses[rank]) <= 1e-4 * max(1, losses[rank]), (
            f"rank {rank}: returned {value!r}, expected the mean micro-batch loss "
            f"{losses[rank]:.6f}")
        assert report["hook_calls"] == 1, (
            f"rank {rank}: gradients were all-reduced {report['hook_calls']} times for {k} "
            "micro-batches; DDP must synchronise once, on the last micro-batch")
        for name, want in state.items():
            assert close(report["state"][name], want), (
                f"rank {rank}: after the step {name!r} differs from one step on the mean "
                f"loss over all {2 * k} micro-batches of both ranks")


@pytest.mark.weight(1)
def test_accumulate_plain(student):
    """accumulate_step: an unwrapped model accumulates the same way; no micro-batch is an error"""
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    k, lr = rng.randint(2, 4), rng.choice([0.1, 0.3])
    model = probes.PlainMLP()
    micro = micro_batches(k, rng.randint(2, 5))
    state, losses = expected_accumulation(model, [micro], lr)
    report = student.probe(probes.accumulate_plain, model, lr, micro)
    error_of(report, "accumulate_step on a model without DDP")
    assert type(report["value"]) is float and abs(report["value"] - losses[0]) <= 1e-4, (
        f"returned {report['value']!r}, expected the mean micro-batch loss {losses[0]:.6f}")
    for name, want in state.items():
        assert close(report["state"][name], want), (
            f"{name!r} differs from one step on the mean loss over the {k} micro-batches")
    error = report["empty"].get("error")
    assert error is not None and error["type"] == "ValueError", (
        f"an empty list of micro-batches must raise ValueError, got {report['empty']}")
