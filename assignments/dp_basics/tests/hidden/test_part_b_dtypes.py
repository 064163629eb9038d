"""Part B: match_input_dtype."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from autograder.testing import drawn, remote_device

import probes


def kinds(structure: dict) -> str:
    """A short picture of a probe's structure report, e.g. tuple[tensor, list[tensor]]."""
    kind = structure["kind"]
    if kind == "tensor":
        return "tensor"
    items = structure.get("items")
    if isinstance(items, dict):
        return f"{kind}{{{', '.join(f'{k}: {kinds(v)}' for k, v in items.items())}}}"
    if isinstance(items, list):
        return f"{kind}[{', '.join(kinds(v) for v in items)}]"
    return kind


def converted(value, dtype: torch.dtype):
    """What match_input_dtype must return for `value` and a CPU model of floating `dtype`, as
    plain containers (the form in which a probe's values come back)."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(converted(v, dtype) for v in value)
    if isinstance(value, list):
        return [converted(v, dtype) for v in value]
    if isinstance(value, dict):
        return {str(k): converted(v, dtype) for k, v in value.items()}
    return value


def same_values(got, want, where: str = "the result") -> None:
    """Exact agreement, dtypes included, at every depth (the decoded values, not a summary)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype, (
            f"{where}: expected a {want.dtype} tensor, got "
            f"{got.dtype if isinstance(got, torch.Tensor) else type(got).__name__}")
        assert torch.equal(got, want), f"{where}: the values must be the input's, cast"
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (
            f"{where}: expected {len(want)} items")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same_values(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (
            f"{where}: expected the keys {list(want)}")
        for key in want:
            same_values(got[key], want[key], f"{where}[{key!r}]")
    else:
        assert got == want, f"{where}: objects that are not tensors must be returned as they are"


def leaf_dtypes(structure: dict) -> list[str]:
    if structure["kind"] == "tensor":
        return [structure["dtype"]]
    items = structure.get("items")
    values = items.values() if isinstance(items, dict) else (items or [])
    return [d for v in values for d in leaf_dtypes(v)]


def test_casts_to_model_dtype(student):
    """match_input_dtype: casts floating inputs to the model's floating dtype"""
    x64 = torch.randn(4, 3, dtype=torch.float64)
    out = student.match_input_dtype(x64, nn.Linear(3, 2))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32, (
        "a float64 input for a float32 model must come back as float32")
    assert torch.allclose(out.double(), x64, atol=1e-6), "casting must keep the values"
    x32 = torch.randn(4, 3)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        out = student.match_input_dtype(x32, nn.Linear(3, 2).to(dtype))
        assert out.dtype == dtype, (
            f"a float32 input for a {dtype} model must come back as {dtype}, "
            f"not {out.dtype}: follow the model's parameters, not a fixed dtype")
        assert torch.allclose(out.float(), x32.to(dtype).float()), "casting must keep values"


def test_keeps_integer_and_bool(student):
    """match_input_dtype: keeps integer index tensors and bool masks as they are"""
    idx = torch.tensor([[1, 4, 2]])
    small = torch.tensor([3, 0], dtype=torch.int32)
    mask = torch.tensor([True, False, True])
    out = student.match_input_dtype((idx, small, mask), probes.TokenModel())
    assert isinstance(out, tuple) and len(out) == 3, "a tuple must come back as a tuple"
    for got, original in zip(out, (idx, small, mask), strict=True):
        assert got.dtype == original.dtype, (
            f"a {original.dtype} tensor (indices or a mask) must keep its dtype, "
            f"got {got.dtype}: only floating-point tensors are cast")
        assert torch.equal(got, original), "integer and bool tensors must keep their values"
    # A float64 model must not turn indices into floats either, and must still cast floats.
    x = torch.randn(2, 3)
    out = student.match_input_dtype((idx, x), probes.TokenModel().double())
    assert out[0].dtype == torch.int64, "index tensors must stay int64 whatever the model's dtype"
    assert out[1].dtype == torch.float64 and torch.allclose(out[1].float(), x), (
        "next to the indices, a float32 tensor for a float64 model must become float64")


def test_numpy_arrays(student):
    """match_input_dtype: turns NumPy arrays into tensors that fit the model"""
    rng = np.random.default_rng(drawn().randrange(1 << 32))
    array = rng.standard_normal((3, 4))  # float64, like most NumPy data
    out = student.match_input_dtype(array, nn.Linear(4, 1))
    assert isinstance(out, torch.Tensor), "a NumPy array must come back as a torch.Tensor"
    assert out.dtype == torch.float32, (
        "a float64 NumPy array for a float32 model must become a float32 tensor "
        f"(got {out.dtype}): this is the classic Double-vs-Float error")
    assert torch.allclose(out.double(), torch.from_numpy(array), atol=1e-6), "values must stay"
    ints = np.array([2, 0, 1])
    out = student.match_input_dtype(ints, probes.TokenModel())
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64, (
        "an integer NumPy array must become an int64 tensor (indices stay integers)")
    assert out.tolist() == [2, 0, 1], "values must stay"
    flags = np.array([True, False])
    out = student.match_input_dtype(flags, nn.Linear(1, 1))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool, (
        "a bool NumPy array must become a bool tensor")


def test_containers(student):
    """match_input_dtype: converts lists, tuples and dicts recursively and keeps their types"""
    x = torch.randn(2, 3, dtype=torch.float64)
    idx = torch.tensor([1, 2])
    inputs = {"x": x, "pair": (idx, [x, np.ones(2)]), "extra": [{"deep": x}], "name": "batch",
              "count": 3, "nothing": None, "ratio": 0.5}
    report = student.probe(probes.match_dtype, inputs, nn.Linear(3, 1))
    expected = "dict{x: tensor, pair: tuple[tensor, list[tensor, tensor]], " \
               "extra: list[dict{deep: tensor}], name: str, count: int, nothing: NoneType, " \
               "ratio: float}"
    got = kinds(report["structure"])
    assert got == expected, (
        f"containers must keep their type and shape: expected {expected}, got {got}")
    assert leaf_dtypes(report["structure"]) == ["torch.float32", "torch.int64", "torch.float32",
                                                "torch.float32", "torch.float32"], (
        "every floating tensor at any depth must be cast; integer tensors keep their dtype")
    same_values(report["values"], converted(inputs, torch.float32))
    # An OrderedDict stays an OrderedDict; a list stays a list.
    ordered = OrderedDict(b=x, a=[x])
    report = student.probe(probes.match_dtype, ordered, nn.Linear(3, 1))
    assert kinds(report["structure"]) == "OrderedDict{b: tensor, a: list[tensor]}", (
        "an OrderedDict must come back as an OrderedDict with its keys in order")
    same_values(report["values"], converted(ordered, torch.float32))


def test_namedtuples(student):
    """match_input_dtype: keeps namedtuple types"""
    x = torch.randn(2, 3, dtype=torch.float64)
    batch = probes.Batch(x=x, idx=torch.tensor([0, 1]), meta=probes.Pair(x, torch.ones(2) > 0))
    report = student.probe(probes.match_dtype, batch, nn.Linear(3, 1))
    structure = report["structure"]
    assert structure["kind"] == "Batch" and structure["fields"] == ["x", "idx", "meta"], (
        f"a namedtuple must come back as the same namedtuple type, got a {structure['kind']}")
    inner = structure["items"][2]
    assert inner["kind"] == "Pair", "a namedtuple nested inside another must keep its type too"
    assert leaf_dtypes(structure) == ["torch.float32", "torch.int64", "torch.float32",
                                      "torch.bool"], "the namedtuple's fields must be converted"
    same_values(report["values"], converted(batch, torch.float32))


def test_models_without_float_parameters(student):
    """match_input_dtype: uses buffers without parameters, and changes no dtype without either"""
    x32 = torch.randn(3)
    out = student.match_input_dtype(x32, probes.BufferOnly(torch.float64))
    assert out.dtype == torch.float64, (
        "a model without parameters takes its dtype from its floating-point buffers")
    out = student.match_input_dtype(x32, probes.IntParamFloatBuffer())
    assert out.dtype == torch.float16, (
        "integer parameters carry no floating dtype: the floating-point buffers decide")
    for x in (x32, torch.randn(3, dtype=torch.float64)):
        out = student.match_input_dtype(x, probes.IntegerOnly())
        assert out.dtype == x.dtype and torch.equal(out, x), (
            "a model with no floating-point parameters or buffers must leave dtypes alone")
    out = student.match_input_dtype(x32, nn.ReLU())
    assert out.dtype == torch.float32 and torch.equal(out, x32), (
        "a model with no parameters or buffers at all must leave the input as it is")


def test_no_in_place_changes(student):
    """match_input_dtype: never changes the caller's tensors or containers"""
    x = torch.randn(2, 3, dtype=torch.float64)
    inputs = [x, {"y": x.clone(), "i": torch.tensor([1])}, (x.clone(),)]
    report = student.probe(probes.match_dtype, inputs, nn.Linear(3, 1))
    assert report["inputs_structure_after"] == report["inputs_structure_before"], (
        "the caller's inputs must keep their dtypes and structure: return new tensors and "
        "containers instead of changing them in place")
    before, after = report["inputs_before"], report["inputs_after"]
    assert torch.equal(before[0], x) and torch.equal(after[0], x) and \
        torch.equal(after[1]["y"], inputs[1]["y"]), "the caller's tensors must keep their values"
    # Leaving the inputs alone counts only from a function that converts them.
    assert leaf_dtypes(report["structure"]) == ["torch.float32", "torch.float32", "torch.int64",
                                                "torch.float32"], "the result must be cast"
    same_values(report["values"], converted(inputs, torch.float32))


def test_moves_to_model_gpu(student):
    """match_input_dtype: moves every tensor to the GPU the model is on"""
    gpus = student.simulated()
    rng = drawn()
    device = f"cuda:{rng.randrange(gpus.gpus)}"
    x = torch.randn(2, 3, dtype=torch.float64)
    idx = torch.tensor([rng.randrange(5), rng.randrange(5)])
    report = gpus.probe(probes.match_dtype_on, (x, idx, np.ones(2)), nn.Linear(3, 1), device)
    devices = [leaf.get("device") for leaf in report["structure"]["items"]]
    assert devices == [device] * 3, (
        f"with the model on {device}, floating tensors, integer tensors and NumPy arrays must "
        f"all move to {device}: got {devices}")
    assert leaf_dtypes(report["structure"]) == ["torch.float32", "torch.int64",
                                                "torch.float32"], (
        "moving must keep the dtype rules: cast floating values, keep integers")
    values = report["device_values"]
    assert [remote_device(t) for t in values] == [device] * 3, (
        f"the returned tensors must live on {device}")
    same_values(values, [x.float(), idx, torch.ones(2, dtype=torch.float32)])


@pytest.mark.weight(0)
@pytest.mark.gpu
@pytest.mark.timeout_s(120)
def test_moves_to_model_device(student):
    """match_input_dtype: moves tensors to a real GPU (cuda:0)"""
    report = student.probe(probes.match_dtype_on,
                           (torch.randn(2, 3, dtype=torch.float64), torch.tensor([1, 0])),
                           nn.Linear(3, 1), "cuda:0")
    devices = [leaf["device"] for leaf in report["structure"]["items"]]
    assert devices == ["cuda:0", "cuda:0"], (
        "floating and integer tensors must both move to the model's device (cuda:0)")
    assert leaf_dtypes(report["structure"]) == ["torch.float32", "torch.int64"], (
        "moving must not change integer dtypes")
    assert all(remote_device(t) == "cuda:0" for t in report["device_values"]), (
        "the returned tensors must live on cuda:0")
