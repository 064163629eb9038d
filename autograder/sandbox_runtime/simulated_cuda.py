"""Simulated GPUs for CPU graders: the GPU branches of student code run, and are recorded.

`activate(n)` makes this process look like a machine with `n` CUDA devices before the student's
module is imported: `torch.cuda.is_available()` is True, `device_count()` is `n`, moves to
`cuda:i` (`.to`, `.cuda`, factories with `device=`) are accepted, and every tensor carries the
device it *would* be on, shown by `tensor.device`. The data stays on the CPU and every computation
is real. An operation mixing tensors of two simulated devices raises PyTorch's own error, so a
batch left on the CPU fails the forward pass as it would on a GPU. `nn.DataParallel` checks its
module's placement and gathers on `output_device`; `DistributedDataParallel` keeps the
`device_ids` it was given (checked as PyTorch checks them) and moves inputs to that device;
`init_process_group(backend="nccl")` runs on gloo; `torch.cuda.set_device` is recorded.

What it cannot show (left to the real-GPU tests): scatter and gather across real devices (a
simulated DataParallel computes the whole batch as one replica, so train-mode BatchNorm
statistics differ from real DataParallel), nccl itself, SyncBatchNorm's statistics, streams,
memory, and anything student code does through C++ extensions or `ctypes`.

This module holds no expected value and no verdict: it reports what student code asked for
(`journal()`), and the trusted side compares that with what the reference solution asks for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_LABEL = "_ag_simulated_device"
_CPU = torch.device("cpu")
_REAL_DEVICE = torch._C.TensorBase.device.__get__
_state: dict[str, Any] = {"count": 0, "current": 0, "backend": None, "active": False,
                          "journal": []}


def active() -> bool:
    return bool(_state["active"])


def journal() -> list[dict]:
    """What student code asked of the simulated GPUs, in order (plain data)."""
    return list(_state["journal"])


def _record(event: str, **details: Any) -> None:
    if len(_state["journal"]) < 1000:
        _state["journal"].append({"event": event, **details})


# --------------------------------------------------------------------------- devices


def _device(value: Any) -> torch.device | None:
    """The torch.device a `device=` argument means here (`cuda` alone: the current GPU)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = torch.device("cuda", value)
    device = torch.device(value)
    if device.type == "cuda":
        index = _state["current"] if device.index is None else device.index
        if not 0 <= index < _state["count"]:
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be "
                               "asynchronously reported at some other API call")
        return torch.device("cuda", index)
    return device


def simulated_device(t: torch.Tensor) -> torch.device:
    """The device `t` is on in the simulation (the real one for unlabelled tensors)."""
    return t.__dict__.get(_LABEL) or _REAL_DEVICE(t)


def _label(t: Any, device: torch.device) -> Any:
    if isinstance(t, torch.Tensor):
        try:
            t.__dict__[_LABEL] = device
        except (AttributeError, RuntimeError, TypeError):
            pass
    return t


def place(value: Any, device: torch.device = _CPU) -> Any:
    """Label every tensor in `value` (and a module's parameters and buffers) as on `device`."""
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, nn.Module):
            for t in chain(leaf.parameters(), leaf.buffers()):
                _label(t, device)
        else:
            _label(leaf, device)
    return value


def _tensors(args: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(args)[0] if isinstance(leaf, torch.Tensor)]


def _devices_of(tensors: list[torch.Tensor]) -> set[torch.device]:
    """Devices of the tensors an operation reads. As in PyTorch, 0-dim CPU tensors mix with
    anything; so do tensors made where the simulation cannot see (autograd's gradients)."""
    found = set()
    for t in tensors:
        label = t.__dict__.get(_LABEL)
        if label is not None and not (label.type == "cpu" and t.dim() == 0):
            found.add(label)
    return found


# Operations that legitimately read tensors on two devices; their result is where the first is.
_CROSS_DEVICE = {"copy_", "__getitem__", "__setitem__", "set_", "__get__", "__set__",
                 "__repr__", "__format__", "__str__", "tolist", "item", "__reduce_ex__",
                 "__deepcopy__", "_make_subclass", "numpy",
                 "_has_compatible_shallow_copy_type"}


