"""autograder.sandbox.request_pickle: requests pickled as pickle would, tensors' storages as
their bytes, and read back by a real sandbox worker as what was sent."""

import pickle

import pytest
import torch
from torch import nn

from autograder.sandbox import request_pickle

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)


def values() -> list:
    base = torch.randn(4, 5)
    return [base, base[1:3, 2:], base.t(), torch.arange(10)[3:7], torch.zeros(0),
            torch.tensor(3.5), torch.tensor([True, False]), torch.randn(3).to(torch.bfloat16),
            torch.randn(2, dtype=torch.complex64), torch.randint(-5, 5, (3,)).to(torch.int8),
            torch.randn(3, requires_grad=True), nn.Parameter(torch.randn(2, 2))]


def described(value: torch.Tensor) -> dict:
    return {"type": type(value).__name__, "dtype": str(value.dtype),
            "shape": list(value.shape), "stride": list(value.stride()),
            "offset": value.storage_offset(), "requires_grad": value.requires_grad,
            "values": numbers(value)}


def numbers(value: torch.Tensor) -> list:
    value = value.detach()
    if value.is_complex():
        return torch.view_as_real(value).tolist()
    return value.tolist() if value.dtype == torch.bool else value.to(torch.float64).tolist()


PROBES = """
def describe(mod, values):
    import torch
    return [{"type": type(v).__name__, "dtype": str(v.dtype), "shape": list(v.shape),
             "stride": list(v.stride()), "offset": v.storage_offset(),
             "requires_grad": v.requires_grad,
             "values": torch.view_as_real(v.detach()).tolist() if v.is_complex()
             else v.tolist() if v.dtype == torch.bool
             else v.detach().to(torch.float64).tolist()} for v in values]

def grow(mod, value):
    value.add_(1)  # a tensor read back is the worker's own, writable
    return value
"""


def test_tensors_read_back_as_they_were_sent():
    sent = values()
    received = pickle.loads(request_pickle.dumps({"args": (sent,), "module": nn.Linear(3, 2)}))
    assert [described(v) for v in received["args"][0]] == [described(v) for v in sent]
    assert [type(p) for p in received["module"].parameters()] == [nn.Parameter] * 2


def test_a_module_reads_back_with_its_parameters():
    module = nn.Linear(3, 2)
    received = pickle.loads(request_pickle.dumps(module))
    assert all(torch.equal(a, b) and type(a) is type(b)
               for a, b in zip(received.parameters(), module.parameters(), strict=True))


def test_the_sandbox_worker_reads_what_was_sent(make_sandbox):
    sandbox = make_sandbox("def add(a, b):\n    return a + b\n", PROBES)
    sent = values()
    assert sandbox.probe("describe", (sent,), {}, "add") == [described(v) for v in sent]
    grown = sandbox.probe("grow", (torch.arange(4.0)[1:],), {}, "add")
    assert grown.tolist() == [2.0, 3.0, 4.0]
