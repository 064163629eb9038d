"""The sandbox worker: imports the student's module and runs calls and probes on request.

Started by `autograder.sandbox` as `python -I -S -B -c <boot>` with only the sandbox folder and
site-packages on sys.path. Requests arrive pickled (trusted objects); replies leave as JSON made by
`codec.encode`. Everything here is untrusted territory: student code can change any of it, which
only ever changes what this one sandbox replies.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
import traceback
from typing import Any

from . import codec, wire


def main(argv: list[str]) -> None:
    mode, request_fd, reply_fd, module_name = argv[0], int(argv[1]), int(argv[2]), argv[3]
    import torch

    torch.set_num_threads(1)
    module, import_error = _import_student(module_name)
    if mode == "serve":
        _reply(reply_fd, {"ready": True, "import_error": import_error})
        while True:
            try:
                request = pickle.loads(wire.recv(request_fd))
            except wire.WireClosed:
                os._exit(0)
            _reply(reply_fd, _handle(request, module, import_error))
    else:  # "once": one probe per process (a rank of a multi-process scenario)
        request = pickle.loads(wire.recv(request_fd))
        _reply(reply_fd, _handle(request, module, import_error))
        # Skip interpreter teardown: gloo's at-exit teardown on CPU crashes or hangs now and then.
        os._exit(0)


def _import_student(name: str) -> tuple[Any, dict | None]:
    try:
        return importlib.import_module(name), None
    except SystemExit as exc:
        return None, {"type_names": ["SystemExit"], "message": f"exit({exc.code!r}) at import"}
    except BaseException as exc:  # noqa: BLE001 - every failure must become a report
        info = codec.encode_exception(exc)
        info["where"] = _student_frames(exc, name)
        return None, info


def _student_frames(exc: BaseException, name: str) -> str:
    # Only lines from the student's own file: never the worker's or the grader's paths.
    if isinstance(exc, SyntaxError):
        return f"line {exc.lineno}: {(exc.text or '').strip()}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.basename(f.filename) == f"{name}.py"]
    return "; ".join(f"line {f.lineno} in {f.name}" for f in frames[-3:])


def _handle(request: dict, module: Any, import_error: dict | None) -> dict:
    if import_error is not None:
        return {"import_error": import_error}
    op, args, kwargs = request["op"], request.get("args", ()), request.get("kwargs", {})
    if op == "call":
        target = getattr(module, request["name"], None)
        if not callable(target):
            return {"missing": request["name"]}
        identities = {id(a): f"arg{i}" for i, a in enumerate(args)}
        identities.update({id(v): f"kw:{k}" for k, v in kwargs.items()})
    elif op == "probe":
        import probes  # the assignment's sandbox-side scenarios (not secret)

        target = getattr(probes, request["name"])
        args, identities = (module, *args), {}
    else:
        return {"protocol_error": f"unknown op {op!r}"}
    try:
        value = target(*args, **kwargs)
    except SystemExit as exc:
        return {"exited": repr(exc.code)}
    except BaseException as exc:  # noqa: BLE001
        info = codec.encode_exception(exc)
        info["where"] = _student_frames(exc, module.__name__)
        return {"raised": info}
    try:
        return {"value": codec.encode(value, identities)}
    except codec.CodecError as exc:
        return {"codec_error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - a hostile value's methods may raise anything
        return {"codec_error": f"the returned value could not be read: {type(exc).__name__}"}


def _reply(fd: int, message: dict) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001, S110 - student may have replaced the stream
            pass
    wire.send(fd, json.dumps(message, allow_nan=False).encode())


if __name__ == "__main__":
    main(sys.argv[1:])
