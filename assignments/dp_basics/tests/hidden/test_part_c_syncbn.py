"""Part C: convert_to_sync_batchnorm."""

import copy

import pytest
import torch
from torch import nn

from autograder.testing import drawn

import probes

BATCHNORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
SETTINGS = ("eps", "momentum", "affine", "track_running_stats", "num_features")
TENSORS = ("weight", "bias", "running_mean", "running_var")


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {row["name"]: row for row in rows}


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a, b)


def test_nested_layers(student):
    """convert_to_sync_batchnorm: converts BatchNorm layers at every depth, nothing else"""
    report = student.probe(probes.convert_syncbn, probes.ManyNorms(), False)
    before, after = by_name(report["before"]), by_name(report["after"])
    assert set(after) == set(before), (
        "the converted model must keep the same module names and structure")
    for name, row in before.items():
        shown = name or "the model itself"
        if row["type"] in BATCHNORMS:
            assert after[name]["type"] == "SyncBatchNorm", (
                f"the {row['type']} at {shown!r} must become a SyncBatchNorm")
        else:
            assert after[name]["type"] == row["type"], (
                f"{shown!r} is a {row['type']}, not a BatchNorm: it must be left as it is "
                f"(became a {after[name]['type']})")


def test_top_level(student):
    """convert_to_sync_batchnorm: converts a model that is itself a BatchNorm layer"""
    for layer in (nn.BatchNorm2d(3), nn.BatchNorm1d(4, affine=False)):
        with torch.no_grad():  # drawn statistics and weights, which the conversion must keep
            layer.running_mean.normal_()
            layer.running_var.uniform_(0.5, 2)
            if layer.affine:
                layer.weight.normal_()
                layer.bias.normal_()
        out = student.convert_to_sync_batchnorm(layer)
        assert out.type_name == "SyncBatchNorm", (
            f"converting a bare {type(layer).__name__} must return a SyncBatchNorm (got a "
            f"{out.type_name}): a top-level layer cannot be replaced in place, so return "
            "the result of the conversion")
        tensors = {**out.parameters, **out.buffers}
        for name, value in [*layer.named_parameters(), *layer.named_buffers()]:
            assert name in tensors and torch.equal(tensors[name], value), (
                f"the SyncBatchNorm must keep the layer's {name}")


def test_keeps_state(student):
    """convert_to_sync_batchnorm: keeps weights, statistics, settings, requires_grad and mode"""
    for prepare in ("stats", "stats freeze mixed", "stats eval"):
        report = student.probe(probes.convert_syncbn, probes.ManyNorms(), False, prepare,
                               drawn().randrange(1 << 30))
        before, after = by_name(report["before"]), by_name(report["after"])
        for name, row in before.items():
            if row["type"] not in BATCHNORMS:
                continue
            new = after.get(name, {})
            assert new.get("type") == "SyncBatchNorm", (
                f"the {row['type']} at {name!r} must become a SyncBatchNorm")
            for key in SETTINGS:
                assert new[key] == row[key], (
                    f"the SyncBatchNorm replacing {name!r} must keep {key}={row[key]!r} "
                    f"(got {new[key]!r})")
            for key in TENSORS:
                assert same(new[key], row[key]), (
                    f"the SyncBatchNorm replacing {name!r} must keep the original {key}")
            assert new["num_batches_tracked"] == row["num_batches_tracked"], (
                f"the SyncBatchNorm replacing {name!r} must keep num_batches_tracked")
            for key in ("weight_requires_grad", "bias_requires_grad"):
                assert new[key] == row[key], (
                    f"the SyncBatchNorm replacing {name!r} must keep requires_grad of "
                    f"{key.split('_')[0]} ({row[key]})")
            assert new["training"] == row["training"], (
                f"the SyncBatchNorm replacing {name!r} must keep the layer's "
                f"{'train' if row['training'] else 'eval'} mode")


@pytest.mark.timeout_s(120)
def test_inside_wrappers(student):
    """convert_to_sync_batchnorm: converts layers inside DataParallel and DDP wrappers"""
    wrapped = nn.DataParallel(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)))
    out = student.convert_to_sync_batchnorm(wrapped)
    assert out.is_a("DataParallel"), "the DataParallel wrapper itself must stay"
    types = {name: m.type_name for name, m in out.modules()}
    assert types.get("module.1") == "SyncBatchNorm" and types.get("module.0") == "Linear", (
        "the BatchNorm inside a DataParallel wrapper must become a SyncBatchNorm")
    (report,) = student.run_ranks(probes.convert_syncbn_in_ddp, 1)
    assert "error" not in report, (
        f"converting a DDP-wrapped model raised {report.get('error', {}).get('type')}: "
        f"{report.get('error', {}).get('message')}")
    rows = by_name(report["value"])
    assert rows[""]["type"] == "DistributedDataParallel", "the DDP wrapper itself must stay"
    assert rows["module.1"]["type"] == "SyncBatchNorm", (
        "the BatchNorm inside a DistributedDataParallel wrapper must become a SyncBatchNorm")


