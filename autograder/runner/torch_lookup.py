"""Which of some names the installed torch does not have, for `autograder validate` (see
autograder.release.validation.torch_lookup), which never imports torch itself.

`python -m autograder.runner.torch_lookup` reads {"dotted": [...], "errors": [...], "private":
[...], "paths": [...]} as JSON on stdin and writes {"version": ..., "missing": [...]}.
"""

from __future__ import annotations

import builtins
import importlib
import json
import re
import sys
import warnings
from pathlib import Path

import torch


def missing(dotted: list[str], errors: list[str], private: list[str],
            paths: list[str]) -> list[str]:
    """Those of the names that torch lacks: `torch.a.b` names that neither an attribute nor a
    module gives, error types neither a builtin nor one of torch's public modules has, private
    `_names` written nowhere in torch's sources, `torch/...py` files not installed."""
    found = [name for name in dotted if not _resolves(name)]
    errors = [e for e in errors if not hasattr(builtins, e)]
    known = _torch_errors() if errors else frozenset()  # (imports much of torch: ~2 s)
    found += [e for e in errors if e not in known]
    source = Path(torch.__file__).parent
    written = _written(source, set(private))
    found += [p for p in private if p not in written]
    found += [p for p in paths if not (source.parent / p).exists()
              and not p.endswith((".cpp", ".h"))]  # C++ sources are not installed
    return found


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    obj: object = torch
    for i, part in enumerate(parts[1:], start=2):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            return False
    return True


def _torch_errors() -> frozenset[str]:
    """Exception classes of torch's public modules (torch.OutOfMemoryError, ...)."""
    found = set()
    for module in ("torch", "torch.cuda", "torch.distributed", "torch.multiprocessing",
                   "torch.distributed.elastic.multiprocessing.errors", "torch.serialization",
                   "torch.utils.data", "torch.autograd", "torch.jit", "torch.fx", "torch.export",
                   "torch.onnx", "torch._dynamo.exc"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated aliases warn when read
                found |= {k for k, v in vars(importlib.import_module(module)).items()
                          if isinstance(v, type) and issubclass(v, BaseException)}
        except ImportError:
            continue
    return frozenset(found)


def _written(source: Path, names: set[str]) -> set[str]:
    """Those of the `_private` names written somewhere in torch's Python files and stubs
    (the search stops once all are found)."""
    pattern = re.compile(r"\b_[A-Za-z]\w*")
    found: set[str] = set()
    for path in source.rglob("*.py*") if names else ():
        if path.suffix in (".py", ".pyi"):
            try:
                found |= names & set(pattern.findall(path.read_text(encoding="utf-8",
                                                                    errors="ignore")))
            except OSError:
                continue
            if found == names:
                break
    return found


def main() -> None:
    asked = json.load(sys.stdin)
    answer = sys.stdout
    sys.stdout = sys.stderr  # what an imported module prints must not mix with the answer
    found = missing(*(list(asked[k]) for k in ("dotted", "errors", "private", "paths")))
    json.dump({"version": torch.__version__, "missing": found}, answer)


if __name__ == "__main__":
    main()
