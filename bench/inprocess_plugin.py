"""The baseline for bench/grade_vs_pytest.py: the same hidden tests, student code in-process.

This is what instructors' tools do today (and what the engine refuses to do): `student.f(...)`
calls the imported module directly. Values still pass through the codec so the tests see the
same types; ranks fork from a forkserver that has imported torch (forking the pytest process
itself after autograd has run can deadlock).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import sys
from typing import Any

import pytest
import torch

from autograder.runner.pytest_plugin import MARKERS
from autograder.sandbox.client import StudentError
from autograder.sandbox.processes import free_port
from autograder.sandbox_runtime import codec
from bench._ranks import run_rank

torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS.values():
        config.addinivalue_line("markers", line)


def _roundtrip(value: Any, identities: dict | None = None) -> Any:
    return codec.decode(json.loads(json.dumps(codec.encode(value, identities))))


class InProcessStudent:
    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            identities = {id(a): f"arg{i}" for i, a in enumerate(args)}
            try:
                value = getattr(self._module, name)(*args, **kwargs)
            except Exception as exc:
                raise StudentError(name, codec.encode_exception(exc)) from None
            return _roundtrip(value, identities)
        return call

    def probe(self, fn, *args: Any, **kwargs: Any) -> Any:
        try:
            return _roundtrip(fn(self._module, *args, **kwargs))
        except Exception as exc:
            raise StudentError(fn.__name__, codec.encode_exception(exc)) from None

    def run_ranks(self, fn, world_size: int, *args: Any) -> list[Any]:
        context = multiprocessing.get_context("forkserver")
        # Preload everything a rank needs, student module included: the fastest fair baseline.
        context.set_forkserver_preload(["torch", "torch.distributed", "torch.nn.parallel",
                                        "bench._ranks", "probes", self._module.__name__])
        port, pipes, procs = free_port(), [], []
        for rank in range(world_size):
            ours, theirs = context.Pipe()
            proc = context.Process(target=run_rank, args=(theirs, fn, self._module.__name__,
                                                          rank, world_size, port, args))
            proc.start()
            pipes.append(ours)
            procs.append(proc)
        replies = [json.loads(p.recv()) for p in pipes]
        for proc in procs:
            proc.join()
        results = []
        for reply in replies:
            if "raised" in reply:
                raise StudentError(fn.__name__, reply["raised"])
            results.append(codec.decode(reply["value"]))
        return results

    def fresh(self) -> None:
        sys.modules.pop(self._module.__name__, None)
        self._module = importlib.import_module(self._module.__name__)


@pytest.fixture
def student() -> InProcessStudent:
    return InProcessStudent(importlib.import_module(os.environ["BENCH_MODULE"]))
