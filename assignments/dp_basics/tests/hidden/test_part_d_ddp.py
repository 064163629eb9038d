"""Part D: setup_ddp, wrap_ddp, make_distributed_loader, ddp_train_step, cleanup_ddp.

Multi-process checks run real gloo ranks on CPU (`student.run_ranks`) and compare them with
single-process full-batch training computed here.
"""

import copy

import pytest
import torch

from autograder.testing import assert_ranks_met, drawn, error_text

import probes

LR, GLOBAL_BATCH, EPOCHS = 0.1, 8, 2
BASE = drawn().randrange(1 << 40)  # drawn for each grading; tests add their own offsets


def values_for(world_size: int) -> list[float]:
    """One value per rank, drawn here: only ranks that really meet can report their sum."""
    rng = drawn()
    # Distinct: with equal values, each rank's own value times the world size is the sum.
    return [float(v) for v in rng.sample(range(1, 1001), world_size)]


def rank_batches(data, world_size: int, global_batch: int = GLOBAL_BATCH,
                 epochs: int = EPOCHS) -> list[list[tuple]]:
    """Each rank's batches, in the order DistributedSampler(shuffle=False) gives them."""
    batches = [[] for _ in range(world_size)]
    for _ in range(epochs):
        for start in range(0, len(data), global_batch):
            for rank in range(world_size):
                idx = list(range(start + rank, start + global_batch, world_size))
                batches[rank].append((data.x[idx], data.y[idx]))
    return batches


def averaged_gradients(model, batches: list[tuple]) -> dict:
    """What DDP leaves in every rank: the mean of the ranks' gradients."""
    total: dict = {}
    for x, y in batches:
        replica = copy.deepcopy(model)
        probes.mse(replica(x), y).backward()
        for name, p in replica.named_parameters():
            total[name] = total.get(name, 0) + p.grad / len(batches)
    return total


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


def sampler_orders(n: int, world_size: int, epochs: int = 1, **kwargs) -> list[list[list[int]]]:
    """Each rank's samples, per epoch, as DistributedSampler (with set_epoch) gives them."""
    from torch.utils.data import DistributedSampler

    orders = []
    for rank in range(world_size):
        sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, **kwargs)
        per_epoch = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            per_epoch.append(list(sampler))
        orders.append(per_epoch)
    return orders


def flat(batches) -> list[int]:
    return [int(i) for batch in batches for i in batch.tolist()]


# ----------------------------------------------------------------------------- setup_ddp


def assert_met(reports, values: list[float], what: str, store: int = 0) -> None:
    """Every rank made a real process group at the grader's store, and an all_reduce there
    added up every rank's own value."""
    assert_ranks_met(reports, len(values), what, store)
    for rank, report in enumerate(reports):
        assert report.get("all_reduce") == sum(values), (
            f"rank {rank}: an all_reduce over the {len(values)} ranks did not add up every "
            f"rank's value ({what}): are they in one group?")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_setup_two_ranks(student):
    """setup_ddp: two ranks meet at master_addr:master_port"""
    # Loopback addresses other than the default reach the same machine; the store must be
    # reached at the one given.
    other = f"127.0.{drawn().randint(0, 255)}.{drawn().randint(2, 254)}"
    for kwargs in ({"backend": "gloo"}, {"master_addr": other, "backend": "gloo"}, {}):
        values = values_for(2)
        view = student if kwargs else student.without_gpus()  # the CPU branch, on any grader
        reports = view.run_ranks(probes.setup_ranks, 2, kwargs, per_rank=values,
                                 store_host=kwargs.get("master_addr", "127.0.0.1"))
        for rank, report in enumerate(reports):
            assert report["rank"] == rank and report["world_size"] == 2, (
                f"process {rank} must be rank {rank} of a world of 2, got rank "
                f"{report['rank']} of {report['world_size']}")
            assert report["backend"] == "gloo", (
                "backend='gloo' must be honoured" if kwargs else
                "without a GPU per rank the backend must be gloo")
            assert report["device_type"] == "device" and report["device"] == "cpu", (
                f"under gloo setup_ddp must return torch.device('cpu'), got {report['device']}")
            if report["store_port"] is not None:
                assert report["store_port"] == report["port"], (
                    "the ranks must meet at the given master_port")
            if report["store_host"] is not None:
                assert report["store_host"] == kwargs.get("master_addr", "127.0.0.1"), (
                    f"the ranks must meet at master_addr ({kwargs.get('master_addr')!r} was "
                    f"given, they met at {report['store_host']!r})" if "master_addr" in kwargs
                    else "without master_addr the ranks must meet at 127.0.0.1")
        assert_met(reports, values, f"setup_ddp(..., {kwargs})")


