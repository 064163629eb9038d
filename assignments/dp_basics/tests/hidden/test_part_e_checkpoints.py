"""Part E: unwrap_model, load_state_dict_flexible."""

from collections import OrderedDict

import pytest
import torch
from torch import nn

from autograder.testing import drawn, error_text

import probes

BASE = drawn().randrange(1 << 40)  # drawn for each grading; tests add their own offsets


def seeded(cls, seed: int, **kwargs):
    torch.manual_seed(BASE + seed)
    return cls(**kwargs)


def wrapped(model: nn.Module, levels: int) -> nn.Module:
    for _ in range(levels):
        model = nn.DataParallel(model)
    return model


def checkpoint(model: nn.Module, levels: int) -> dict:
    """model's state_dict as saved from `levels` DataParallel wrappers (keeps _metadata), its
    keys in an order drawn for this grading: loading must go by name, never by position."""
    saved = wrapped(model, levels).state_dict()
    keys = list(saved)
    drawn().shuffle(keys)
    shuffled = OrderedDict((k, saved[k]) for k in keys)
    shuffled._metadata = saved._metadata
    return shuffled


def assert_loaded(report: dict, source: nn.Module, what: str) -> None:
    error = report.get("error")
    assert error is None, (
        f"{what}: load_state_dict_flexible raised {error_text(error)}")
    for name, value in source.state_dict().items():
        assert name in report["state"] and torch.equal(report["state"][name], value), (
            f"{what}: after loading, {name!r} must hold the checkpoint's value")


# ----------------------------------------------------------------------------- unwrap_model


def test_unwrap_plain(student):
    """unwrap_model: returns an unwrapped model as it is"""
    for model in (nn.Linear(3, 2), probes.Holder()):
        out = student.unwrap_model(model)
        assert out.identity == "arg0", (
            f"a model that is not wrapped must be returned itself (got its {out.type_name} "
            "child?): only DataParallel / DistributedDataParallel are wrappers")
    # Returning the argument is right only from a function that also unwraps.
    holder = seeded(probes.Holder, 17)
    out = student.unwrap_model(nn.DataParallel(holder))
    assert out.type_name == "Holder" and all(
        torch.equal(out.parameters[n], p) for n, p in holder.named_parameters()), (
        f"expected the Holder inside, got a {out.type_name}")


def test_unwrap_one_level(student):
    """unwrap_model: returns the model inside one DataParallel"""
    inner = seeded(probes.PlainMLP, 0)
    out = student.unwrap_model(nn.DataParallel(inner))
    assert out.type_name == "PlainMLP", f"expected the PlainMLP inside, got a {out.type_name}"
    assert set(out.parameters) == set(dict(inner.named_parameters())), (
        "the unwrapped model's parameter names must not carry a 'module.' prefix")
    for name, value in inner.named_parameters():
        assert torch.equal(out.parameters[name], value), "the model inside must be returned"


@pytest.mark.weight(2)
def test_unwrap_nested(student):
    """unwrap_model: removes every level of nested wrappers"""
    inner = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    for levels in (2, 3):
        out = student.unwrap_model(wrapped(inner, levels))
        assert out.type_name == "Sequential", (
            f"under {levels} nested DataParallel wrappers the innermost model must be returned "
            f"(got a {out.type_name}): keep unwrapping while the model is a wrapper")
        assert torch.equal(out.parameters["0.weight"], inner[0].weight), (
            "the innermost model itself must be returned")


@pytest.mark.timeout_s(120)
def test_unwrap_ddp(student):
    """unwrap_model: unwraps DistributedDataParallel, also around DataParallel"""
    inner, inner2 = seeded(probes.PlainMLP, 15), seeded(probes.TinyMLP, 16)
    (report,) = student.run_ranks(probes.unwrap_in_ddp, 1, inner, inner2)
    for key, what, model in (("ddp", "DistributedDataParallel(model)", inner),
                             ("ddp_dp", "DistributedDataParallel(DataParallel(model))", inner2)):
        error = report[key].get("error")
        assert error is None, f"unwrap_model raised {error and error['type']} for {what}"
        out = report[key]["value"]
        assert out.type_name == type(model).__name__ and all(
            torch.equal(out.parameters[n], p) for n, p in model.named_parameters()), (
            f"unwrap_model({what}) must return the model inside (got a {out.type_name})")
    # Handing back the model that was wrapped counts only from a function that unwraps.
    out = student.unwrap_model(wrapped(inner, 2))
    assert out.type_name == "PlainMLP", (
        f"under two DataParallel wrappers the PlainMLP must be returned, not a {out.type_name}")


# ----------------------------------------------------------------------------- loading


def test_load_plain_into_plain(student):
    """load_state_dict_flexible: loads an unwrapped checkpoint into an unwrapped model"""
    source = seeded(probes.TinyMLP, 1)
    report = student.probe(probes.load_flexible, seeded(probes.TinyMLP, 2), checkpoint(source, 0),
                           0)
    assert_loaded(report, source, "an ordinary checkpoint into an ordinary model")


