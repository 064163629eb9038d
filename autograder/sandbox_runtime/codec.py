"""The safe codec between a sandbox and the trusted process.

`encode` runs in the sandbox and turns a value into JSON-able plain data; `decode` runs in the
trusted process and rebuilds plain values, CPU tensors and `ModuleSnapshot`s from it. Nothing is
ever unpickled and no student-made object crosses alive: the trusted side only sees JSON.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32
MAX_ITEMS = 100_000
MAX_TENSOR_BYTES = 64 * 1024 * 1024
# A reply's envelope (id, value/raised, the exceptions a scenario caught: each about 70 values,
# 8 at most) holds that many values besides the encoded result.
ENVELOPE_ITEMS = 1024
# Public attributes worth recording on module snapshots (DataParallel, DDP, BatchNorm, Linear...).
MODULE_ATTRIBUTES = (
    "training", "device_ids", "output_device", "dim", "num_features", "eps", "momentum",
    "affine", "track_running_stats", "in_features", "out_features", "broadcast_buffers",
    "find_unused_parameters", "gradient_as_bucket_view",
)


class CodecError(Exception):
    """A value that may not cross the wall, or a reply that is not well formed."""


# ---------------------------------------------------------------- sandbox side: encode

def encode(value: Any, identities: dict[int, str] | None = None) -> Any:
    """Plain data for `value`. `identities` maps id(obj) -> label for the call's arguments."""
    return _Encoder(identities or {}).encode(value, 0)


class _Encoder:
    def __init__(self, identities: dict[int, str]) -> None:
        self.identities = identities
        self.items = 0

    def encode(self, value: Any, depth: int) -> Any:
        import torch  # sandbox side only; the trusted parent never needs torch for this

        self.items += 1
        if depth > MAX_DEPTH or self.items > MAX_ITEMS:
            raise CodecError("the value is nested too deeply or is too large to send back")
        # Exact types only: a subclass of int/str/tuple could lie through __eq__ or __str__.
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if abs(value) < 2**63 else {"$int": str(value)}
        if kind is float:
            return value if math.isfinite(value) else {"$float": repr(value)}
        if kind is list:
            return [self.encode(v, depth + 1) for v in value]
        if isinstance(value, tuple) and _is_plain_tuple(value):
            return {"$tuple": [self.encode(v, depth + 1) for v in tuple.__iter__(value)]}
        if kind is dict:
            if not all(type(k) is str for k in value):
                return {"$dict": [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                                  for k, v in dict.items(value)]}
            return {"$map": {k: self.encode(v, depth + 1) for k, v in dict.items(value)}}
        if kind is torch.dtype:
            return {"$dtype": str(value)}
        if kind is torch.device:
            return {"$device": str(value)}
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, torch.nn.Module):
            return self.module(value, depth)
        raise CodecError(f"values of type {_type_name(value)} cannot be sent back to the grader")

    def tensor(self, t: Any) -> dict:
        import torch

        # A tensor subclass could override every method: read it as a plain tensor.
        plain = torch.Tensor._make_subclass(torch.Tensor, t.detach()) if type(t) is not \
            torch.Tensor else t.detach()
        if plain.is_sparse or plain.layout != torch.strided:
            plain = plain.to_dense()
        device, requires_grad = str(t.device), bool(t.requires_grad)
        cpu = plain.to("cpu").contiguous()
        # NumPy has no bfloat16 or float8: those travel as float32 and are cast back.
        if cpu.dtype == torch.bfloat16 or (cpu.dtype.is_floating_point and cpu.element_size() == 1):
            data, wire_dtype = cpu.to(torch.float32).numpy().tobytes(), "torch.float32"
        else:
            data, wire_dtype = cpu.numpy().tobytes(), str(cpu.dtype)
        if len(data) > MAX_TENSOR_BYTES:
            raise CodecError(f"a tensor of {len(data)} bytes is too large to send back")
        return {"$tensor": {
            "dtype": str(t.dtype), "wire_dtype": wire_dtype, "shape": list(cpu.shape),
            "device": device, "requires_grad": requires_grad,
            "data": base64.b64encode(data).decode("ascii"),
            "identity": self.identities.get(id(t)),
        }}

    def module(self, m: Any, depth: int) -> dict:
        import torch

        nn = torch.nn
        attributes = {}
        for name in MODULE_ATTRIBUTES:
            raw = m.__dict__.get(name, _MISSING)
            if raw is _MISSING:
                continue
            try:
                attributes[name] = self.encode(raw, depth + 1)
            except CodecError:
                attributes[name] = {"$repr": f"<{_type_name(raw)}>"}
        # Modules are read through nn.Module's own methods, never the student's overrides.
        params = {n: self.tensor(p) for n, p in nn.Module.named_parameters(m)}
        buffers = {n: self.tensor(b) for n, b in nn.Module.named_buffers(m)}
        children = {n: self.module(c, depth + 1) for n, c in nn.Module.named_children(m)}
        cls = type(m)
        return {"$module": {
            "type_name": class_name(cls), "type_module": cls.__module__,
            "lineage": [f"{c.__module__}.{class_name(c)}" for c in cls.__mro__],
            "attributes": attributes, "parameters": params, "buffers": buffers,
            "children": children, "identity": self.identities.get(id(m)),
        }}


