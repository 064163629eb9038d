"""Public checks for ddp_training: run `pytest` in the folder holding ddp_training.py.

These cover the basic behaviour of a few functions on one process. The grader runs many more
checks (every rule in the docstrings, several gloo processes, simulated GPUs and nodes).
"""

import os
import socket

import ddp_training as S
import pytest
import torch
from torch import nn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_global_mean_without_group():
    assert S.global_mean(3.5) == 3.5


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                     "MASTER_PORT"])
def test_init_from_env_missing_variable(monkeypatch, missing):
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(missing)
    try:
        with pytest.raises(ValueError, match=missing):
            S.init_from_env(backend="gloo")
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def test_init_from_env_one_process(monkeypatch):
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        assert S.init_from_env(backend="gloo") == torch.device("cpu")
        assert torch.distributed.get_world_size() == 1
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def test_accumulate_step_plain_model():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    micro = [(torch.randn(2, 3), torch.randn(2, 1)) for _ in range(2)]
    loss = S.accumulate_step(model, micro, optimizer, nn.functional.mse_loss)
    assert isinstance(loss, float)


def test_checkpoint_round_trip(tmp_path):
    model, other = nn.Linear(3, 1), nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    path = str(tmp_path / "c.pt")
    S.save_checkpoint(path, model, optimizer, 4)
    assert S.load_checkpoint(path, other, torch.optim.SGD(other.parameters(), lr=0.1),
                             torch.device("cpu")) == 4
    assert torch.equal(other.weight, model.weight)
    assert os.path.exists(path)


@pytest.fixture
def one_process_group():
    """A gloo process group of this one process (world size 1)."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                                         rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


class _EpochRecorder(torch.utils.data.Sampler):
    def __init__(self, n):
        self.n, self.epochs = n, []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def test_train_epochs_sets_the_epoch_and_returns_a_mean_per_epoch():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
    sampler = _EpochRecorder(8)
    loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = S.train_epochs(model, loader, optimizer, nn.functional.mse_loss, 3, start_epoch=1)
    assert sampler.epochs == [1, 2]
    assert len(losses) == 2 and all(isinstance(x, float) for x in losses)


def test_evaluate_accuracy_on_one_process(one_process_group):
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))  # predicts the larger coordinate
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 1, 1])  # 3 of 5 right
    accuracy = S.evaluate_accuracy(model, torch.utils.data.TensorDataset(x, labels), 2)
    assert accuracy == pytest.approx(0.6)
    assert model.training


def test_amp_train_step_clips_and_steps():
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = (torch.tensor([[30.0, 40.0]]), torch.tensor([[1.0]]))
    loss = S.amp_train_step(model, batch, optimizer, nn.functional.mse_loss, max_norm=1.0,
                            dtype=torch.bfloat16)
    assert isinstance(loss, float)
    assert model.weight.detach().norm().item() == pytest.approx(1.0, rel=1e-2)


def test_wrap_with_unused_lets_a_step_skip_a_branch(one_process_group):
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.main, self.extra = nn.Linear(2, 1), nn.Linear(2, 1)

        def forward(self, x, use_extra):
            return self.main(x) + self.extra(x) if use_extra else self.main(x)

    model = S.wrap_with_unused(Branchy())
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
    for step in range(3):
        model(torch.randn(2, 2), use_extra=step == 1).sum().backward()
