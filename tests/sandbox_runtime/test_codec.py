"""The codec: what may cross from a sandbox to the trusted process, and how it is rebuilt."""

import collections
import json

import pytest
import torch
from torch import nn

from autograder.sandbox_runtime.codec import (
    CodecError,
    ModuleSnapshot,
    decode,
    encode,
    remote_device,
    remote_identity,
)


def round_trip(value, identities=None):
    # Through real JSON text, as on the wire.
    return decode(json.loads(json.dumps(encode(value, identities))))


@pytest.mark.parametrize("value", [None, True, 0, -3, 2**70, 1.5, float("inf"), "é", [1, [2]],
                                   (1, "a"), {"a": [1, 2]}, {1: "x", (2, 3): "y"}])
def test_plain_values_round_trip(value):
    assert round_trip(value) == value


def test_nan_round_trips_as_nan():
    assert round_trip(float("nan")) != round_trip(float("nan"))


def test_namedtuple_comes_back_as_a_tuple():
    point = collections.namedtuple("Point", "x y")(1, 2)
    assert round_trip(point) == (1, 2) and type(round_trip(point)) is tuple


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int8, torch.uint8, torch.bool,
                                   torch.complex64])
def test_tensors_keep_dtype_shape_and_values(dtype):
    t = (torch.arange(6).reshape(2, 3) % 2).to(dtype)
    back = round_trip(t)
    assert back.dtype == dtype and back.shape == (2, 3) and torch.equal(back, t)
    assert remote_device(back) == "cpu"


def test_tensor_records_requires_grad_and_non_contiguous_views():
    t = torch.randn(3, 4, requires_grad=True)
    back = round_trip(t.t())
    assert back.requires_grad and torch.equal(back.detach(), t.t().detach())


def test_empty_and_scalar_tensors():
    assert round_trip(torch.empty(0, 3)).shape == (0, 3)
    assert round_trip(torch.tensor(2.5)).item() == 2.5


def test_dtypes_and_devices():
    assert round_trip(torch.float16) is torch.float16
    assert round_trip(torch.device("cpu")) == torch.device("cpu")


def test_module_snapshot_records_tree_parameters_buffers_and_attributes():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).eval()
    snap = round_trip(nn.DataParallel(model), {id(model): "arg0"})
    assert isinstance(snap, ModuleSnapshot)
    assert snap.type_name == "DataParallel" and snap.is_a("torch.nn.DataParallel")
    assert snap.attributes["device_ids"] == [] and snap.attributes["training"] is True
    inner = snap.children["module"]
    assert inner.identity == "arg0" and inner.attributes["training"] is False
    assert set(snap.parameters) == {"module.0.weight", "module.0.bias", "module.1.weight",
                                    "module.1.bias"}
    assert "module.1.running_mean" in snap.buffers
    assert torch.equal(snap.parameters["module.0.weight"].detach(), model[0].weight.detach())
    assert [name for name, _ in snap.modules()] == ["", "module", "module.0", "module.1"]


def test_identity_of_arguments_is_recorded():
    t = torch.ones(2)
    assert remote_identity(round_trip(t, {id(t): "kw:x"})) == "kw:x"


def test_arbitrary_objects_are_refused():
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    for value in (object(), AlwaysEqual(), lambda: 1, {1, 2}):
        with pytest.raises(CodecError, match="cannot be sent back"):
            encode(value)


def test_subclasses_of_plain_types_are_refused():
    class Liar(int):
        def __eq__(self, other):
            return True

    class Tup(tuple):
        pass

    for value in (Liar(3), Tup((1,))):
        with pytest.raises(CodecError):
            encode(value)


def test_tensor_subclass_is_read_as_a_plain_tensor():
    class Sneaky(torch.Tensor):
        def __eq__(self, other):
            return True

    back = round_trip(torch.zeros(2).as_subclass(Sneaky))
    assert type(back) is torch.Tensor and not torch.equal(back, torch.ones(2))


def test_too_deep_values_are_refused():
    value = []
    for _ in range(100):
        value = [value]
    with pytest.raises(CodecError, match="too deeply"):
        encode(value)


@pytest.mark.parametrize("forged", [
    {"$pickle": "gASVAAAA"},
    {"$tensor": {"dtype": "torch.float32", "wire_dtype": "torch.float32", "shape": [10],
                 "device": "cpu", "data": "AAAA"}},
    {"$dtype": "os.system"},
    {"$tensor": {"dtype": "torch.float32", "wire_dtype": "torch.float32", "shape": "x"}},
    {"a": 1, "b": 2},
    {"$module": {"type_name": 3}},
])
def test_decode_rejects_forged_replies(forged):
    with pytest.raises(CodecError):
        decode(forged)
