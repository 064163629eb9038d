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