@pytest.mark.timeout_s(150)
def test_setup_gpu_per_rank(student):
    """setup_ddp: picks nccl and pins cuda:rank when every rank has a GPU"""
    gpus = student.simulated()
    # Two ranks at least: rank 0's GPU is the current device even when nothing was pinned.
    world_size = drawn().randint(2, min(gpus.gpus, 3))
    values = values_for(world_size)
    reports = gpus.run_ranks(probes.setup_ranks, world_size, {}, per_rank=values)
    for rank, report in enumerate(reports):
        assert report["backend"] == "nccl", (
            f"with {gpus.gpus} GPUs for {world_size} rank(s) the backend must be nccl, "
            f"got {report['backend']}")
        assert report["device"] == f"cuda:{rank}", (
            f"rank {rank} must get its own GPU, cuda:{rank}; got {report['device']}")
        # Pinned when setup_ddp returns, before init_process_group or after it (as PyTorch's
        # own DDP tutorials do): NCCL takes the current device at the first collective.
        assert report["current_cuda_device"] == rank, (
            f"rank {rank} must make cuda:{rank} its current device (torch.cuda.set_device)")
    assert_met(reports, values, "nccl")


@pytest.mark.timeout_s(150)
def test_setup_fewer_gpus_than_ranks(student):
    """setup_ddp: falls back to gloo on the CPU when there are fewer GPUs than ranks"""
    gpus = student.simulated(2)
    values = values_for(3)
    reports = gpus.run_ranks(probes.setup_ranks, 3, {}, per_rank=values)
    for rank, report in enumerate(reports):
        assert report["backend"] == "gloo", (
            f"with 2 GPUs for 3 ranks not every rank has a GPU: the backend must be gloo, got "
            f"{report['backend']}")
        assert report["device"] == "cpu", (
            f"rank {rank}: under gloo the rank's device is the CPU, got {report['device']}")
    assert_met(reports, values, "gloo with fewer GPUs than ranks")


@pytest.mark.timeout_s(150)
def test_setup_invalid(student):
    """setup_ddp: raises ValueError for an impossible rank or world size"""
    cases = [(-1, 2), (0, 0), (0, -3), (1, 1), (2, 2), (5, 3)]
    values = values_for(2)
    reports = student.run_ranks(probes.setup_checks, 2, cases, per_rank=values)
    for report in reports:
        for (rank, world_size), attempt in zip(cases, report["rejected"], strict=False):
            error = attempt.get("error")
            assert error is not None and "ValueError" in error["types"], (
                f"setup_ddp(rank={rank}, world_size={world_size}) must raise ValueError "
                f"before starting any rendezvous (got "
                f"{error_text(error)})")
            assert not attempt["initialized_after"], (
                "a rejected call must not leave a group behind")
    # Refusing is worth something only from a function that also sets up valid ranks.
    assert_met(reports, values, "a valid setup_ddp after the refused ones")


@pytest.mark.timeout_s(150)
def test_setup_twice(student):
    """setup_ddp: raises RuntimeError when a group already exists"""
    values = values_for(2)
    reports = student.run_ranks(probes.setup_twice, 2, per_rank=values)
    for report in reports:
        first = report["first"].get("error")
        assert first is None, (
            f"the first setup_ddp call failed: {error_text(first)}")
        error = report["second"].get("error")
        assert error is not None and "RuntimeError" in error["types"], (
            "a second setup_ddp while the default group exists must raise RuntimeError (got "
            f"{error_text(error)})")
        assert len(error["message"]) >= 20, "the RuntimeError needs a clear message"
    assert_met(reports, values, "the refused second call must leave the first group working")


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(180)
def test_setup_nccl(student):
    """setup_ddp: picks nccl and pins cuda:rank on real GPUs"""
    world_size = min(student.gpus, 2)
    values = values_for(world_size)
    reports = student.run_ranks(probes.setup_ranks, world_size, {}, per_rank=values)
    for rank, report in enumerate(reports):
        assert report["backend"] == "nccl", (
            f"with {student.gpus} GPU(s) for {world_size} rank(s) the backend must be nccl")
        assert report["device"] == f"cuda:{rank}", f"rank {rank} must get cuda:{rank}"
        assert report["current_cuda_device"] == rank, (
            f"rank {rank} must make cuda:{rank} its current device")
    assert_met(reports, values, "nccl on real GPUs")


