"""Part D: setup_ddp, wrap_ddp, make_distributed_loader, ddp_train_step, cleanup_ddp.

Multi-process checks run real gloo ranks on CPU (`student.run_ranks`) and compare them with
single-process full-batch training computed here.
"""

import copy

import pytest
import torch

from autograder.testing import remote_device

import probes

ALL = ["setup_ddp", "wrap_ddp", "make_distributed_loader", "ddp_train_step", "cleanup_ddp"]
LR, GLOBAL_BATCH, EPOCHS = 0.1, 8, 2


def gpu_count(student) -> int:
    """GPUs the sandbox sees (what the student's code sees, whatever this process sees)."""
    return student.probe(probes.cuda_device_count)


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol, rtol=1e-4)


def expected_training(model, data, world_size: int, global_batch: int = GLOBAL_BATCH,
                      lr: float = LR, epochs: int = EPOCHS):
    """One process, full global batches, in the order DistributedSampler(shuffle=False) gives.

    Rank r's step s holds samples s*G + r, s*G + r + W, ...: together, the contiguous block
    [s*G, (s+1)*G). DDP averages the ranks' gradients, which equals the full batch's gradient.
    Returns the final state and each rank's expected losses.
    """
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    rank_losses = [[] for _ in range(world_size)]
    for _ in range(epochs):
        for start in range(0, len(data), global_batch):
            with torch.no_grad():
                for rank in range(world_size):
                    idx = list(range(start + rank, start + global_batch, world_size))
                    rank_losses[rank].append(probes.mse(model(data.x[idx]), data.y[idx]).item())
            block = slice(start, start + global_batch)
            optimizer.zero_grad()
            probes.mse(model(data.x[block]), data.y[block]).backward()
            optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, rank_losses


def check_training(reports, expected_state, expected_losses, what: str) -> None:
    for rank, report in enumerate(reports):
        losses = report["losses"]
        assert all(type(v) is float for v in losses), (
            f"rank {rank}: every training step must return the loss as a Python float")
        assert len(losses) == len(expected_losses[rank]), (
            f"rank {rank} ran {len(losses)} steps; {len(expected_losses[rank])} were expected")
        for step, (got, want) in enumerate(zip(losses, expected_losses[rank], strict=True)):
            assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), (
                f"rank {rank}, step {step}: loss {got:.6f}, expected {want:.6f} ({what})")
        for name, value in expected_state.items():
            assert close(report["state"][name], value), (
                f"rank {rank}: after training, {name!r} differs from single-process training "
                f"on the full global batch ({what})")


def training_case(seed: int = 5):
    torch.manual_seed(seed)
    return probes.PlainMLP(), probes.RegressionData(32, seed=seed)


def flat(batches) -> list[int]:
    return [int(i) for batch in batches for i in batch.tolist()]


# ----------------------------------------------------------------------------- setup_ddp


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_setup_single(student):
    """setup_ddp: initialises the default group and returns this rank's device"""
    gpus = gpu_count(student)
    (report,) = student.run_ranks(probes.setup_ranks, 1, {})
    backend, device = ("nccl", "cuda:0") if gpus >= 1 else ("gloo", "cpu")
    assert report["device_type"] == "device", "setup_ddp must return a torch.device"
    assert report["device"] == device, f"expected the device {device}, got {report['device']}"
    assert report["initialized"], "the default process group must be initialised"
    assert report["backend"] == backend, (
        f"with {gpus} GPU(s) and 1 rank the backend must be {backend}, "
        f"got {report['backend']}")
    assert report["rank"] == 0 and report["world_size"] == 1, "rank 0 of a world of 1 expected"
    if report["store_port"] is not None:
        assert report["store_port"] == report["port"], "the ranks must meet at master_port"
    if device.startswith("cuda"):
        assert report["current_cuda_device"] == 0, "the rank's GPU must be the current device"


