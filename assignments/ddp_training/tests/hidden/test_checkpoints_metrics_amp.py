"""Parts C, D and E: save_checkpoint, load_checkpoint, global_mean, evaluate_accuracy,
amp_train_step. Expected values are computed here from inputs drawn for this grading."""

import copy

import pytest
import torch
from torch import nn

from autograder.testing import assert_ranks_met, drawn, error_text

import probes


def close(a, b, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol, rtol=1e-4)


def error_of(report: dict, what: str) -> None:
    if "error" in report:
        error = report["error"]
        raise AssertionError(f"{what} raised {error_text(error)}")


def folder_name() -> str:
    return f"ckpt{drawn().randrange(1 << 40)}"


# ----------------------------------------------------------------------------- save_checkpoint


@pytest.mark.timeout_s(150)
def test_save_ranks(student):
    """save_checkpoint: rank 0 writes model, optimizer and epoch once; the others wait for it"""
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    world, epoch = rng.choice([2, 3]), rng.randint(1, 50)
    model = probes.SlowStateDict()
    reports = student.run_ranks(probes.save_ranks, world, folder_name(), model,
                                rng.choice([0.05, 0.1]), rng.randint(1, 3), epoch)
    for rank, report in enumerate(reports):
        error_of(report, f"save_checkpoint on rank {rank}")
        assert report["saves"] == (1 if rank == 0 else 0), (
            f"rank {rank} called torch.save {report['saves']} times: only rank 0 writes the "
            "checkpoint, once")
        assert report["exists_after"] and "value" in report.get("checkpoint", {}), (
            f"rank {rank}: when save_checkpoint returns the checkpoint must be complete on "
            "disk (the other ranks wait at a barrier until rank 0 has written it)")
    saved = reports[0]["checkpoint"]["value"]
    assert isinstance(saved, dict) and {"model", "optimizer", "epoch"} <= set(saved), (
        f"the checkpoint must be a dict with 'model', 'optimizer' and 'epoch', got "
        f"{sorted(saved) if isinstance(saved, dict) else type(saved).__name__}")
    assert saved["epoch"] == epoch, f"'epoch' must be the epoch given ({epoch})"
    state = reports[0]["state"]
    assert sorted(saved["model"]) == sorted(state), (
        f"'model' must be the unwrapped model's state dict (keys {sorted(state)}), got keys "
        f"{sorted(saved['model'])}")
    for name, value in state.items():
        assert close(saved["model"][name], value), f"'model' holds a stale {name!r}"
    momentum = [s.get("momentum_buffer") for s in saved["optimizer"].get("state", {}).values()]
    want = [s.get("momentum_buffer") for s in reports[0]["optimizer"]["state"].values()]
    assert len(momentum) == len(want) and all(
        close(a, b) for a, b in zip(momentum, want, strict=True)), (
        "'optimizer' must be the optimizer's state dict (its momentum buffers included)")


# ----------------------------------------------------------------------------- load_checkpoint


def trained_checkpoint():
    rng = drawn()
    torch.manual_seed(rng.randrange(1 << 30))
    model = probes.PlainMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(rng.randint(1, 3)):
        x = torch.randn(6, 4)
        optimizer.zero_grad()
        probes.mse(model(x), x[:, :1]).backward()
        optimizer.step()
    checkpoint = {"model": copy.deepcopy(model.state_dict()),
                  "optimizer": copy.deepcopy(optimizer.state_dict()),
                  "epoch": rng.randint(1, 50)}
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    return checkpoint, momentum


def lands_on(load) -> str | None:
    """Where a torch.load call puts a tensor saved from cuda:0, given its map_location as
    probes.load_ranks describes it (by name or by position; a device, or a mapping of saved
    locations as PyTorch's DDP tutorial writes it); None when it cannot be told."""
    location = load.get("map_location")
    if location is None:
        return "cuda:0"  # where it was saved from
    if isinstance(location, str):
        return location
    mapping = location.get("mapping") if isinstance(location, dict) else None
    if isinstance(mapping, dict):
        target = mapping.get("cuda:0", "cuda:0")
        return target if isinstance(target, str) else None
    return None


def given(load) -> str:
    location = load.get("map_location")
    if location is None:
        return "it was called without map_location"
    if isinstance(location, dict) and isinstance(location.get("mapping"), dict):
        return f"it was given map_location={dict(location['mapping'])}"
    if isinstance(location, dict):
        return f"it was given a map_location the grader cannot follow ({location.get('other')})"
    return f"it was given map_location={location}"


def check_loaded(reports, checkpoint, momentum, devices) -> None:
    for rank, report in enumerate(reports):
        error_of(report, f"load_checkpoint on rank {rank}")
        assert report["value"] == checkpoint["epoch"], (
            f"rank {rank}: load_checkpoint must return the checkpoint's epoch "
            f"({checkpoint['epoch']}), got {report['value']!r}")
        for name, value in checkpoint["model"].items():
            assert close(report["state"][name], value), (
                f"rank {rank}: {name!r} was not loaded from the checkpoint")
        assert len(report["momentum"]) == len(momentum) and all(
            m is not None and close(m, want)
            for m, want in zip(report["momentum"], momentum, strict=True)), (
            f"rank {rank}: the optimizer's state (momentum buffers) was not loaded")
        loads = report["loads"]
        assert loads and lands_on(loads[0]) == devices[rank], (
            f"rank {rank}: torch.load must put a checkpoint saved from cuda:0 on "
            f"{devices[rank]}, the rank's own device (map_location={devices[rank]}); "
            f"{given(loads[0]) if loads else 'torch.load was not called'}")
        assert report["param_devices"] == [devices[rank]], (
            f"rank {rank}: the model must stay on {devices[rank]}")