# ----------------------------------------------------------------------------- wrap_ddp


def ddp_case(world_size: int):
    """A model and each rank's own batch (equal sizes), drawn for this grading."""
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 40))
    model = probes.PlainMLP()
    size = rng.randint(2, 6)
    batches = [(torch.randn(size, 4), torch.randn(size, 1)) for _ in range(world_size)]
    return model, batches


def assert_averaged(reports, model, batches, what: str) -> None:
    assert_ranks_met(reports, len(batches), f"the grader's own process group ({what})")
    expected = averaged_gradients(model, batches)
    for rank, report in enumerate(reports):
        for name, value in expected.items():
            got = report["grads"].get(name)
            assert got is not None and close(got, value), (
                f"rank {rank}: after backward, the gradient of {name!r} must be the average "
                f"of every rank's gradient ({what}): DistributedDataParallel does that")


def assert_wrapped_ddp(report: dict, rank: int) -> None:
    error = report.get("error")
    assert error is None, (
        f"rank {rank}: wrap_ddp raised {error_text(error)}")
    assert report["type"] == "DistributedDataParallel", (
        f"wrap_ddp must return a DistributedDataParallel, got a {report['type']}")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_wrap_ddp_averages(student):
    """wrap_ddp: on CPU wraps in DDP without device_ids, which averages the ranks' gradients"""
    world_size = drawn().randint(2, 3)
    model, batches = ddp_case(world_size)
    reports = student.run_ranks(probes.ddp_gradients, world_size, model, None,
                                per_rank=[("cpu", batch) for batch in batches])
    for rank, report in enumerate(reports):
        assert_wrapped_ddp(report, rank)
        assert report["device_ids"] is None, (
            "on CPU, DistributedDataParallel takes no device_ids")
        assert report["param_devices"] == ["cpu"], "the model must be on the given device"
    assert_averaged(reports, model, batches, "on CPU")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_wrap_ddp_gpu(student):
    """wrap_ddp: on cuda:i moves the model there and wraps with device_ids=[i]"""
    gpus = student.simulated()
    model, batches = ddp_case(2)
    devices = [f"cuda:{i}" for i in drawn().sample(range(gpus.gpus), 2)]
    reports = gpus.run_ranks(probes.ddp_gradients, 2, model, None,
                             per_rank=list(zip(devices, batches, strict=True)))
    for rank, (report, device) in enumerate(zip(reports, devices, strict=True)):
        assert_wrapped_ddp(report, rank)
        index = int(device.split(":")[1])
        assert report["param_devices"] == [device], (
            f"rank {rank}: wrap_ddp(model, {device}) must move the model to {device}, its "
            f"parameters are on {report['param_devices']}")
        assert report["device_ids"] == [index], (
            f"rank {rank}: on {device} the wrapper must get device_ids=[{index}], got "
            f"{report['device_ids']}")
    assert_averaged(reports, model, batches, "on GPUs")


@pytest.mark.timeout_s(150)
def test_wrap_ddp_syncbn_cpu(student):
    """wrap_ddp: raises ValueError for sync_batchnorm=True on CPU"""
    (report,) = student.run_ranks(probes.ddp_gradients, 1, probes.TinyMLP(), True,
                                  per_rank=[("cpu", (torch.randn(4, 4), torch.randn(4, 2)))])
    error = report.get("error")
    assert error is not None and "ValueError" in error["types"], (
        "SyncBatchNorm cannot train on CPU: wrap_ddp(..., sync_batchnorm=True) with a CPU "
        "device must raise ValueError (got "
        f"{error_text(error)})")
    # Refusing is worth something only from a function that also wraps.
    model, batches = ddp_case(2)
    reports = student.run_ranks(probes.ddp_gradients, 2, model, None,
                                per_rank=[("cpu", batch) for batch in batches])
    for rank, report in enumerate(reports):
        assert_wrapped_ddp(report, rank)
    assert_averaged(reports, model, batches, "on CPU")


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(180)
def test_wrap_ddp_cuda(student):
    """wrap_ddp: on a real GPU wraps with device_ids=[index] and converts BatchNorm when asked"""
    (report,) = student.run_ranks(probes.wrap_ddp_gpu_rank, 1, probes.TinyMLP(4, 6, 1))
    assert report["type"] == "DistributedDataParallel", (
        f"wrap_ddp must return a DistributedDataParallel, got a {report['type']}")
    assert report["device_ids"] == [0], "on cuda:0 the wrapper must get device_ids=[0]"
    assert report["param_devices"] == ["cuda:0"], "the model must be moved to cuda:0"
    assert report["norm_types"] == ["SyncBatchNorm"], (
        "sync_batchnorm=True must convert the BatchNorm layers to SyncBatchNorm")


