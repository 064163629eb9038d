"""The trusted side of the codec under hostile replies: nothing grows beyond the reply's size,
nothing is parsed beyond the item cap, and only real built-in exceptions count as built-in."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from autograder.sandbox.client import StudentError
from autograder.sandbox_runtime.codec import MAX_ITEMS, CodecError, decode, encode, loads


def forged_tensor(dtype: str, wire: str, raw: bytes, shape: list[int]) -> dict:
    return {"$tensor": {"dtype": dtype, "wire_dtype": wire, "shape": shape, "device": "cpu",
                        "requires_grad": False, "identity": None,
                        "data": base64.b64encode(raw).decode()}}


def test_a_cast_that_grows_the_data_is_refused():
    # 1 MiB of uint8 declared as complex128 would decode to 16 MiB (60 MiB -> 960 MiB).
    forged = forged_tensor("torch.complex128", "torch.uint8", bytes(1 << 20), [1 << 20])
    with pytest.raises(CodecError, match="cannot travel as"):
        decode(forged)


@pytest.mark.parametrize("dtype", ["torch.float64", "torch.int64", "torch.float16"])
def test_any_cast_but_the_documented_ones_is_refused(dtype):
    with pytest.raises(CodecError):
        decode(forged_tensor(dtype, "torch.float32", bytes(16), [4]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_narrow_floats_still_travel_as_float32(dtype):
    t = torch.tensor([1.0, -2.0, 0.5]).to(dtype)
    back = decode(json.loads(json.dumps(encode(t))))
    assert back.dtype == dtype and torch.equal(back.float(), t.float())


def test_a_tensor_over_the_size_cap_is_refused_before_decoding():
    count = (64 << 20) // 4 + 1
    body = forged_tensor("torch.float32", "torch.float32", b"", [count])
    body["$tensor"]["data"] = "A" * (count * 4 // 3 + 4)  # never decoded
    with pytest.raises(CodecError):
        decode(body)


def test_bool_tensors_hold_only_true_and_false():
    back = decode(forged_tensor("torch.bool", "torch.bool", bytes([0, 1, 2, 255]), [4]))
    assert back.tolist() == [False, True, True, True]
    assert back.view(torch.uint8).tolist() == [0, 1, 1, 1]


def test_a_flood_of_values_is_refused_before_parsing():
    flood = b'{"id": "x", "value": [' + b"{}," * (MAX_ITEMS + 100) + b"{}]}"
    with pytest.raises(CodecError, match="more than"):
        loads(flood)


def test_commas_and_brackets_inside_strings_do_not_count():
    honest = json.dumps({"id": "x", "value": ",[{" * (MAX_ITEMS + 10) + '\\"'}).encode()
    assert loads(honest)["value"].startswith(",[{")


def test_malformed_json_is_a_codec_error():
    with pytest.raises(CodecError):
        loads(b'{"id": ')


PEAK = textwrap.dedent("""
    import resource, sys
    from autograder.sandbox_runtime.codec import CodecError, decode, loads
    raw = open(sys.argv[1], "rb").read()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        decode(loads(raw)["value"])
        outcome = "decoded"
    except CodecError as exc:
        outcome = str(exc)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(outcome)
    print((peak - base) // 1024)
""")


@pytest.mark.parametrize("kind", ["flood", "cast"])
def test_decoding_a_hostile_reply_costs_about_its_own_size(tmp_path, kind):
    # Before: a 90 MiB reply of `{},` took 2.5 GB to parse, 60 MiB of uint8 "as complex128"
    # 960 MiB to decode. Now either is refused while the parent holds little beyond the reply.
    if kind == "flood":
        raw = b'{"id": "x", "value": [' + b"{}," * (30 << 20) + b"{}]}"  # 90 MiB
    else:
        tensor = forged_tensor("torch.complex128", "torch.uint8", bytes(60 << 20), [60 << 20])
        raw = json.dumps({"id": "x", "value": tensor}).encode()
    path = tmp_path / "reply.json"
    path.write_bytes(raw)
    del raw
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout.splitlines()
    assert out[0] != "decoded"
    assert int(out[1]) < 200, f"{kind}: decoding grew the process by {out[1]} MiB"


class _Fake(Exception):
    pass


def test_is_a_needs_the_real_builtin_class():
    _Fake.__module__, _Fake.__qualname__, _Fake.__name__ = "builtins", "ValueError", "ValueError"
    from autograder.sandbox_runtime.codec import encode_exception

    fake = StudentError("f", json.loads(json.dumps(encode_exception(_Fake("x")))))
    real = StudentError("f", json.loads(json.dumps(encode_exception(ValueError("x")))))
    assert fake.type_name == "ValueError"
    assert not fake.is_a("ValueError") and fake.is_a("Exception")
    assert real.is_a("ValueError") and real.is_a("Exception") and not real.is_a("KeyError")
    # Names that are not built-in exception types never count, whatever the reply claims.
    forged = StudentError("f", {"type_names": ["print"], "qualified": ["builtins.print"],
                                "builtin": [True]})
    assert not forged.is_a("print")

