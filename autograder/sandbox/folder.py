"""A sandbox's folder and environment: what a sandbox process sees of the grader.

Only the standard library (and the runtime's cell map, itself standard library only): the
trusted parent prepares the folder before any runner starts.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import sysconfig
import tempfile
from collections.abc import Mapping
from pathlib import Path

from autograder.sandbox_runtime import cells

RUNTIME_PACKAGE = "agsandbox"


# The runtime's source, copied into each sandbox folder as RUNTIME_PACKAGE (warm zygotes
# import it under that name: autograder.runner.warm).
RUNTIME_SOURCE = Path(__file__).resolve().parents[1] / "sandbox_runtime"


def prepare_sandbox_dir(module_file: Path | None, module_name: str, probes: Path | None,
                        parent: Path) -> Path:
    """A fresh folder holding only a copy of the student's module, the probes and the worker."""
    root = Path(tempfile.mkdtemp(prefix="sandbox-", dir=parent))
    if module_file is not None:
        shutil.copyfile(module_file, root / f"{module_name}.py")
        # A notebook's cell map (autograder.sandbox_runtime.cells), when it was converted.
        cell_map = module_file.with_name(cells.map_name(module_file.stem))
        if cell_map.is_file():
            shutil.copyfile(cell_map, root / cells.map_name(module_name))
    if probes is not None:
        shutil.copyfile(probes, root / "probes.py")
        # Compiled here, once (trusted code): every worker imports probes, and sandboxes never
        # write bytecode, so each would compile it again (about 8 ms for our probes, 40 to 50
        # workers a grading). Student code owns this folder and could change either file, as
        # it could change probes.py itself: probes are never trusted (see ARCHITECTURE.md).
        py_compile.compile(str(root / "probes.py"), doraise=True, quiet=1,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    shutil.copytree(RUNTIME_SOURCE, root / RUNTIME_PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tmp").mkdir()
    return root


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def boot(sandbox_dir: Path) -> str:
    # Student folder last, so its files can never shadow the standard library or torch.
    search = [*_site_dirs(), str(sandbox_dir)]
    return (f"import sys; sys.path.extend({search!r}); sys.argv[0] = 'sandbox'; "
            f"from {RUNTIME_PACKAGE}.worker import main; main(sys.argv[1:])")


def sandbox_env(sandbox_dir: Path, gpu_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A scrubbed environment: no tokens or secrets, only what torch needs; `gpu_env`: the
    grader's CUDA_VISIBLE_DEVICES, if any, where this process hid its GPUs from itself (None:
    this process's own)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(sandbox_dir),
        "TMPDIR": str(sandbox_dir / "tmp"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
        # gloo rendezvous stays on loopback.
        "GLOO_SOCKET_IFNAME": "lo", "TORCHINDUCTOR_CACHE_DIR": str(sandbox_dir / "tmp"),
    }
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    if gpu_env is not None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(gpu_env)
    return env