# ----------------------------------------------------------------------------- loaders


def loaders(student, *args) -> dict:
    """probes.loader_report, every rank's loader checked to be backed by torch's own
    DistributedSampler (a sampler that hands out the same indices is not the one asked for)."""
    report = student.probe(probes.loader_report, *args)
    for rank, row in enumerate(report["ranks"]):
        assert any("DistributedSampler" in bases for bases in row["samplers"].values()), (
            f"rank {rank}: the loader must be backed by torch's DistributedSampler (as its "
            "sampler, or inside its batch sampler)")
    return report


def test_loader_batch_size(student):
    """make_distributed_loader: gives each rank global_batch_size // world_size samples"""
    rng = drawn()
    for world_size, global_batch in [(2, 8), (4, 8), (3, 3)]:
        n = global_batch * rng.randint(2, 5)
        report = loaders(student, probes.IndexData(n), global_batch, world_size,
                         {"shuffle": False})
        per_rank = global_batch // world_size
        for rank, row in enumerate(report["ranks"]):
            sizes = [len(b) for b in row["epochs"][0]]
            assert sizes and all(s == per_rank for s in sizes), (
                f"with a global batch of {global_batch} over {world_size} ranks, each rank's "
                f"batches must hold {per_rank} samples (rank {rank} got {sizes})")
    assert not report["initialized"], "building loaders must not need a process group"


def test_loader_indivisible(student):
    """make_distributed_loader: raises ValueError for a batch the ranks cannot split, or bad args"""
    rng = drawn()
    world = rng.randint(2, 4)
    cases = [  # (global batch, rank, world size, why it is refused)
        (6, 0, 4, "a global batch of 6 cannot be split over 4 ranks"),
        (5, 0, 2, "a global batch of 5 cannot be split over 2 ranks"),
        (1, 0, 2, "a global batch of 1 cannot be split over 2 ranks"),
        (2 * world, world + rng.randint(0, 2), world, f"rank must be below world_size {world}"),
        (2 * world, -rng.randint(1, 3), world, "a rank cannot be negative"),
        (4, 0, 0, "world_size must be at least 1"),
        (0, 0, world, "global_batch_size must be at least 1"),
        (-2 * world, 0, world, "global_batch_size must be at least 1"),
    ]
    for global_batch, rank, world_size, why in cases:
        report = student.probe(probes.loader_error, probes.IndexData(16), global_batch, rank,
                               world_size)
        error = report.get("error")
        assert error is not None and "ValueError" in error["types"], (
            f"{why} (global_batch_size={global_batch}, rank={rank}, world_size={world_size}): "
            "expected ValueError (got "
            f"{error_text(error, none='a loader')})")
    # Refusing is worth something only from a function that also builds loaders.
    world_size = drawn().randint(2, 4)
    report = loaders(student, probes.IndexData(4 * world_size), 2 * world_size, world_size,
                     {"shuffle": False})
    assert [flat(row["epochs"][0]) for row in report["ranks"]] == [
        list(range(r, 4 * world_size, world_size)) for r in range(world_size)], (
        "a global batch that the ranks divide must give each rank its DistributedSampler share")


