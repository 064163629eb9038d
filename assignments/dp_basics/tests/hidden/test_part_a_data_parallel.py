"""Part A: wrap_data_parallel, data_parallel_chunk_sizes, emulate_data_parallel."""

import copy

import pytest
import torch
from torch import nn

from autograder.testing import drawn, raises_student, remote_device

import probes

ATOL = 1e-5


def chunk_rule(batch_size: int, num_devices: int) -> list[int]:
    """What DataParallel's scatter does: torch.chunk along dim 0."""
    return [len(c) for c in torch.arange(batch_size).chunk(num_devices)]


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.detach(), b.detach(), atol=ATOL, rtol=1e-4)


def seeded(cls, seed: int | None = None, **kwargs):
    """`cls(**kwargs)` built from `seed`, drawn for this grading when not given (the inputs a
    test makes next come from the same seed)."""
    torch.manual_seed(drawn().randrange(1 << 62) if seed is None else seed)
    return cls(**kwargs)


def replicas_forward(model: nn.Module, x: torch.Tensor, num_replicas: int):
    """The reference: replica 0 is the model itself, the others independent copies."""
    outputs, replicas = [], []
    for i, chunk in enumerate(x.chunk(num_replicas)):
        replica = model if i == 0 else copy.deepcopy(model)
        replicas.append(replica)
        outputs.append(replica(chunk))
    return torch.cat(outputs), replicas


# ----------------------------------------------------------------------------- wrap_data_parallel


def param_devices(snapshot) -> set[str]:
    return {remote_device(t) for t in snapshot.parameters.values()}


def assert_wrapped(out, ids: list[int], what: str, placed: bool = True) -> None:
    """`out` is DataParallel over `ids`, gathering on ids[0], with the model on cuda:ids[0]
    (`placed=False`: the wrapping only, for tests of another rule)."""
    assert out.is_a("DataParallel"), (
        f"{what}: with CUDA the model must be wrapped in nn.DataParallel (got a {out.type_name})")
    assert out.attributes.get("device_ids") == ids, (
        f"{what}: expected device_ids={ids}, got {out.attributes.get('device_ids')}")
    if not placed:
        return
    assert out.attributes.get("output_device") == ids[0], (
        f"{what}: outputs must be gathered on device_ids[0] = {ids[0]} "
        f"(output_device={ids[0]}), got {out.attributes.get('output_device')}")
    assert param_devices(out) == {f"cuda:{ids[0]}"}, (
        f"{what}: the model must be moved to cuda:{ids[0]} (device_ids[0]) before wrapping; "
        f"its parameters are on {sorted(param_devices(out))}")


@pytest.mark.weight(2)
def test_wrap_all_gpus(student):
    """wrap_data_parallel: uses every GPU when device_ids is None or empty, none without CUDA"""
    gpus = student.simulated()
    everything = list(range(gpus.gpus))
    for ids in (None, []):
        out = gpus.wrap_data_parallel(nn.Linear(3, 2), ids)
        assert_wrapped(out, everything, f"with {gpus.gpus} GPUs and device_ids={ids}")
    cpu = student.without_gpus()
    for ids in (None, []):
        out = cpu.wrap_data_parallel(nn.Sequential(nn.Linear(3, 2), nn.ReLU()), ids)
        assert out.identity == "arg0", (
            f"without CUDA and with device_ids={ids} the model itself must be returned, "
            f"unwrapped (got a {out.type_name})")


@pytest.mark.timeout_s(90)
def test_wrap_given_ids(student):
    """wrap_data_parallel: wraps over the given device_ids, in order, on device_ids[0]"""
    gpus = student.simulated()
    rng = drawn()
    # Two GPUs at least: with one, DataParallel itself moves the model and gathers there.
    # Never every GPU in order: that is what ignoring device_ids gives.
    everything = list(range(gpus.gpus))
    ids = everything
    while ids == everything:
        ids = rng.sample(everything, rng.randint(2, gpus.gpus))
    model = seeded(probes.PlainMLP, rng.randrange(1 << 30))
    x = torch.randn(rng.randint(2, 9), 4)
    out = gpus.wrap_data_parallel(model, ids)
    assert_wrapped(out, ids, f"with device_ids={ids}")
    report = gpus.probe(probes.wrap_dp_on_gpu, model, ids, x)
    assert report["output_device_str"] == f"cuda:{ids[0]}", (
        f"the wrapped model's outputs must be gathered on cuda:{ids[0]}")
    assert close(report["output"], model(x)), "the wrapped model must compute the same outputs"


def test_wrap_missing_gpus(student):
    """wrap_data_parallel: raises ValueError for GPUs that are not there"""
    gpus = student.simulated()
    count = gpus.gpus
    bad = [0, count, count + 2]
    # The docstring asks for a ValueError, not for its wording: any message will do.
    with raises_student("ValueError", f"asking for GPUs {bad} on a machine with "
                                      f"{count} GPUs"):
        gpus.wrap_data_parallel(nn.Linear(3, 2), bad)
    with raises_student("ValueError", "asking for GPU 0 on a machine without CUDA"):
        student.without_gpus().wrap_data_parallel(nn.Linear(3, 2), [0])
    # The same function must still wrap what is there.
    assert_wrapped(gpus.wrap_data_parallel(nn.Linear(3, 2), [count - 1]), [count - 1],
                   f"with device_ids=[{count - 1}]", placed=False)


