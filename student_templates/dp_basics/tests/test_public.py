"""Public sanity checks for dp_basics: run `pytest` in the folder holding dp_basics.py.

These cover the basic behaviour of every function. The grader runs many more checks (every
rule in the docstrings, edge cases, two-process DDP training), so passing these is a start,
not a guarantee. They run on CPU; nothing here needs a GPU.
"""

import copy
import socket

import dp_basics as S
import pytest
import torch
from torch import nn

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(),
                                   reason="checks the CPU behaviour; this machine has CUDA")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def process_group():
    """A one-process gloo group made by setup_ddp, always cleaned up."""
    device = S.setup_ddp(0, 1, free_port())
    try:
        yield device
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------- Part A


def test_chunk_sizes_even_split():
    assert S.data_parallel_chunk_sizes(8, 2) == [4, 4]
    assert S.data_parallel_chunk_sizes(3, 1) == [3]


def test_chunk_sizes_docstring_example():
    assert S.data_parallel_chunk_sizes(5, 4) == [2, 2, 1]


def test_chunk_sizes_rejects_empty_batch():
    with pytest.raises(ValueError):
        S.data_parallel_chunk_sizes(0, 2)


@needs_no_cuda
def test_wrap_data_parallel_without_cuda_returns_the_model():
    model = nn.Linear(3, 2)
    assert S.wrap_data_parallel(model) is model


def test_wrap_data_parallel_does_not_wrap_twice():
    wrapped = nn.DataParallel(nn.Linear(3, 2))
    assert S.wrap_data_parallel(wrapped) is wrapped


def test_emulate_matches_a_plain_forward_without_batchnorm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    x = torch.randn(6, 4)
    out = S.emulate_data_parallel(model, x, 2)
    assert out.shape == (6, 2)
    torch.testing.assert_close(out, model(x))


def test_emulate_gradients_reach_the_model():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    S.emulate_data_parallel(model, torch.randn(4, 3), 2).sum().backward()
    assert model.weight.grad is not None, "the loss's gradient must reach model.weight"


# ----------------------------------------------------------------------------- Part B


def test_match_input_dtype_casts_double_to_float():
    out = S.match_input_dtype(torch.randn(2, 3, dtype=torch.float64), nn.Linear(3, 1))
    assert out.dtype == torch.float32


def test_match_input_dtype_keeps_index_tensors():
    out = S.match_input_dtype(torch.tensor([1, 2, 3]), nn.Embedding(5, 2))
    assert out.dtype == torch.int64


def test_match_input_dtype_handles_a_tuple():
    out = S.match_input_dtype((torch.ones(1, dtype=torch.float64), "text"), nn.Linear(1, 1))
    assert isinstance(out, tuple) and out[0].dtype == torch.float32 and out[1] == "text"


# ----------------------------------------------------------------------------- Part C


def test_convert_to_sync_batchnorm_nested():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    converted = S.convert_to_sync_batchnorm(model)
    assert isinstance(converted[1], nn.SyncBatchNorm)
    assert isinstance(converted[0], nn.Linear)


# ----------------------------------------------------------------------------- Part D


def test_setup_ddp_single_process(process_group):
    assert process_group == torch.device("cpu") or process_group.type == "cuda"
    assert torch.distributed.is_initialized()
    assert torch.distributed.get_world_size() == 1


def test_cleanup_ddp_destroys_the_group():
    S.setup_ddp(0, 1, free_port())
    try:
        S.cleanup_ddp()
        assert not torch.distributed.is_initialized()
    finally:  # never leave a group behind for the other tests
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def test_cleanup_ddp_without_a_group():
    S.cleanup_ddp()  # nothing to destroy: must not raise


def test_wrap_ddp_on_cpu(process_group):
    if process_group.type != "cpu":
        pytest.skip("checks the CPU path")
    wrapped = S.wrap_ddp(nn.Linear(3, 2), process_group)
    assert isinstance(wrapped, nn.parallel.DistributedDataParallel)


def test_make_distributed_loader_per_rank_batch():
    data = torch.utils.data.TensorDataset(torch.arange(16))
    loader = S.make_distributed_loader(data, 8, rank=0, world_size=2, shuffle=False)
    first = next(iter(loader))[0]
    assert len(first) == 4, "each of 2 ranks gets half of the global batch of 8"


def test_make_distributed_loader_ranks_do_not_overlap():
    data = torch.utils.data.TensorDataset(torch.arange(16))
    seen = []
    for rank in range(2):
        loader = S.make_distributed_loader(data, 4, rank=rank, world_size=2, seed=3)
        seen.append({int(i) for (batch,) in loader for i in batch})
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(16))


def test_ddp_train_step_on_a_plain_model():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(8, 3), torch.randn(8, 1))
    first = S.ddp_train_step(model, batch, optimizer, nn.MSELoss())
    assert type(first) is float
    second = S.ddp_train_step(model, batch, optimizer, nn.MSELoss())
    assert second < first, "a small SGD step on the same batch should lower the loss"


# ----------------------------------------------------------------------------- Part E


def test_unwrap_model_one_level():
    inner = nn.Linear(3, 2)
    assert S.unwrap_model(nn.DataParallel(inner)) is inner


def test_load_wrapped_checkpoint_into_plain_model():
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(3, 2))
    checkpoint = nn.DataParallel(copy.deepcopy(source)).state_dict()
    target = nn.Sequential(nn.Linear(3, 2))
    S.load_state_dict_flexible(target, checkpoint)
    torch.testing.assert_close(target[0].weight, source[0].weight)
