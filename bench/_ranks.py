"""The rank body for the in-process baseline, kept light: forkserver children import it."""

from __future__ import annotations

import importlib
import json
import os

from autograder.sandbox_runtime import codec


def run_rank(conn, fn, module_name, rank, world_size, port, args) -> None:
    module = importlib.import_module(module_name)
    try:
        conn.send(json.dumps({"value": codec.encode(fn(module, rank, world_size, port, *args))}))
    except BaseException as exc:  # noqa: BLE001
        conn.send(json.dumps({"raised": codec.encode_exception(exc)}))
    os._exit(0)