def test_wrap_keeps_data_parallel(student):
    """wrap_data_parallel: returns a model already in DataParallel unchanged"""
    gpus = student.simulated()
    wrapped = nn.DataParallel(nn.Linear(3, 2))
    for ids in (None, [], [0]):
        for view in (student.without_gpus(), gpus):
            out = view.wrap_data_parallel(wrapped, ids)
            assert out.identity == "arg0", (
                f"with device_ids={ids}, a model already wrapped in DataParallel must be "
                "returned as it is, not wrapped again")
    assert_wrapped(gpus.wrap_data_parallel(nn.Linear(3, 2)), list(range(gpus.gpus)),
                   "a model not wrapped yet", placed=False)


@pytest.mark.timeout_s(120)
def test_wrap_keeps_ddp(student):
    """wrap_data_parallel: returns a model already in DistributedDataParallel unchanged"""
    (report,) = student.run_ranks(probes.wrap_dp_of_ddp, 1, nn.Linear(3, 2))
    assert "error" not in report, (
        f"wrap_data_parallel raised {report.get('error', {}).get('type')} for a DDP-wrapped "
        f"model: {report.get('error', {}).get('message')}")
    assert report["value"] is True, (
        "a model already wrapped in DistributedDataParallel must be returned as it is")
    assert report["with_ids"].get("value") is True, (
        "with device_ids=[0], a model already in DistributedDataParallel must still be "
        "returned as it is")
    gpus = student.simulated()
    assert_wrapped(gpus.wrap_data_parallel(nn.Linear(3, 2)), list(range(gpus.gpus)),
                   "a model not wrapped yet", placed=False)


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(120)
def test_wrap_places_on_first_gpu(student):
    """wrap_data_parallel: puts the parameters on cuda:ids[0] and gathers outputs there"""
    count = student.gpus
    model = seeded(probes.PlainMLP)
    x = torch.randn(6, 4)
    expected = model(x)
    report = student.probe(probes.wrap_dp_on_gpu, model, None, x)
    assert report["type"] == "DataParallel", "with CUDA the model must be wrapped in DataParallel"
    assert report["device_ids"] == list(range(count)), "device_ids=None must use every GPU"
    assert report["param_devices"] == ["cuda:0"], "the parameters must live on cuda:0"
    assert report["output_device_str"] == "cuda:0", "outputs must be gathered on cuda:0"
    assert close(report["output"], expected), "the wrapped model must compute the same outputs"
    if count >= 2:
        report = student.probe(probes.wrap_dp_on_gpu, model, [1, 0], x)
        assert report["device_ids"] == [1, 0], "the given device_ids must be used, in order"
        assert report["param_devices"] == ["cuda:1"], (
            "with device_ids=[1, 0] the parameters must live on cuda:1")
        assert remote_device(report["output"]) == "cuda:1", (
            "with device_ids=[1, 0] outputs must be gathered on cuda:1")


# ----------------------------------------------------------------------------- chunk sizes


def test_chunk_sizes_even(student):
    """data_parallel_chunk_sizes: splits evenly when the batch divides"""
    rng = drawn()
    for _ in range(5):
        devices = rng.randint(1, 8)
        batch = devices * rng.randint(1, 9)
        got = student.data_parallel_chunk_sizes(batch, devices)
        assert got == chunk_rule(batch, devices), (
            f"a batch of {batch} on {devices} devices: expected {chunk_rule(batch, devices)}, "
            f"got {got}")


@pytest.mark.weight(2)
def test_chunk_sizes_uneven(student):
    """data_parallel_chunk_sizes: follows torch.chunk, using fewer devices when needed"""
    rng = drawn()
    cases = [(b, d) for b in range(1, 18) for d in range(1, 7)]
    cases += [(rng.randint(18, 500), rng.randint(2, 64)) for _ in range(20)]
    for batch, devices in cases:
        expected = chunk_rule(batch, devices)
        got = student.data_parallel_chunk_sizes(batch, devices)
        assert type(got) is list and got == expected, (
            f"a batch of {batch} on {devices} devices: scatter makes pieces {expected} "
            f"(torch.chunk rule: ceil({batch}/{devices}) rows each, the last smaller, "
            f"and fewer pieces when the rows run out); got {got}")