@pytest.mark.weight(2)
def test_loader_disjoint(student):
    """make_distributed_loader: ranks get disjoint shares that cover the dataset"""
    rng = drawn()
    cases = [(rng.randint(2, 8) * 8, 8, 4, {"shuffle": False}),
             (rng.randint(2, 8) * 8, 8, 2, {"shuffle": True, "seed": rng.randrange(1000)}),
             (rng.randint(2, 8) * 4 + 2, 4, 4, {"shuffle": True, "seed": rng.randrange(1000)})]
    for n, global_batch, world_size, kwargs in cases:
        report = loaders(student, probes.IndexData(n), global_batch, world_size, kwargs)
        shares = [flat(row["epochs"][0]) for row in report["ranks"]]
        everything = [i for share in shares for i in share]
        assert set(everything) == set(range(n)), (
            f"together the {world_size} ranks must see every sample of the dataset")
        assert len({len(s) for s in shares}) == 1, "every rank must get an equal share"
        assert shares == [o[0] for o in sampler_orders(n, world_size, **kwargs)], (
            f"each rank's share must be the one DistributedSampler gives it ({kwargs})")
        if n % world_size == 0:
            assert len(everything) == n, (
                f"with {n} samples over {world_size} ranks ({kwargs}), no sample may be seen by "
                "two ranks: use a DistributedSampler with the rank and world size")
        else:  # padding repeats only as many samples as needed for equal shares
            assert len(everything) == -(-n // world_size) * world_size, (
                "shares may only be padded up to an equal size")


def test_loader_shuffle_seed(student):
    """make_distributed_loader: shuffles with the sampler, the given seed and set_epoch"""
    data = probes.IndexData(40)
    seed = drawn().randrange(1000)
    first = loaders(student, data, 4, 2, {"shuffle": True, "seed": seed}, 2)
    again = loaders(student, data, 4, 2, {"shuffle": True, "seed": seed}, 2)
    other = loaders(student, data, 4, 2, {"shuffle": True, "seed": seed + 1}, 2)
    plain = loaders(student, data, 4, 2, {"shuffle": False})
    order = [flat(row["epochs"][0]) for row in first["ranks"]]
    assert order == [flat(row["epochs"][0]) for row in again["ranks"]], (
        "the same seed must give the same order")
    assert order != [flat(row["epochs"][0]) for row in other["ranks"]], (
        "a different seed must give a different order")
    assert order != [flat(row["epochs"][0]) for row in plain["ranks"]], (
        "shuffle=True must shuffle")
    assert order != [flat(row["epochs"][1]) for row in first["ranks"]], (
        "after the DistributedSampler's set_epoch(1) the order must change")
    expected = sampler_orders(40, 2, 2, shuffle=True, seed=seed)
    for rank, row in enumerate(first["ranks"]):
        assert [flat(epoch) for epoch in row["epochs"]] == expected[rank], (
            f"rank {rank}: every epoch's order must be the DistributedSampler's with the given "
            "seed (the grader calls set_epoch before each epoch)")
    assert [flat(row["epochs"][0]) for row in plain["ranks"]] == [
        list(range(r, 40, 2)) for r in range(2)], (
        "with shuffle=False, DistributedSampler gives rank r the samples r, r + world_size, ...")


def test_loader_drop_last(student):
    """make_distributed_loader: drop_last drops the uneven tail instead of padding"""
    rng = drawn()
    n = 2 * rng.randint(3, 12) + 1  # odd: 2 ranks cannot split it evenly
    seed = rng.randrange(1000)
    data = probes.IndexData(n)
    for drop_last, what in ((True, f"drop the last sample and give {n // 2} distinct samples"),
                            (False, f"pad to {n // 2 + 1} samples each")):
        kwargs = {"drop_last": drop_last, "shuffle": True, "seed": seed}
        report = loaders(student, data, 2, 2, kwargs)
        shares = [flat(row["epochs"][0]) for row in report["ranks"]]
        assert shares == [o[0] for o in sampler_orders(n, 2, **kwargs)], (
            f"with drop_last={drop_last}, {n} samples over 2 ranks must {what} each, as "
            "DistributedSampler(drop_last=...) does")


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