@pytest.mark.weight(2)
@pytest.mark.timeout_s(150)
def test_load_on_each_gpu(student):
    """load_checkpoint: every rank loads onto its own GPU with map_location, model and optimizer"""
    checkpoint, momentum = trained_checkpoint()
    reports = student.simulated(2).run_ranks(probes.load_ranks, 2, folder_name(), checkpoint,
                                             probes.PlainMLP(), 0.1)
    check_loaded(reports, checkpoint, momentum, ["cuda:0", "cuda:1"])


@pytest.mark.weight(1)
@pytest.mark.timeout_s(150)
def test_load_on_cpu(student):
    """load_checkpoint: on CPU ranks, into the model inside DDP"""
    checkpoint, momentum = trained_checkpoint()
    reports = student.without_gpus().run_ranks(probes.load_ranks, 2, folder_name(), checkpoint,
                                               probes.PlainMLP(), 0.1)
    check_loaded(reports, checkpoint, momentum, ["cpu", "cpu"])


# ----------------------------------------------------------------------------- global_mean


@pytest.mark.timeout_s(150)
def test_global_mean(student):
    """global_mean: every rank gets the mean over all ranks; the value itself without a group"""
    rng = drawn()
    world = rng.choice([2, 3])
    values = [rng.uniform(-100, 100) for _ in range(world)]
    reports = student.run_ranks(probes.mean_ranks, world, per_rank=values)
    assert_ranks_met(reports, world, "the grader's own process group")
    mean = sum(values) / world
    for rank, report in enumerate(reports):
        error_of(report["grouped"], f"global_mean on rank {rank}")
        got = report["grouped"]["value"]
        assert type(got) is float and abs(got - mean) <= 1e-9 * max(1, abs(mean)), (
            f"rank {rank}: global_mean gave {got!r}, not the mean over the {world} ranks "
            "(every rank must get it)")
        error_of(report["alone"], f"global_mean without a process group on rank {rank}")
        alone = report["alone"]["value"]
        assert type(alone) is float and alone == values[rank], (
            "without a process group global_mean returns the value itself, as a float")


# ----------------------------------------------------------------------------- evaluate_accuracy