class _Mode(TorchFunctionMode):
    """Labels every tensor made with the device it would be on, and refuses mixed devices."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in ("to", "cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
            return _move(func, name, args, kwargs)
        if name == "numpy" and simulated_device(args[0]).type == "cuda":
            raise TypeError(f"can't convert {simulated_device(args[0])} device type tensor to "
                            "numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        if "device" in kwargs:
            target = _device(kwargs["device"]) or _CPU
            kwargs["device"] = _CPU
        elif name in _CROSS_DEVICE:
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            target = None if first is None else first.__dict__.get(_LABEL)
        else:
            tensors = _tensors((args, kwargs))
            devices = _devices_of(tensors)
            if len(devices) > 1:
                first, second = sorted(devices, key=str)[:2]
                raise RuntimeError("Expected all tensors to be on the same device, but found "
                                   f"at least two devices, {second} and {first}!")
            # A factory (no tensor read) makes a CPU tensor; else it stays where its inputs are.
            target = next(iter(devices), None) if tensors else _CPU
        out = func(*args, **kwargs)
        if target is not None:
            for t in _tensors(out):
                _label(t, target)
        return out


def _move(func: Callable, name: str, args: tuple, kwargs: dict) -> Any:
    tensor, rest = args[0], args[1:]
    if name == "cpu":
        target = _CPU
    elif name == "cuda":
        index = rest[0] if rest else kwargs.pop("device", None)
        rest = ()
        target = _device(torch.device("cuda", index) if isinstance(index, int)
                         else (index or "cuda"))
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
    else:
        if rest and isinstance(rest[0], torch.Tensor):  # .to(other): other's device and dtype
            target = simulated_device(rest[0])
            rest, kwargs = (rest[0].dtype, *rest[1:]), kwargs
        else:
            parsed_device = torch._C._nn._parse_to(*rest, **kwargs)[0]
            target = _device(parsed_device) if parsed_device is not None else None
            rest = tuple(_CPU if isinstance(a, (str, torch.device, int)) and
                         not isinstance(a, bool) and _is_device_arg(a) else a for a in rest)
            if "device" in kwargs:
                kwargs["device"] = _CPU
    current = simulated_device(tensor)
    if name == "cuda" or name == "cpu":
        out = torch._C.TensorBase.to(tensor, _CPU)
    else:
        out = func(tensor, *rest, **kwargs)
    if target is None:
        target = current
    if out is tensor and target != current:
        out = tensor.clone()  # a real move makes a new tensor: the caller's stays where it was
    return _label(out, target) if out is not tensor else out


def _is_device_arg(value: Any) -> bool:
    if isinstance(value, torch.device):
        return True
    if isinstance(value, int):
        return True
    try:
        torch.device(value)
        return True
    except (TypeError, RuntimeError):
        return False


# --------------------------------------------------------------------------- SyncBatchNorm
# SyncBatchNorm's autograd function calls five CUDA-only kernels; these are their CPU
# equivalents, so that its statistics really are synchronised across (gloo) ranks here.


def _channel_view(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.reshape([1, -1] + [1] * (like.dim() - 2))


def _reduced_dims(t: torch.Tensor) -> list[int]:
    return [d for d in range(t.dim()) if d != 1]


def _bn_stats(input: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _reduced_dims(input)
    var = input.var(dims, unbiased=False)
    return input.mean(dims), torch.rsqrt(var + eps)


def _bn_gather_stats(input: torch.Tensor, mean_all: torch.Tensor, invstd_all: torch.Tensor,
                     running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                     momentum: float, eps: float,
                     counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    counts = counts.to(mean_all.dtype).reshape(-1, 1)
    total = counts.sum()
    mean = (mean_all * counts).sum(0) / total
    var_all = invstd_all.pow(-2) - eps
    var = ((var_all + (mean_all - mean) ** 2) * counts).sum(0) / total
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
        if running_var is not None:
            unbiased = var * total / (total - 1)
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
    return mean, torch.rsqrt(var + eps)


def _bn_elemt(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              mean: torch.Tensor, invstd: torch.Tensor, eps: float) -> torch.Tensor:
    out = (input - _channel_view(mean, input)) * _channel_view(invstd, input)
    if weight is not None:
        out = out * _channel_view(weight, input)
    if bias is not None:
        out = out + _channel_view(bias, input)
    return out


def _bn_backward_reduce(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                        invstd: torch.Tensor, weight: torch.Tensor | None, input_g: bool,
                        weight_g: bool, bias_g: bool) -> tuple:
    dims = _reduced_dims(input)
    sum_dy = grad_out.sum(dims)
    sum_dy_xmu = (grad_out * (input - _channel_view(mean, input))).sum(dims)
    grad_weight = sum_dy_xmu * invstd if weight_g else None
    return sum_dy, sum_dy_xmu, grad_weight, sum_dy if bias_g else None


def _bn_backward_elemt(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                       invstd: torch.Tensor, weight: torch.Tensor | None, sum_dy: torch.Tensor,
                       sum_dy_xmu: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    total = count.sum().to(grad_out.dtype)
    scale = invstd if weight is None else invstd * weight
    xmu = input - _channel_view(mean, input)
    grad = (grad_out - _channel_view(sum_dy / total, input)
            - xmu * _channel_view(invstd ** 2 * sum_dy_xmu / total, input))
    return grad * _channel_view(scale, input)


# Replaced on the torch module itself: the backward pass runs where no TorchFunctionMode is.
_KERNELS = {"batch_norm_stats": _bn_stats,
            "batch_norm_gather_stats_with_counts": _bn_gather_stats,
            "batch_norm_elemt": _bn_elemt,
            "batch_norm_backward_reduce": _bn_backward_reduce,
            "batch_norm_backward_elemt": _bn_backward_elemt}


# --------------------------------------------------------------------------- torch.cuda


class _Properties:
    def __init__(self, index: int) -> None:
        self.name = "Simulated GPU"
        self.total_memory = 16 << 30
        self.multi_processor_count = 80
        self.major, self.minor = 8, 0
        self.index = index


def _cuda_functions() -> dict[str, Callable]:
    def is_available() -> bool:
        return True

    def device_count() -> int:
        return int(_state["count"])

    def current_device() -> int:
        return int(_state["current"])

    def set_device(device: Any) -> None:
        target = _device(device if not isinstance(device, int) else torch.device("cuda", device))
        if target is None or target.type != "cuda":
            return
        _state["current"] = target.index
        _record("set_device", device=str(target))

    def get_device_properties(device: Any = None) -> _Properties:
        index = _device(device if device is not None else "cuda")
        return _Properties(index.index)

    def get_device_name(device: Any = None) -> str:
        return get_device_properties(device).name

    def noop() -> Callable[..., None]:
        # One function per name: torch._dynamo refuses one object under two names.
        def nothing(*args: Any, **kwargs: Any) -> None:
            return None
        return nothing

    return {"is_available": is_available, "device_count": device_count,
            "current_device": current_device, "set_device": set_device,
            "get_device_properties": get_device_properties, "get_device_name": get_device_name,
            "synchronize": noop(), "empty_cache": noop(), "init": noop(),
            "is_current_stream_capturing": lambda: False,
            "manual_seed": noop(), "manual_seed_all": noop()}


# --------------------------------------------------------------------------- wrappers


def _data_parallel_forward(self: nn.DataParallel, *inputs: Any, **kwargs: Any) -> Any:
    if not self.device_ids:
        return self.module(*inputs, **kwargs)
    for t in chain(self.module.parameters(), self.module.buffers()):
        if t.device != self.src_device_obj:
            raise RuntimeError("module must have its parameters and buffers on device "
                               f"{self.src_device_obj} (device_ids[0]) but found one of them "
                               f"on device: {t.device}")
    # Scatter puts each chunk on its device and replicas compute there; simulated, one
    # replica on device_ids[0] computes the whole batch. Gather brings it to output_device.
    moved = tree_map(lambda t: t.to(self.src_device_obj) if isinstance(t, torch.Tensor) else t,
                     (inputs, kwargs))
    out = self.module(*moved[0], **moved[1])
    output = torch.device("cuda", self.output_device) if isinstance(self.output_device, int) \
        else torch.device(self.output_device)
    return tree_map(lambda t: t.to(output) if isinstance(t, torch.Tensor) else t, out)


def _ddp_init(original: Callable) -> Callable:
    @functools.wraps(original)
    def init(self: DistributedDataParallel, module: nn.Module, device_ids: Any = None,
             output_device: Any = None, *args: Any, **kwargs: Any) -> None:
        devices = {simulated_device(t) for t in chain(module.parameters(), module.buffers())}
        _record("DistributedDataParallel", device_ids=_jsonable(device_ids),
                output_device=_jsonable(output_device),
                module_devices=sorted(str(d) for d in devices))
        on_gpu = len(devices) == 1 and next(iter(devices)).type == "cuda"
        if (device_ids or output_device is not None) and not on_gpu:
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work with "
                "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                f"{device_ids}, output_device {output_device}, and module parameters {devices}.")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        # Built as a CPU module, which DDP refuses to hold SyncBatchNorm layers: a GPU module
        # may, so that check is skipped for one.
        check = DistributedDataParallel._passing_sync_batchnorm_handle
        with suspended():
            if on_gpu:
                DistributedDataParallel._passing_sync_batchnorm_handle = lambda *_: None
            try:
                original(self, module, None, None, *args, **kwargs)
            finally:
                DistributedDataParallel._passing_sync_batchnorm_handle = check
        if len(devices) == 1:
            place(module, next(iter(devices)))
        if on_gpu:
            self.device_type = "cuda"
            self.use_side_stream_for_tensor_copies = False
            if device_ids:
                self.device_ids = [_device(torch.device("cuda", d) if isinstance(d, int)
                                           else d).index for d in device_ids]
                self.output_device = self.device_ids[0] if output_device is None else \
                    _device(torch.device("cuda", output_device)
                            if isinstance(output_device, int) else output_device).index
    return init


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _init_process_group(original: Callable) -> Callable:
    @functools.wraps(original)
    def init(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend is None:
            backend = kwargs.pop("backend", None)
        requested = None if backend is None else str(backend)
        _record("init_process_group", backend=requested,
                current_device=int(_state["current"]))
        _state["backend"] = requested
        real = "gloo" if requested is None or "nccl" in requested.lower() else backend
        return original(real, *args, **kwargs)
    return init


def _get_backend(original: Callable) -> Callable:
    @functools.wraps(original)
    def get_backend(group: Any = None) -> str:
        real = original(group)
        return _state["backend"] if group is None and _state["backend"] else real
    return get_backend


def _module_move(original: Callable, name: str) -> Callable:
    @functools.wraps(original)
    def move(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        if name == "cpu":
            target: torch.device | None = _CPU
        elif name == "cuda":
            index = args[0] if args else kwargs.get("device")
            target = _device(torch.device("cuda", index) if isinstance(index, int)
                             else (index or "cuda"))
        else:
            parsed = torch._C._nn._parse_to(*args, **kwargs)[0]
            target = None if parsed is None else _device(parsed)
        if target is not None:
            _record(f"Module.{name}", module=type(self).__name__, device=str(target))
        result = original(self, *args, **kwargs)  # the mode moves (and labels) each tensor
        if target is not None:
            place(self, target)  # `param.data = moved` keeps the Parameter, not the label
        return result
    return move


# --------------------------------------------------------------------------- switch

_saved: list[tuple[Any, str, Any]] = []
_mode = _Mode()


def _patch(owner: Any, name: str, value: Any) -> None:
    _saved.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                   else getattr(owner, name, _MISSING)))
    setattr(owner, name, value)


_MISSING = object()


def hide_gpus() -> None:
    """Make this process see no GPU, as on a CPU grader, even where the grader has some."""
    _patch(torch.cuda, "is_available", lambda: False)
    _patch(torch.cuda, "device_count", lambda: 0)


def activate(count: int) -> None:
    """Turn this process into one with `count` simulated GPUs (for the rest of its life)."""
    if _state["active"]:
        return
    _state.update(count=int(count), current=0, active=True)
    for name, fn in _cuda_functions().items():
        _patch(torch.cuda, name, fn)
    _patch(torch.Tensor, "device", property(simulated_device))
    _patch(torch.Tensor, "is_cuda", property(lambda t: simulated_device(t).type == "cuda"))
    _patch(torch.Tensor, "get_device",
           lambda t: simulated_device(t).index if simulated_device(t).type == "cuda" else -1)
    for name in ("to", "cuda", "cpu"):
        _patch(nn.Module, name, _module_move(getattr(nn.Module, name), name))
    for name, kernel in _KERNELS.items():
        _patch(torch, name, kernel)
    _patch(nn.DataParallel, "forward", _data_parallel_forward)
    _patch(DistributedDataParallel, "__init__", _ddp_init(DistributedDataParallel.__init__))
    _patch(dist, "init_process_group", _init_process_group(dist.init_process_group))
    _patch(dist, "get_backend", _get_backend(dist.get_backend))
    _mode.__enter__()


def reset() -> None:
    """Between two scenarios of one rank (sandbox_runtime/worker.py `_reset`): device 0
    current, no backend, an empty journal, as `activate` left them."""
    if _state["active"]:
        _state.update(current=0, backend=None, journal=[])


@contextmanager
def suspended() -> Iterator[None]:
    """Real devices for a while (for library internals that must see the CPU)."""
    if not _state["active"]:
        yield
        return
    _mode.__exit__(None, None, None)
    saved = torch.Tensor.__dict__.get("device")
    del torch.Tensor.device
    try:
        yield
    finally:
        torch.Tensor.device = saved
        _mode.__enter__()