@pytest.mark.points(2)
@pytest.mark.timeout_s(120)
def test_setup_two_ranks(student):
    """setup_ddp: two ranks meet at master_addr:master_port"""
    for kwargs in ({"backend": "gloo"}, {"master_addr": "127.0.0.1", "backend": "gloo"}):
        reports = student.run_ranks(probes.setup_ranks, 2, kwargs)
        for rank, report in enumerate(reports):
            assert report["rank"] == rank and report["world_size"] == 2, (
                f"process {rank} must be rank {rank} of a world of 2, got rank "
                f"{report['rank']} of {report['world_size']}")
            assert report["backend"] == "gloo", "backend='gloo' must be honoured"
            assert report["device"] == "cpu", "under gloo the rank's device is the CPU"
            assert report["all_reduce"] == 3.0, (
                "an all_reduce over both ranks must see both: are they in one group?")
            if report["store_port"] is not None:
                assert report["store_port"] == report["port"], (
                    "the ranks must meet at the given master_port")
    gpus = gpu_count(student)
    if gpus < 2:  # the automatic choice with fewer GPUs than ranks is gloo
        reports = student.run_ranks(probes.setup_ranks, 2, {})
        assert [r["backend"] for r in reports] == ["gloo", "gloo"], (
            f"with {gpus} GPU(s) for 2 ranks the backend must be gloo")
        assert [r["device"] for r in reports] == ["cpu", "cpu"], (
            "without a GPU per rank, every rank's device is the CPU")


@pytest.mark.points(1)
def test_setup_invalid(student):
    """setup_ddp: raises ValueError for an impossible rank or world size"""
    cases = [(-1, 2), (0, 0), (0, -3), (1, 1), (2, 2), (5, 3)]
    reports = student.probe(probes.setup_invalid, cases)
    for (rank, world_size), report in zip(cases, reports, strict=True):
        error = report.get("error")
        assert error is not None and "ValueError" in error["types"], (
            f"setup_ddp(rank={rank}, world_size={world_size}) must raise ValueError "
            f"before starting any rendezvous (got "
            f"{error['type'] + ': ' + error['message'] if error else 'no error'})")
        assert not report["initialized_after"], "a rejected call must not leave a group behind"


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_setup_twice(student):
    """setup_ddp: raises RuntimeError when a group already exists"""
    (report,) = student.run_ranks(probes.setup_twice, 1)
    first = report["first"].get("error")
    assert first is None, (
        f"the first setup_ddp call failed: {first and first['type']}: {first and first['message']}")
    error = report["second"].get("error")
    assert error is not None and "RuntimeError" in error["types"], (
        "a second setup_ddp while the default group exists must raise RuntimeError (got "
        f"{error['type'] + ': ' + error['message'] if error else 'no error'})")
    assert len(error["message"]) >= 20, "the RuntimeError needs a clear message"
    assert report["initialized"] and report.get("all_reduce") == 1.0, (
        "the refused second call must leave the first group working")


@pytest.mark.points(1)
@pytest.mark.gpu
@pytest.mark.timeout_s(180)
def test_setup_nccl(student):
    """setup_ddp: picks nccl and pins cuda:rank when every rank has a GPU"""
    count = student.probe(probes.cuda_device_count)
    if count < 1:
        pytest.skip("the sandbox sees no GPU")
    world_size = min(count, 2)
    reports = student.run_ranks(probes.setup_ranks, world_size, {})
    for rank, report in enumerate(reports):
        assert report["backend"] == "nccl", (
            f"with {count} GPU(s) for {world_size} rank(s) the backend must be nccl")
        assert report["device"] == f"cuda:{rank}", f"rank {rank} must get cuda:{rank}"
        assert report["current_cuda_device"] == rank, (
            f"rank {rank} must make cuda:{rank} its current device")
        assert report["all_reduce"] == sum(range(1, world_size + 1)), "the ranks must meet"