def accuracies(model, data, world: int) -> tuple[float, float, float]:
    """(right, counting the sampler's padding, mean of per-rank accuracies)."""
    with torch.no_grad():
        hits = (model(data.x).argmax(dim=1) == data.y).tolist()
    n = len(hits)
    total = -(-n // world) * world
    padded = hits + hits[: total - n]
    per_rank = [padded[r:total:world] for r in range(world)]
    return (sum(hits) / n, sum(padded) / total,
            sum(sum(p) / len(p) for p in per_rank) / world)


def rank_views(model, data, world: int) -> list:
    """What each rank is handed, as a real run would read it: rank r's DistributedSampler share
    (shuffle=False) holds the real samples; every other sample is replaced by a drawn one
    labelled with the class the model scores lowest, which it always gets wrong. Only ranks
    that each evaluate their own share and sum their counts find the accuracy."""
    from torch.utils.data import DistributedSampler

    views = []
    for rank in range(world):
        own = set(DistributedSampler(range(len(data)), num_replicas=world, rank=rank,
                                     shuffle=False))
        others = [i for i in range(len(data)) if i not in own]
        x, y = data.x.clone(), data.y.clone()
        x[others] = torch.randn(len(others), x.shape[1])
        with torch.no_grad():
            y[others] = model(x[others]).argmin(dim=1)
        views.append(probes.Pairs(x, y))
    return views


def hits_outside_each_share(model, data, world: int) -> bool:
    """Whether every rank's share leaves some right answers to the other ranks (else a rank
    that scored the whole dataset alone would find the accuracy too)."""
    with torch.no_grad():
        hits = (model(data.x).argmax(dim=1) == data.y).tolist()
    return all(sum(hits[i] for i in range(len(hits)) if i % world != rank) > 0
               for rank in range(world))


@pytest.mark.timeout_s(150)
def test_evaluate_counts_each_sample_once(student):
    """evaluate_accuracy: accuracy over the whole dataset, DistributedSampler's padding left out"""
    rng = drawn()
    world = rng.choice([2, 3])
    while True:
        torch.manual_seed(rng.randrange(1 << 30))
        n = world * rng.randint(4, 9) + 1  # world - 1 samples of padding
        model = nn.Linear(4, 3)
        data = probes.Pairs(torch.randn(n, 4), torch.randint(0, 3, (n,)))
        right, padded, averaged = accuracies(model, data, world)
        with torch.no_grad():
            best, second = model(data.x).topk(2, dim=1).values.unbind(dim=1)
        # No near tie between two classes: batches of another size round the logits otherwise
        # (by up to about 5e-7), enough to flip the argmax of a tie that close (a few draws in
        # a million have one).
        if min(abs(right - padded), abs(right - averaged)) > 1e-6 and \
                (best - second).min() > 1e-4 and hits_outside_each_share(model, data, world):
            break
    reports = student.run_ranks(probes.evaluate_ranks, world, model, rng.randint(2, 5),
                                per_rank=rank_views(model, data, world))
    assert_ranks_met(reports, world, "the grader's own process group")
    # Counts divided in float32 are off by up to 6e-8 (0.4000000059604645 for 0.4); a count
    # that is off moves the accuracy by 1 / n, over 0.03.
    for rank, report in enumerate(reports):
        error_of(report, f"evaluate_accuracy on rank {rank}")
        got = report["value"]
        assert type(got) is float and abs(got - right) <= 1e-6, (
            f"rank {rank}: accuracy {got!r}, expected {right:.6f} to within 1e-6 (each of the "
            f"{n} samples counted once, over all ranks)")
        assert report["training_after"], "the model's training mode must be restored"


# ----------------------------------------------------------------------------- amp_train_step


def expected_amp(model, batches, lr, max_norm, init_scale, autocast=True, unscale_first=True):
    """The losses and final state of amp_train_step's steps; `autocast=False` and
    `unscale_first=False` give those of two classic mistakes instead."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = None
    if init_scale is not None:
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = probes.mse(model(x), y)
        if scaler is None:
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            if unscale_first:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)  # unscales here unless unscale_ came first
            scaler.update()
        losses.append(loss.item())
    return losses, model.state_dict()


def same_loss(got: float, want: float) -> bool:
    # The same operations in the same build give the same bits; bfloat16 moves the loss by
    # about 1e-3 of itself, float32 noise by far less than 1e-5.
    return abs(got - want) <= 1e-5 * max(1, want)


def same_state(got: dict, want: dict, name: str) -> bool:
    return close(got[name], want[name], atol=2e-3)


def passes_for(result, expected) -> bool:
    """Whether check_amp takes `result` (losses, state) for `expected`."""
    (losses, state), (want_losses, want_state) = result, expected
    return all(map(same_loss, losses, want_losses)) and all(
        same_state(state, want_state, name) for name in want_state)


def amp_case(scaled: bool):
    rng = drawn()
    while True:
        torch.manual_seed(rng.randrange(1 << 30))
        model = probes.PlainMLP(d_in=8, hidden=16)
        # Targets of the outputs' scale: with larger ones the loss hides bfloat16's rounding (a
        # forward without autocast then matched within 1e-4 one time in seven).
        batches = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(rng.randint(2, 4))]
        init_scale = float(2 ** rng.randint(4, 12)) if scaled else None
        case = (model, batches, rng.choice([0.05, 0.1]), rng.uniform(0.05, 0.2), init_scale)
        # Never a draw that a forward without autocast, or clipping before unscale_, also
        # passes: each matched the losses and weights about once in 10,000 draws.
        expected = expected_amp(*case)
        mistakes = [expected_amp(*case, autocast=False)]
        if scaled:
            mistakes.append(expected_amp(*case, unscale_first=False))
        if not any(passes_for(wrong, expected) for wrong in mistakes):
            return case


def check_amp(report, model, batches, lr, max_norm, init_scale) -> None:
    losses, state = expected_amp(model, batches, lr, max_norm, init_scale)
    for step, (got, want) in enumerate(zip(report["losses"], losses, strict=False)):
        error_of(got, f"amp_train_step, step {step}")
        assert type(got["value"]) is float and same_loss(got["value"], want), (
            f"step {step}: loss {got['value']!r}, expected {want:.5f} (computed under "
            "torch.autocast with bfloat16)")
    assert len(report["losses"]) == len(losses)
    for name in state:
        assert same_state(report["state"], state, name), (
            f"after {len(losses)} steps {name!r} differs from steps with the gradients' norm "
            f"clipped to {max_norm:.3f}" + (" after unscale_" if init_scale else ""))


@pytest.mark.weight(1)
def test_amp_bf16_clipped(student):
    """amp_train_step: bfloat16 autocast on CPU, gradients clipped to max_norm"""
    model, batches, lr, max_norm, _ = amp_case(False)
    report = student.probe(probes.amp_steps, model, batches, lr, max_norm, None)
    check_amp(report, model, batches, lr, max_norm, None)


@pytest.mark.weight(2)
def test_amp_scaler_unscales_before_clipping(student):
    """amp_train_step: with a GradScaler, unscale_ before clipping, then step and update"""
    model, batches, lr, max_norm, init_scale = amp_case(True)
    report = student.probe(probes.amp_steps, model, batches, lr, max_norm, init_scale)
    check_amp(report, model, batches, lr, max_norm, init_scale)
    assert report["scale"] == init_scale, (
        "the scaler's scale must be left to scaler.update() (no overflow: unchanged)")