def test_train_step_single(student):
    """ddp_train_step: one step, plain or wrapped, returns the loss as a float and updates"""
    torch.manual_seed(BASE + 2)
    model = probes.PlainMLP()
    batch = (torch.randn(8, 4), torch.randn(8, 1))
    losses, state, _ = plain_steps(model, [batch], 0.05)
    for wrap in (False, True):
        what = " (the model wrapped in nn.DataParallel)" if wrap else ""
        report = student.probe(probes.train_step_report, model, [batch], 0.05, 0.0, "cpu", wrap)
        got = report["losses"][0]
        assert type(got) is float, f"ddp_train_step must return the loss as a Python float{what}"
        assert abs(got - losses[0]) < 1e-5, (
            f"the returned loss must be the batch's loss before the step ({losses[0]:.5f}), "
            f"got {got:.5f}{what}")
        for name, value in state.items():
            assert close(report["state"][name], value), (
                f"after one step {name!r} must be updated by the optimizer{what}")


def test_train_step_zero_grad(student):
    """ddp_train_step: zeroes the gradients before every backward pass"""
    torch.manual_seed(BASE + 4)
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


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_train_step_two_ranks(student):
    """ddp_train_step: two gloo ranks train like one process on the full batch"""
    model, data = training_case(9)
    state, losses = expected_training(model, data, 2)
    reports = student.run_ranks(probes.ddp_steps, 2, model, LR, per_rank=rank_batches(data, 2))
    check_training(reports, state, losses, "each rank's step on its own share")


def test_train_step_moves_batch(student):
    """ddp_train_step: moves a CPU batch to the GPU the model is on"""
    gpus = student.simulated()
    device = f"cuda:{drawn().randrange(gpus.gpus)}"
    model = probes.PlainMLP()
    batch = (torch.randn(8, 4), torch.randn(8, 1))
    losses, state, _ = plain_steps(model, [batch], 0.05)
    report = gpus.probe(probes.train_step_report, model, [batch], 0.05, 0.0, device)
    loss = report["losses"][0]
    assert type(loss) is float, "the loss must come back as a Python float"
    assert abs(loss - losses[0]) < 1e-4, "the loss with the model on a GPU must be the batch's"
    for name, value in state.items():
        assert close(report["state"][name], value, atol=1e-4), f"{name!r} must be updated"
    assert report["param_devices"] == [device], "the model must stay on its GPU"


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(120)
def test_train_step_real_gpu(student):
    """ddp_train_step: moves a CPU batch to the model's real GPU"""
    model = probes.PlainMLP()
    batch = (torch.randn(8, 4), torch.randn(8, 1))
    losses, state, _ = plain_steps(model, [batch], 0.05)
    report = student.probe(probes.train_step_report, model, [batch], 0.05, 0.0, "cuda:0")
    assert type(report["losses"][0]) is float, "the loss must come back as a Python float"
    assert abs(report["losses"][0] - losses[0]) < 1e-4, "the loss on the GPU must match the CPU's"
    for name, value in state.items():
        assert close(report["state"][name], value, atol=1e-4), f"{name!r} must be updated"


# ----------------------------------------------------------------------------- cleanup


def cleanup_run(student, world_size: int) -> list[dict]:
    values = values_for(world_size)
    # Two stores: the grader's group meets at the first; after cleanup_ddp, a new one at the
    # second (possible only once the first default group is gone).
    reports = student.run_ranks(probes.cleanup_ranks, world_size, per_rank=values, stores=2)
    assert_ranks_met(reports, world_size, "the grader's own group before cleanup_ddp")
    for rank, report in enumerate(reports):
        assert "error" not in report["cleanup"], (
            f"rank {rank}: cleanup_ddp raised {error_text(report['cleanup']['error'])}")
        assert report["initialized_after"] is False, (
            f"rank {rank}: after cleanup_ddp the default process group must be gone")
        reinit = report.get("reinit", {}).get("error")
        assert reinit is None, (
            f"rank {rank}: after cleanup_ddp a new process group must be possible, but "
            f"making one raised {error_text(reinit)}")
    assert_met(reports, values, "a new group made after cleanup_ddp", store=1)
    return reports


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_cleanup_two_ranks(student):
    """cleanup_ddp: destroys the default group in every rank"""
    cleanup_run(student, 2)


@pytest.mark.timeout_s(150)
def test_cleanup_repeat(student):
    """cleanup_ddp: does nothing without a group or when called twice"""
    for rank, report in enumerate(cleanup_run(student, 2)):
        for key, when in (("without_group", "before any process group exists"),
                          ("second_cleanup", "a second time")):
            error = report[key].get("error")
            assert error is None, (
                f"rank {rank}: cleanup_ddp called {when} must do nothing, but it raised "
                f"{error_text(error)}")
