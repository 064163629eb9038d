"""The isolation launcher on its own: what a sandbox process can and cannot do in its namespaces;
and `detect`, which fails closed: a mode that was asked for and cannot start, or root where no
mode starts, is an error, never a quiet `none`.

The user-namespace mode is what a TA without root gets; as root (here, CI and Gradescope) the
launcher can be asked for it explicitly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox.folder import sandbox_env
from autograder.sandbox.isolation import (
    Isolation,
    IsolationUnavailable,
    detect,
    prepare_folder,
    sandbox_ids,
    wrap,
)

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
                 ids: tuple[int, int] | None = None, script: str = ESCAPES) -> dict:
    folder = tmp_path / "sandbox"
    folder.mkdir()
    (folder / "tmp").mkdir()
    mount = tmp_path / "mnt"
    mount.mkdir()
    tmp_path.chmod(0o711)
    prepare_folder(folder, isolation, ids)
    command = wrap([sys.executable, "-I", "-S", "-c", script], folder, sandbox_env(folder),
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


VIEW = textwrap.dedent('''
    import json, os
    seen = {"dev": sorted(os.listdir("/dev")), "cgroup": sorted(os.listdir("/sys/fs/cgroup"))}
    writable = []
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        point, options = fields[4], fields[5].split(",")
        if "rw" in options:
            writable.append(point)
    seen["writable"] = writable
    for path in ("/dev/null", "/dev/urandom"):
        with open(path, "r+b" if path == "/dev/null" else "rb") as f:
            f.read(1)
    print(json.dumps(seen))
''')


@pytest.mark.parametrize("isolation", ["user_namespace", "drop_uid"])
def test_the_view_is_read_only_all_the_way_down_with_a_private_dev(tmp_path, isolation):
    # Before: read-only remounts left submounts writable (/sys/fs/cgroup/*, /dev/pts, the host's
    # whole /dev bound read-write, /proc/sys), and /dev held every host device.
    if isolation == "drop_uid" and os.geteuid() != 0:
        pytest.skip("needs root to drop to a sandbox uid")
    chosen = (Isolation("namespaces", user_namespace=True) if isolation == "user_namespace"
              else Isolation("namespaces", drop_uid=True))
    seen = run_isolated(tmp_path, chosen, sandbox_ids() if isolation == "drop_uid" else None,
                        VIEW)
    devices = {"null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout",
               "stderr"}
    assert set(seen["dev"]) - devices <= {p.name for p in Path("/dev").glob("nvidia*")}
    assert seen["cgroup"] == []
    # Writable mounts: only the sandbox's own tmpfs folders and its devices.
    allowed = {"/", "/tmp", "/dev/shm", "/proc", str(tmp_path / "sandbox")}
    allowed |= {f"/dev/{d}" for d in devices} | {str(p) for p in Path("/dev").glob("nvidia*")}
    assert [p for p in seen["writable"] if p not in allowed] == []
    assert "/proc/sys" not in seen["writable"]


def test_seccomp_refuses_ptrace_and_mount_but_not_ordinary_calls():
    script = textwrap.dedent('''
        import ctypes, errno, os, subprocess
        from autograder.sandbox.launcher import PR_SET_NO_NEW_PRIVS, install_seccomp, libc
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        assert install_seccomp()
        results = {}
        for name, call in [("ptrace", lambda: libc.ptrace(16, os.getppid(), 0, 0)),
                           ("unshare", lambda: libc.unshare(0x00020000)),
                           ("mount", lambda: libc.mount(b"none", b"/", None, 32, None))]:
            ctypes.set_errno(0)
            results[name] = (call(), errno.errorcode.get(ctypes.get_errno()))
        print(results)
        print(subprocess.run(["/bin/echo", "exec works"], capture_output=True, text=True).stdout)
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        print("fork works", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    ''')
    import platform

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the filter has numbers for x86_64 and aarch64")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert "{'ptrace': (-1, 'EPERM'), 'unshare': (-1, 'EPERM'), 'mount': (-1, 'EPERM')}" \
        in result.stdout
    assert "exec works" in result.stdout and "fork works 7" in result.stdout


def test_kill_uid_kills_every_process_of_a_sandbox_uid_even_detached_ones():
    from autograder.sandbox.processes import kill_uid

    if os.geteuid() != 0:
        pytest.skip("needs root")
    uid = sandbox_ids()[0]
    script = textwrap.dedent(f'''
        import os, time
        os.setgroups([]); os.setresgid({uid}, {uid}, {uid}); os.setresuid({uid}, {uid}, {uid})
        if os.fork() == 0:
            os.setsid()  # leaves the session: no group kill reaches it
            time.sleep(600)
        print("started", flush=True)
        time.sleep(600)
    ''')
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"

    def of_uid() -> list[int]:
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"Uid:\t{uid}\t" in status and "State:\tZ" not in status:
                found.append(int(entry))
        return found

    assert len(of_uid()) == 2
    kill_uid(uid)
    child.wait(timeout=10)
    for _ in range(50):
        if not of_uid():
            break
        time.sleep(0.1)
    assert of_uid() == []


# ----------------------------------------------------------------------------- detect: fail closed


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users cannot enter."""
    for part in reversed(path.parents):
        if not part.stat().st_mode & 0o001:
            return part
    return None