def test_load_wrapped_into_plain(student):
    """load_state_dict_flexible: loads a DataParallel checkpoint into an unwrapped model"""
    source = seeded(probes.TinyMLP, 3)
    report = student.probe(probes.load_flexible, seeded(probes.TinyMLP, 4), checkpoint(source, 1),
                           0)
    assert_loaded(report, source, "a checkpoint saved from DataParallel ('module.' keys) into "
                                  "an unwrapped model")


def test_load_plain_into_wrapped(student):
    """load_state_dict_flexible: loads an unwrapped checkpoint into a wrapped model"""
    source = seeded(probes.TinyMLP, 5)
    report = student.probe(probes.load_flexible, seeded(probes.TinyMLP, 6), checkpoint(source, 0),
                           1)
    assert_loaded(report, source, "an unwrapped checkpoint into a DataParallel model")
    report = student.probe(probes.load_flexible, seeded(probes.TinyMLP, 6), checkpoint(source, 1),
                           1)
    assert_loaded(report, source, "a DataParallel checkpoint into a DataParallel model")


def test_load_nested(student):
    """load_state_dict_flexible: strips nested 'module.module.' prefixes"""
    source = seeded(probes.TinyMLP, 7)
    for ckpt_levels, model_levels in ((2, 0), (2, 1), (3, 0), (1, 2)):
        report = student.probe(probes.load_flexible, seeded(probes.TinyMLP, 8),
                               checkpoint(source, ckpt_levels), model_levels)
        assert_loaded(report, source, f"a checkpoint from {ckpt_levels} nested wrappers into a "
                                      f"model in {model_levels}")


def test_load_strict(student):
    """load_state_dict_flexible: still raises for keys that are really missing or unexpected"""
    source = seeded(probes.TinyMLP, 9)
    for levels in (0, 1):
        report = student.probe(probes.load_flexible, probes.TinyMLP(), checkpoint(source, levels),
                               0)
        assert_loaded(report, source, "a complete checkpoint")  # raising always is no answer
        missing = checkpoint(source, levels)
        del missing[next(k for k in missing if k.endswith("fc2.bias"))]
        report = student.probe(probes.load_flexible, probes.TinyMLP(), missing, 0)
        assert report.get("error") is not None, (
            "a checkpoint missing a parameter must not load silently: loading stays strict")
        extra = checkpoint(source, levels)
        extra[("module." * levels) + "fc3.weight"] = torch.zeros(2, 2)
        report = student.probe(probes.load_flexible, probes.TinyMLP(), extra, 0)
        assert report.get("error") is not None, (
            "a checkpoint with a parameter the model does not have must not load silently")


def test_load_submodule_names(student):
    """load_state_dict_flexible: never changes 'module.' inside a name like 'submodule.'"""
    source = seeded(probes.Holder, 10)
    for levels in (0, 1):
        report = student.probe(probes.load_flexible, seeded(probes.Holder, 11),
                               checkpoint(source, levels), 0)
        error = report.get("error")
        assert error is None or "submodule" not in error["message"], (
            "only a leading 'module.' (one per wrapper) may be removed: a name like "
            f"'submodule.weight' must stay as it is ({error and error['message'][:200]})")
        assert error is None, (
            f"loading a checkpoint of a model with a 'submodule' child failed: "
            f"load_state_dict_flexible raised {error_text(error, 200)}")
        assert torch.equal(report["state"]["submodule.weight"], source.submodule.weight), (
            "submodule.weight must be loaded from the checkpoint")


def test_load_leaves_caller_dict(student):
    """load_state_dict_flexible: never modifies the caller's state dict"""
    source = seeded(probes.TinyMLP, 12)
    for levels in (1, 2):
        report = student.probe(probes.load_flexible, probes.TinyMLP(), checkpoint(source, levels),
                               0)
        assert_loaded(report, source, f"a checkpoint from {levels} wrapper level(s)")
        assert report["caller_keys_unchanged"], (
            "the caller's state dict must keep its keys: build a new dict instead of renaming "
            "keys in place")
        assert report["caller_values_unchanged"], "the caller's tensors must not change"
        assert report["caller_metadata_unchanged"], (
            "the caller's state dict's _metadata must not change either")


def test_load_child_named_module(student):
    """load_state_dict_flexible: keeps a real child called 'module'"""
    source = seeded(probes.Holder, 13)
    for ckpt_levels, model_levels in ((0, 0), (1, 0), (0, 1), (2, 0)):
        report = student.probe(probes.load_flexible, seeded(probes.Holder, 14),
                               checkpoint(source, ckpt_levels), model_levels)
        assert_loaded(report, source, "a model whose own child is called 'module' (keys like "
                                      "'module.weight' belong to it, not to a wrapper)")
