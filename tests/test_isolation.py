"""The isolation launcher on its own: what a sandbox process can and cannot do in its namespaces.

The user-namespace mode is what a TA without root gets; as root (here, CI and Gradescope) the
launcher can be asked for it explicitly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.isolation import Isolation, prepare_folder, sandbox_ids, wrap
from autograder.sandbox import sandbox_env

ESCAPES = textwrap.dedent('''
    import json, os, sys
    seen = {}
    status = open("/proc/self/status").read()
    seen["cap_eff"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0]
    try:  # the classic chroot escape: chroot into a subfolder, then walk up past the old root
        os.mkdir("x")
        os.chroot("x")
        for _ in range(40):
            os.chdir("..")
        os.chroot(".")
        seen["chroot_escape"] = sorted(os.listdir("/"))
    except OSError as exc:
        seen["chroot_escape"] = type(exc).__name__
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # MS_REMOUNT | MS_BIND on a read-only bind of the grader's Python: writable again?
    result = libc.mount(None, sys.prefix.encode(), None, 32 | 4096, None)
    seen["remount"] = result if result != 0 else "succeeded"
    print(json.dumps(seen))
''')


def run_isolated(tmp_path: Path, isolation: Isolation,
                 ids: tuple[int, int] | None = None) -> dict:
    folder = tmp_path / "sandbox"
    folder.mkdir()
    (folder / "tmp").mkdir()
    mount = tmp_path / "mnt"
    mount.mkdir()
    tmp_path.chmod(0o711)
    prepare_folder(folder, isolation, ids)
    command = wrap([sys.executable, "-I", "-S", "-c", ESCAPES], folder, sandbox_env(folder),
                   isolation, ids, mount, 64)
    result = subprocess.run(command, cwd=folder, env=sandbox_env(folder), capture_output=True,
                            text=True, timeout=60)
    if "unshare" in result.stderr and "Operation not permitted" in result.stderr:
        pytest.skip("user namespaces are not permitted here")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_root_of_a_user_namespace_has_no_capabilities_to_escape_with(tmp_path):
    seen = run_isolated(tmp_path, Isolation("namespaces", user_namespace=True))
    assert int(seen["cap_eff"], 16) == 0
    assert seen["chroot_escape"] == "PermissionError"
    assert seen["remount"] == -1


def test_an_unprivileged_sandbox_user_has_none_either(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to a sandbox uid")
    seen = run_isolated(tmp_path, Isolation("namespaces", drop_uid=True), sandbox_ids())
    assert int(seen["cap_eff"], 16) == 0
    assert seen["chroot_escape"] == "PermissionError"