def test_process_group(student):
    """convert_to_sync_batchnorm: gives every layer the process_group passed in"""
    report = student.probe(probes.convert_syncbn, probes.ManyNorms(), True)
    converted = [row for row in report["after"] if row["type"] == "SyncBatchNorm"]
    assert converted, "the BatchNorm layers must be converted"
    for row in converted:
        assert row["process_group_is_sentinel"] is True, (
            f"the SyncBatchNorm at {row['name']!r} must use the process_group argument")
    report = student.probe(probes.convert_syncbn, probes.ManyNorms(), False)
    for row in report["after"]:
        if row["type"] == "SyncBatchNorm":
            assert row["process_group_is_none"] is True, (
                "without a process_group the layers must use None (the default group)")


def global_batch_training(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float,
                          steps: int) -> dict:
    """What SyncBatchNorm under DDP must match: one process, the whole batch, plain BN."""
    model = copy.deepcopy(model).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        probes.mse(model(x.double()), y.double()).backward()
        optimizer.step()
    return {k: v.detach().float() for k, v in model.state_dict().items()}


@pytest.mark.timeout_s(150)
def test_syncbn_statistics_across_ranks(student):
    """convert_to_sync_batchnorm: under DDP on GPUs, statistics cover every rank's batch"""
    gpus = student.simulated(2)
    model = probes.TinyMLP(4, 6, 1)
    size = drawn().randint(3, 6)
    x, y = torch.randn(2 * size, 4), torch.randn(2 * size, 1)
    reference = copy.deepcopy(model).double()
    out = reference(x.double())
    probes.mse(out, y.double()).backward()  # equal shares: the mean of the ranks' losses
    shares = [(x[r * size:(r + 1) * size], y[r * size:(r + 1) * size]) for r in range(2)]
    reports = gpus.run_ranks(probes.syncbn_in_ddp_ranks, 2, model, per_rank=shares)
    for rank, report in enumerate(reports):
        assert report["norm_types"] == ["SyncBatchNorm"], (
            "the BatchNorm layer must become a SyncBatchNorm")
        assert torch.allclose(report["output"].double(), out[rank * size:(rank + 1) * size],
                              atol=1e-5), (
            f"rank {rank}: in train mode a SyncBatchNorm normalises with the mean and variance "
            "of every rank's samples together")
        for name in ("bn.running_mean", "bn.running_var"):
            assert torch.allclose(report["state"][name].double(),
                                  reference.state_dict()[name], atol=1e-5), (
                f"rank {rank}: {name} must be updated from the statistics of every rank's batch")
        # 1e-4: fc1.bias's gradient is 0 in exact arithmetic (the BatchNorm takes the mean away),
        # so float32 leaves rounding noise divided by the batch's spread: up to 6e-6 in 20,000
        # draws, past 1e-5 a few times in 100,000.
        for name, param in reference.named_parameters():
            assert torch.allclose(report["grads"][name].double(), param.grad, atol=1e-4), (
                f"rank {rank}: the gradient of {name!r} must be that of the whole global batch")


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(240)
def test_syncbn_under_ddp(student):
    """convert_to_sync_batchnorm: under DDP on real GPUs, statistics cover the global batch"""
    model = probes.TinyMLP(4, 6, 1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    expected = global_batch_training(model, x, y, 0.1, 3)
    # Two ranks: on cuda:0 and cuda:1 under nccl, or both on cuda:0 under gloo with one GPU
    # (nccl refuses two ranks on one device; gloo moves CUDA tensors through the host, and
    # SyncBatchNorm has a gloo path). convert_to_sync_batchnorm is the student's; the group,
    # DDP and the steps are the grader's.
    devices, backend = ([0, 1], "nccl") if student.gpus >= 2 else ([0, 0], "gloo")
    reports = student.run_ranks(probes.syncbn_under_ddp, 2, model, x, y, 0.1, 3, devices,
                                backend)
    for rank, report in enumerate(reports):
        assert report["norm_types"] == ["SyncBatchNorm"], (
            "convert_to_sync_batchnorm must turn the BatchNorm into a SyncBatchNorm")
        for name, value in expected.items():
            got = report["state"][name].float()
            assert torch.allclose(got, value, atol=1e-4, rtol=1e-3), (
                f"rank {rank}: after training, {name!r} must equal single-process training on "
                "the whole global batch: SyncBatchNorm normalises with statistics of every "
                "rank's samples together")