_MISSING = object()

# Torch's own classes by name (torch.nn, its modules, torch.utils.data), bound by the worker
# before the student's module is imported (`bind_torch_classes`): a class the student made
# under the name of one of them is named as a look-alike, never as torch's.
_TORCH_CLASSES: dict[str, type] = {}


def bind_torch_classes() -> None:
    import torch
    import torch.utils.data

    for module in (torch.nn, torch.nn.parallel, torch.utils.data):
        for name, value in vars(module).items():
            if isinstance(value, type):
                _TORCH_CLASSES.setdefault(name, value)


def class_name(cls: Any) -> str:
    """`cls.__qualname__`, unless it is the name of a torch class that `cls` is not (nor
    derives from): then where it comes from, marked as a look-alike."""
    name = str(getattr(cls, "__qualname__", "?"))
    real = _TORCH_CLASSES.get(name)
    if real is None or (isinstance(cls, type) and issubclass(cls, real)):
        return name
    return f"{name} (a look-alike from {getattr(cls, '__module__', '?')}, not torch's)"


def _is_plain_tuple(value: Any) -> bool:
    # Namedtuples cross as plain tuples; other tuple subclasses are refused.
    kind = type(value)
    return kind is tuple or (tuple in kind.__bases__ and hasattr(kind, "_fields"))


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def encode_exception(exc: BaseException) -> dict:
    """Plain data for a student exception (its type names and message, nothing alive).

    `builtin` says, class by class, whether it *is* the built-in class of that name: a
    student's own class may claim `__module__ = "builtins"`, but it is not that object."""
    import builtins

    try:
        message = str(exc)
    except BaseException:  # a hostile __str__
        message = "<the exception's message could not be read>"
    mro = type(exc).__mro__[:20]
    return {"type_names": [str(getattr(c, "__qualname__", "?")) for c in mro],
            "qualified": [f"{getattr(c, '__module__', '?')}.{getattr(c, '__qualname__', '?')}"
                          for c in mro],
            "builtin": [getattr(builtins, str(getattr(c, "__name__", "")), None) is c
                        for c in mro],
            "message": message[:4000]}


# ---------------------------------------------------------------- trusted side: decode

@dataclass
class ModuleSnapshot:
    """What a student's `nn.Module` looked like when it was sent back."""

    type_name: str
    type_module: str
    lineage: list[str]
    attributes: dict[str, Any]
    parameters: dict[str, Any]
    buffers: dict[str, Any]
    children: dict[str, ModuleSnapshot]
    identity: str | None = None

    def is_a(self, name: str) -> bool:
        """True when the class is or derives from `name`: 'DataParallel' or a public path such
        as 'torch.nn.DataParallel' (matching torch.nn.parallel.data_parallel.DataParallel)."""
        package, _, cls = name.rpartition(".")
        for entry in self.lineage:
            module, _, qualname = entry.rpartition(".")
            if qualname == cls and (not package or module == package
                                    or module.startswith(package + ".")):
                return True
        return False

    def modules(self, prefix: str = ""):
        """(name, snapshot) for this module and every descendant, like `named_modules`."""
        yield prefix, self
        for name, child in self.children.items():
            yield from child.modules(f"{prefix}.{name}" if prefix else name)


def remote_device(t: Any) -> str:
    """The device a decoded tensor was on in the sandbox (e.g. 'cuda:0')."""
    return getattr(t, "_remote_device", "cpu")


def remote_identity(t: Any) -> str | None:
    """Which argument a decoded tensor *was* in the sandbox ('arg0', 'kw:x'), if any."""
    return getattr(t, "_remote_identity", None)


def loads(raw: bytes) -> Any:
    """Parse a reply's JSON text, refusing one with more values than `decode` accepts before
    parsing it: `json.loads` of 90 MiB of `{},` would build millions of objects (2.5 GB).

    Every JSON value but the first is the first of its container or follows a comma, so
    1 + count('[', '{', ',') bounds the values (and keys); commas inside strings only make that
    bound loose, and then strings are blanked out (C speed, one copy) for an exact count."""
    limit = MAX_ITEMS + ENVELOPE_ITEMS
    if _structure(raw) > limit and _structure(_STRINGS.sub(b'""', raw)) > limit:
        raise CodecError(f"the reply holds more than {MAX_ITEMS} values")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CodecError("the sandbox sent a malformed reply") from exc
    except MemoryError:
        raise CodecError("the reply was too large to check") from None


_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _structure(raw: bytes) -> int:
    return 1 + raw.count(b"[") + raw.count(b"{") + raw.count(b",")