# ----------------------------------------------------------------------------- wrap_ddp


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_wrap_ddp_cpu(student):
    """wrap_ddp: wraps in DistributedDataParallel without device_ids on CPU"""
    torch.manual_seed(0)
    model = probes.PlainMLP()
    (report,) = student.run_ranks(probes.wrap_ddp_report, 1, model, None)
    assert "error" not in report, (
        f"wrap_ddp raised {report.get('error', {}).get('type')} on CPU: "
        f"{report.get('error', {}).get('message')}")
    assert report["is_ddp"], "wrap_ddp must return a DistributedDataParallel"
    wrapped = report["value"]
    assert wrapped.attributes.get("device_ids") is None, (
        "on CPU, DistributedDataParallel takes no device_ids")
    state = {k.removeprefix("module."): v for k, v in wrapped.parameters.items()}
    for name, value in model.state_dict().items():
        assert torch.equal(state[name], value), "the wrapped model must keep its weights"
        assert remote_device(state[name]) == "cpu", "the model must be on the given device"


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_wrap_ddp_syncbn_cpu(student):
    """wrap_ddp: raises ValueError for sync_batchnorm=True on CPU"""
    (report,) = student.run_ranks(probes.wrap_ddp_report, 1, probes.TinyMLP(), True)
    error = report.get("error")
    assert error is not None and "ValueError" in error["types"], (
        "SyncBatchNorm cannot train on CPU: wrap_ddp(..., sync_batchnorm=True) with a CPU "
        "device must raise ValueError (got "
        f"{error['type'] + ': ' + error['message'] if error else 'no error'})")


@pytest.mark.points(2)
@pytest.mark.timeout_s(150)
def test_wrap_ddp_trains(student):
    """wrap_ddp: two ranks keep identical weights, as full-batch training would"""
    model, data = training_case(7)
    state, losses = expected_training(model, data, 2)
    reports = student.run_ranks(probes.ddp_train, 2, model, data, GLOBAL_BATCH, LR, EPOCHS,
                                ["wrap_ddp"])
    check_training(reports, state, losses, "gradients must be averaged across ranks by DDP")