def test_chunk_sizes_invalid(student):
    """data_parallel_chunk_sizes: raises ValueError for batch_size < 1 or num_devices < 1"""
    rng = drawn()
    for batch, devices in [(0, 2), (-3, 2), (4, 0), (4, -1)]:
        with raises_student("ValueError",
                            f"batch_size={batch}, num_devices={devices} is invalid"):
            student.data_parallel_chunk_sizes(batch, devices)
        # Refusing is worth something only from a function that also splits valid batches:
        # batches where torch.chunk's rule and an even split differ (a remainder that is
        # neither 0 nor num_devices - 1), so that the verdict never depends on the draw.
        devices = rng.randint(3, 9)
        batch = devices * rng.randint(1, 4) + rng.randint(1, devices - 2)
        assert student.data_parallel_chunk_sizes(batch, devices) == chunk_rule(batch, devices), (
            f"a batch of {batch} on {devices} devices must still be split as torch.chunk does")


# ----------------------------------------------------------------------------- emulation


def test_emulate_matches_forward(student):
    """emulate_data_parallel: gives the model's own output when replicas cannot differ"""
    model = seeded(probes.PlainMLP)
    x = torch.randn(10, 4)
    out = student.emulate_data_parallel(model, x, 3)
    assert close(out, model(x)), (
        "for a model without BatchNorm the emulated output must equal model(inputs), "
        "in the original row order")
    # Eval mode: BatchNorm uses the running statistics, so every replica agrees.
    model = seeded(probes.TinyMLP)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    model.eval()
    out = student.emulate_data_parallel(model, x, 4)
    assert close(out, model(x)), (
        "in eval mode BatchNorm uses running statistics: the output must equal model(inputs)")


def test_emulate_chunks(student):
    """emulate_data_parallel: runs each replica on one chunk of the chunk rule"""
    model = probes.ChunkSizeModel()
    rng = drawn()
    cases = [(10, 4), (5, 4), (3, 8), (6, 1)] + [(rng.randint(2, 40), rng.randint(2, 9))
                                                  for _ in range(3)]
    for batch, replicas in cases:
        x = torch.randn(batch, 2)
        out = student.emulate_data_parallel(model, x, replicas)
        sizes = torch.tensor([float(size) for size in chunk_rule(batch, replicas)
                              for _ in range(size)])
        assert out.shape == (batch, 1) and close(out.flatten(), x[:, 0] + sizes), (
            f"a batch of {batch} over {replicas} replicas must be split into pieces of "
            f"{chunk_rule(batch, replicas)} rows, one per replica, and the outputs "
            "concatenated in order")


@pytest.mark.weight(2)
def test_emulate_batchnorm_per_chunk(student):
    """emulate_data_parallel: in train mode each replica's BatchNorm uses its own chunk"""
    for batch, replicas in [(10, 3), (9, 4), (8, 2)]:
        model = seeded(probes.TinyMLP)
        x = torch.randn(batch, 4)
        expected, _ = replicas_forward(copy.deepcopy(model), x, replicas)
        out = student.emulate_data_parallel(model, x, replicas)
        assert close(out, expected), (
            f"with {replicas} replicas in train mode, BatchNorm must normalise each chunk with "
            "that chunk's own mean and variance (not the whole batch's)")


@pytest.mark.weight(2)
def test_emulate_gradients(student):
    """emulate_data_parallel: gradients reach the original parameters, summed over replicas"""
    model = seeded(probes.TinyMLP)
    x = torch.randn(10, 4)
    weights = torch.randn(10, 2)
    reference = copy.deepcopy(model)
    out, replicas = replicas_forward(reference, x, 3)
    (out * weights).sum().backward()
    report = student.probe(probes.emulate_dp, model, x, 3, weights, True)
    for name, _ in reference.named_parameters():
        expected = sum(dict(r.named_parameters())[name].grad for r in replicas)
        got = report["grads"][name]
        assert got is not None, (
            f"no gradient reached the model's parameter {name!r}: replicas must use the "
            "model's own parameters (or differentiable copies), not detached ones")
        assert close(got, expected), (
            f"the gradient of {name!r} must be the sum of every replica's gradient")


@pytest.mark.weight(2)
def test_emulate_buffers_first_chunk(student):
    """emulate_data_parallel: updates running statistics from the first chunk only"""
    model = seeded(probes.TinyMLP)
    x = torch.randn(10, 4)
    reference = copy.deepcopy(model)
    reference(x.chunk(3)[0])  # replica 0 shares the module's buffers; the rest are discarded
    report = student.probe(probes.emulate_dp, model, x, 3, None, True)
    buffers = report["buffers"]
    assert int(buffers["bn.num_batches_tracked"]) == 1, (
        "one emulated forward must count as one batch for the model's BatchNorm "
        f"(num_batches_tracked is {int(buffers['bn.num_batches_tracked'])})")
    for name in ("bn.running_mean", "bn.running_var"):
        assert close(buffers[name], dict(reference.named_buffers())[name]), (
            f"the model's {name} must be updated from the first chunk only, as replica 0 "
            "shares its buffers with the module and the other replicas' updates are lost")
    # Eval mode leaves the buffers alone.
    report = student.probe(probes.emulate_dp, model, x, 3, None, False)
    for name, before in report["buffers_before"].items():
        assert torch.equal(report["state"][name], before), (
            "in eval mode the model's running statistics must not change")