def decode(data: Any) -> Any:
    """Rebuild a value from `encode`'s plain data; raises CodecError, and only CodecError, on
    anything else: a forged reply is the student's fault, never an error of the grader."""
    _count(data)
    try:
        return _decode(data, 0)
    except CodecError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RuntimeError,
            OverflowError, RecursionError, MemoryError) as exc:  # binascii.Error is a ValueError
        raise CodecError(f"malformed reply from the sandbox ({type(exc).__name__})") from None


def _count(data: Any) -> None:
    """Refuse replies with more items than any honest value has (cheap: no recursion)."""
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise CodecError(f"the reply holds more than {MAX_ITEMS} values")
        if type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item.values())


def _decode(data: Any, depth: int) -> Any:
    if depth > MAX_DEPTH + 2:
        raise CodecError("reply nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise CodecError("malformed reply from the sandbox")
    (tag, body), = data.items()
    if tag == "$int":
        return int(body)
    if tag == "$float":
        return float(body)
    if tag == "$tuple":
        return tuple(_decode(v, depth + 1) for v in _expect(body, list))
    if tag == "$map":
        return {str(k): _decode(v, depth + 1) for k, v in _expect(body, dict).items()}
    if tag == "$dict":
        return {_hashable(_decode(k, depth + 1)): _decode(v, depth + 1)
                for k, v in _expect(body, list)}
    if tag == "$dtype":
        return _dtype(body)
    if tag == "$device":
        import torch

        return torch.device(_expect(body, str))
    if tag == "$tensor":
        return _tensor(_expect(body, dict))
    if tag == "$module":
        return _module(_expect(body, dict), depth)
    if tag == "$repr":
        return _expect(body, str)
    raise CodecError(f"unknown tag {tag!r} in reply from the sandbox")


def _expect(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise CodecError("malformed reply from the sandbox")
    return value


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError as exc:
        raise CodecError("unhashable dict key in reply") from exc
    return value


def _dtype(name: Any) -> Any:
    import torch

    name = _expect(name, str)
    attr = name.removeprefix("torch.")
    value = getattr(torch, attr, None)
    if not name.startswith("torch.") or type(value) is not torch.dtype:
        raise CodecError(f"unknown dtype {name!r}")
    return value


def _narrow_float(dtype: Any) -> bool:
    """bfloat16 and the float8 types: NumPy has none, so they travel as float32 (see encode)."""
    import torch

    return dtype == torch.bfloat16 or (dtype.is_floating_point and dtype.itemsize == 1)


def _tensor(body: dict) -> Any:
    import torch

    dtype, wire = _dtype(body.get("dtype")), _dtype(body.get("wire_dtype"))
    # The only honest cast is float32 on the wire to a narrower float, which shrinks the data:
    # any other (60 MiB of uint8 "as complex128" is 960 MiB) would grow it on the trusted side.
    if wire != dtype and not (wire == torch.float32 and _narrow_float(dtype)):
        raise CodecError(f"a tensor of {dtype} cannot travel as {wire}")
    shape = [int(_expect(s, int)) for s in _expect(body.get("shape"), list)]
    if any(s < 0 for s in shape) or len(shape) > 64:
        raise CodecError("malformed tensor shape")
    count = math.prod(shape)
    data = _expect(body.get("data"), str)
    # Checked before decoding anything: the base64 text is 4/3 of the raw size, exactly.
    if count * wire.itemsize != len(data) // 4 * 3 - data[-2:].count("=") \
            or count * max(wire.itemsize, dtype.itemsize) > MAX_TENSOR_BYTES:
        raise CodecError("tensor data does not match its shape")
    raw = base64.b64decode(data, validate=True)
    if count * wire.itemsize != len(raw):
        raise CodecError("tensor data does not match its shape")
    if dtype == torch.bool:  # bytes other than 0 and 1 would make a bool tensor that lies
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).ne(0) if raw else \
            torch.empty(0, dtype=torch.bool)
    else:
        flat = torch.frombuffer(bytearray(raw), dtype=wire) if raw else \
            torch.empty(0, dtype=wire)
    t = flat.reshape(shape).to(dtype) if wire != dtype else flat.reshape(shape)
    if body.get("requires_grad") is True and (t.is_floating_point() or t.is_complex()):
        t.requires_grad_(True)
    t._remote_device = _expect(body.get("device"), str)
    t._remote_identity = body.get("identity")
    return t


def _module(body: dict, depth: int) -> ModuleSnapshot:
    def tensors(key: str) -> dict:
        return {str(k): _tensor(_expect(v, dict)["$tensor"])
                for k, v in _expect(body.get(key), dict).items()}

    return ModuleSnapshot(
        type_name=_expect(body.get("type_name"), str),
        type_module=_expect(body.get("type_module"), str),
        lineage=[_expect(m, str) for m in _expect(body.get("lineage"), list)],
        attributes={str(k): _decode(v, depth + 1)
                    for k, v in _expect(body.get("attributes"), dict).items()},
        parameters=tensors("parameters"),
        buffers=tensors("buffers"),
        children={str(k): _module(_expect(v, dict)["$module"], depth + 1)
                  for k, v in _expect(body.get("children"), dict).items()},
        identity=body.get("identity") if type(body.get("identity")) is str else None,
    )