@pytest.mark.points(1)
@pytest.mark.gpu
@pytest.mark.timeout_s(180)
def test_wrap_ddp_cuda(student):
    """wrap_ddp: on CUDA wraps with device_ids=[index] and converts BatchNorm when asked"""
    if student.probe(probes.cuda_device_count) < 1:
        pytest.skip("the sandbox sees no GPU")
    torch.manual_seed(3)
    model = probes.TinyMLP(4, 6, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    (report,) = student.run_ranks(probes.ddp_gpu_ranks, 1, model, x, y, 0.1, 1, True)
    assert report["device_ids"] == [0], "on cuda:0 the wrapper must get device_ids=[0]"
    assert report["param_devices"] == ["cuda:0"], "the model must be moved to cuda:0"
    assert report["norm_types"] == ["SyncBatchNorm"], (
        "sync_batchnorm=True must convert the BatchNorm layers to SyncBatchNorm")


# ----------------------------------------------------------------------------- loaders


@pytest.mark.points(1)
def test_loader_batch_size(student):
    """make_distributed_loader: gives each rank global_batch_size // world_size samples"""
    for world_size, global_batch in [(2, 8), (4, 8), (3, 3)]:
        report = student.probe(probes.loader_report, probes.IndexData(24), global_batch,
                               world_size, {"shuffle": False})
        per_rank = global_batch // world_size
        for rank, row in enumerate(report["ranks"]):
            sizes = [len(b) for b in row["epochs"][0]]
            assert sizes and all(s == per_rank for s in sizes), (
                f"with a global batch of {global_batch} over {world_size} ranks, each rank's "
                f"batches must hold {per_rank} samples (rank {rank} got {sizes})")
    assert not report["initialized"], "building loaders must not need a process group"


@pytest.mark.points(1)
def test_loader_indivisible(student):
    """make_distributed_loader: raises ValueError when the world size does not divide the batch"""
    for global_batch, world_size in [(6, 4), (5, 2), (1, 2)]:
        report = student.probe(probes.loader_error, probes.IndexData(16), global_batch, 0,
                               world_size)
        error = report.get("error")
        assert error is not None and "ValueError" in error["types"], (
            f"a global batch of {global_batch} cannot be split over {world_size} ranks: "
            "expected ValueError (got "
            f"{error['type'] + ': ' + error['message'] if error else 'a loader'})")


@pytest.mark.points(2)
def test_loader_disjoint(student):
    """make_distributed_loader: ranks get disjoint shares that cover the dataset"""
    cases = [(32, 8, 4, {"shuffle": False}), (32, 8, 2, {"shuffle": True, "seed": 3}),
             (30, 4, 4, {"shuffle": True, "seed": 1})]
    for n, global_batch, world_size, kwargs in cases:
        report = student.probe(probes.loader_report, probes.IndexData(n), global_batch,
                               world_size, kwargs)
        shares = [flat(row["epochs"][0]) for row in report["ranks"]]
        everything = [i for share in shares for i in share]
        assert set(everything) == set(range(n)), (
            f"together the {world_size} ranks must see every sample of the dataset")
        assert len({len(s) for s in shares}) == 1, "every rank must get an equal share"
        if n % world_size == 0:
            assert len(everything) == n, (
                f"with {n} samples over {world_size} ranks ({kwargs}), no sample may be seen by "
                "two ranks: use a DistributedSampler with the rank and world size")
        else:  # padding repeats only as many samples as needed for equal shares
            assert len(everything) == -(-n // world_size) * world_size, (
                "shares may only be padded up to an equal size")


@pytest.mark.points(1)
def test_loader_shuffle_seed(student):
    """make_distributed_loader: shuffles with the sampler, the given seed and set_epoch"""
    data = probes.IndexData(40)
    first = student.probe(probes.loader_report, data, 4, 2, {"shuffle": True, "seed": 5}, 2)
    again = student.probe(probes.loader_report, data, 4, 2, {"shuffle": True, "seed": 5}, 2)
    other = student.probe(probes.loader_report, data, 4, 2, {"shuffle": True, "seed": 6}, 2)
    plain = student.probe(probes.loader_report, data, 4, 2, {"shuffle": False})
    for row in first["ranks"]:
        assert "DistributedSampler" in row["sampler_bases"], (
            "the loader's sampler must be a DistributedSampler")
    order = [flat(row["epochs"][0]) for row in first["ranks"]]
    assert order == [flat(row["epochs"][0]) for row in again["ranks"]], (
        "the same seed must give the same order")
    assert order != [flat(row["epochs"][0]) for row in other["ranks"]], (
        "a different seed must give a different order")
    assert order != [flat(row["epochs"][0]) for row in plain["ranks"]], (
        "shuffle=True must shuffle")
    assert order != [flat(row["epochs"][1]) for row in first["ranks"]], (
        "after loader.sampler.set_epoch(1) the order must change")
    assert [flat(row["epochs"][0]) for row in plain["ranks"]] == [
        list(range(r, 40, 2)) for r in range(2)], (
        "with shuffle=False, DistributedSampler gives rank r the samples r, r + world_size, ...")


@pytest.mark.points(1)
def test_loader_drop_last(student):
    """make_distributed_loader: drop_last drops the uneven tail instead of padding"""
    data = probes.IndexData(9)
    dropped = student.probe(probes.loader_report, data, 2, 2, {"drop_last": True,
                                                              "shuffle": False})
    padded = student.probe(probes.loader_report, data, 2, 2, {"drop_last": False,
                                                             "shuffle": False})
    shares = [flat(row["epochs"][0]) for row in dropped["ranks"]]
    assert [len(s) for s in shares] == [4, 4] and not set(shares[0]) & set(shares[1]), (
        "with drop_last=True, 9 samples over 2 ranks give 4 distinct samples each")
    shares = [flat(row["epochs"][0]) for row in padded["ranks"]]
    assert [len(s) for s in shares] == [5, 5] and set(shares[0]) | set(shares[1]) == set(
        range(9)), "with drop_last=False, 9 samples over 2 ranks are padded to 5 each"


# ----------------------------------------------------------------------------- train step


def plain_steps(model, batches, lr: float):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = probes.mse(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return losses, state, grads


@pytest.mark.points(1)
def test_train_step_single(student):
    """ddp_train_step: one step returns the loss as a float and updates the weights"""
    torch.manual_seed(2)
    model = probes.PlainMLP()
    batch = (torch.randn(8, 4), torch.randn(8, 1))
    losses, state, _ = plain_steps(model, [batch], 0.05)
    report = student.probe(probes.train_step_report, model, [batch], 0.05)
    got = report["losses"][0]
    assert type(got) is float, "ddp_train_step must return the loss as a Python float"
    assert abs(got - losses[0]) < 1e-5, (
        f"the returned loss must be the batch's loss before the step ({losses[0]:.5f}), "
        f"got {got:.5f}")
    for name, value in state.items():
        assert close(report["state"][name], value), (
            f"after one step {name!r} must be updated by the optimizer")


@pytest.mark.points(1)
def test_train_step_zero_grad(student):
    """ddp_train_step: zeroes the gradients before every backward pass"""
    torch.manual_seed(4)
    model = probes.PlainMLP()
    batches = [(torch.randn(6, 4), torch.randn(6, 1)) for _ in range(3)]
    losses, state, grads = plain_steps(model, batches, 0.05)
    report = student.probe(probes.train_step_report, model, batches, 0.05)
    for name, value in grads.items():
        assert close(report["grads"][name], value), (
            "after the last step each gradient must be that step's gradient alone: zero the "
            "gradients before backward, or they pile up across steps")
    for name, value in state.items():
        assert close(report["state"][name], value), (
            f"after 3 steps {name!r} differs from three plain SGD steps")
    assert all(abs(a - b) < 1e-5 for a, b in zip(report["losses"], losses, strict=True)), (
        "every step must return that step's loss")


@pytest.mark.points(2)
@pytest.mark.timeout_s(150)
def test_train_step_two_ranks(student):
    """ddp_train_step: two gloo ranks train like one process on the full batch"""
    model, data = training_case(9)
    state, losses = expected_training(model, data, 2)
    reports = student.run_ranks(probes.ddp_train, 2, model, data, GLOBAL_BATCH, LR, EPOCHS,
                                ["ddp_train_step"])
    check_training(reports, state, losses, "each rank's step on its own share")


@pytest.mark.points(1)
@pytest.mark.gpu
@pytest.mark.timeout_s(120)
def test_train_step_moves_batch(student):
    """ddp_train_step: moves a CPU batch to the model's GPU"""
    if student.probe(probes.cuda_device_count) < 1:
        pytest.skip("the sandbox sees no GPU")
    torch.manual_seed(6)
    model = probes.PlainMLP()
    batch = (torch.randn(8, 4), torch.randn(8, 1))
    losses, state, _ = plain_steps(model, [batch], 0.05)
    report = student.probe(probes.train_step_on_gpu, model, batch, 0.05)
    assert type(report["loss"]) is float, "the loss must come back as a Python float"
    assert abs(report["loss"] - losses[0]) < 1e-4, "the loss on the GPU must match the CPU's"
    for name, value in state.items():
        assert close(report["state"][name], value, atol=1e-4), f"{name!r} must be updated"


# ----------------------------------------------------------------------------- cleanup


@pytest.mark.points(1)
def test_cleanup_without_group(student):
    """cleanup_ddp: does nothing when no process group exists"""
    report = student.probe(probes.cleanup_without_group)
    assert "error" not in report, (
        "cleanup_ddp without a process group must do nothing, but it raised "
        f"{report['error']['type']}: {report['error']['message']}")
    assert report["value"] is None, "cleanup_ddp returns None"


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_cleanup_two_ranks(student):
    """cleanup_ddp: destroys the default group in every rank"""
    reports = student.run_ranks(probes.cleanup_ranks, 2)
    for rank, report in enumerate(reports):
        assert "error" not in report["cleanup"], (
            f"rank {rank}: cleanup_ddp raised {report['cleanup']['error']['type']}: "
            f"{report['cleanup']['error']['message']}")
        assert report["initialized_after"] is False, (
            f"rank {rank}: after cleanup_ddp the default process group must be gone")


@pytest.mark.points(1)
@pytest.mark.timeout_s(120)
def test_cleanup_repeat(student):
    """cleanup_ddp: can be called twice, and a new group can be made afterwards"""
    (report,) = student.run_ranks(probes.cleanup_ranks, 1)
    assert "error" not in report["cleanup"], (
        f"cleanup_ddp raised {report['cleanup']['error']['type']}: "
        f"{report['cleanup']['error']['message']}")
    assert report["initialized_after"] is False, "cleanup_ddp must destroy the group"
    assert "error" not in report["second_cleanup"], (
        "a second cleanup_ddp (nothing left to destroy) must do nothing, but it raised "
        f"{report['second_cleanup']['error']['type']}")
    assert "error" not in report.get("reinit", {}), (
        "after cleanup_ddp a new process group must be possible")