def test_a_forced_uid_mode_that_cannot_start_here_is_an_error_that_says_why(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_ISOLATION", "uid")
    monkeypatch.delenv("AUTOGRADER_UNSAFE_NO_ISOLATION", raising=False)
    try:
        found = detect()
    except IsolationUnavailable as exc:
        message = str(exc)
    else:
        assert found.mode == "uid"  # insisted on: never another mode
        pytest.skip("uid mode works on this machine")
    assert message.startswith("student code cannot be isolated here (AUTOGRADER_ISOLATION=uid"
                              ) or "needs the grader to run as root" in message, message
    if os.geteuid() == 0:
        # The launcher's own reason, and (where the venv's Python is private, as here under
        # /root) the folder that keeps the sandbox's uid out of it.
        assert "uid mode failed: isolation launcher: " in message, message
        closed = closed_to_others(Path(os.path.realpath(sys.executable)))
        if closed is not None:
            assert f"{closed} has mode " in message and "cannot enter it" in message, message
        assert "must be readable and executable by other users" in message
    assert "AUTOGRADER_UNSAFE_NO_ISOLATION=1" in message  # the unsafe way out is named


@pytest.mark.parametrize("value", ["none", "off", "namespace", "uid "])
def test_an_unknown_mode_and_the_old_none_are_refused_naming_the_opt_in(monkeypatch, value):
    monkeypatch.setenv("AUTOGRADER_ISOLATION", value)
    monkeypatch.delenv("AUTOGRADER_UNSAFE_NO_ISOLATION", raising=False)
    with pytest.raises(IsolationUnavailable) as refused:
        detect()
    message = str(refused.value)
    assert f"AUTOGRADER_ISOLATION={value!r} is not accepted: use namespaces or uid" in message
    assert "AUTOGRADER_UNSAFE_NO_ISOLATION=1 (or --unsafe-no-isolation)" in message


def test_the_unsafe_opt_in_gives_none_and_says_so(monkeypatch):
    monkeypatch.delenv("AUTOGRADER_ISOLATION", raising=False)
    monkeypatch.setenv("AUTOGRADER_UNSAFE_NO_ISOLATION", "1")
    found = detect()
    assert (found.mode, found.unsafe) == ("none", True)
    assert any(p.startswith("NOT isolated, by the unsafe opt-in AUTOGRADER_UNSAFE_NO_ISOLATION=1")
               and "never for grading students" in p for p in found.protections)
    # Isolation asked for and refused at once: neither wins quietly.
    monkeypatch.setenv("AUTOGRADER_ISOLATION", "namespaces")
    with pytest.raises(IsolationUnavailable, match="ask for isolation and for none"):
        detect()
    monkeypatch.delenv("AUTOGRADER_ISOLATION")
    monkeypatch.setenv("AUTOGRADER_UNSAFE_NO_ISOLATION", "yes")
    with pytest.raises(IsolationUnavailable, match="is neither 1"):
        detect()
    monkeypatch.setenv("AUTOGRADER_UNSAFE_NO_ISOLATION", "0")
    assert not detect().unsafe


def test_as_root_where_no_mode_starts_grading_is_refused_not_unisolated():
    """Root of a user namespace that maps no other uid: no sandbox uid can exist, so neither
    namespaces (as root they drop to one) nor uid mode starts; detect refuses, naming both."""
    script = textwrap.dedent("""
        import os
        from autograder.sandbox.isolation import IsolationUnavailable, detect
        assert os.geteuid() == 0
        try:
            print("detected", detect())
        except IsolationUnavailable as exc:
            print("refused", exc)
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOGRADER_ISOLATION", "AUTOGRADER_UNSAFE_NO_ISOLATION")}
    try:
        result = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                                 script], capture_output=True, text=True, timeout=120, env=env,
                                cwd=Path(__file__).resolve().parents[2])
    except FileNotFoundError:
        pytest.skip("no unshare here")
    if result.returncode != 0 and "unshare" in result.stderr:
        pytest.skip(f"user namespaces are not permitted here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused student code cannot be isolated here (the grader "
                                    "runs as root"), result.stdout
    assert "namespaces mode failed: " in result.stdout and "uid mode failed: " in result.stdout
    assert "--cap-add SYS_ADMIN" in result.stdout
