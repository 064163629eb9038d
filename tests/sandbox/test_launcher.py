"""autograder.sandbox.launcher: the seccomp filter and how the launcher follows its spec.

tests/sandbox/test_isolation.py already runs the launcher's namespaces (capabilities, chroot escape,
the read-only view, /dev) and shows a filtered process refused ptrace, unshare and mount while
exec and fork still work; tests/redteam/test_rt_escape.py grades a submission that ptraces its
zygote. Not repeated here. This file covers the rest:

- the BPF program itself, run by a small interpreter of its four instructions, for both
  architectures (aarch64 is checked here even on x86_64): every listed call refused, ordinary
  calls allowed, another architecture's or x32's numbering refused outright;
- the numbers against the kernel's own headers, call by call (when the headers are installed);
- the filter in a real process: every further call refused with EPERM where it worked (or
  failed otherwise) before, inherited across exec;
- `main` with a spec: in `uid` mode the exact uid, gid, groups, working folder, environment and
  rlimits, no capabilities, no new privileges and the filter; in namespaces mode the
  launcher's exit status mirrors PID 1's; a spec it cannot follow fails with status 121 and a
  reason.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox import launcher
from autograder.sandbox.isolation import LAUNCHER, Isolation, launch_spec, sandbox_ids

REPO = Path(__file__).resolve().parents[2]
# The calls the filter refuses, in SECCOMP_DENIED's order (its comment, names spelled out).
DENIED_NAMES = (
    "ptrace process_vm_readv process_vm_writev pidfd_getfd kcmp mount umount2 pivot_root "
    "unshare setns open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr kexec_load "
    "kexec_file_load init_module finit_module delete_module bpf perf_event_open userfaultfd "
    "keyctl add_key request_key open_by_handle_at reboot swapon swapoff acct quotactl").split()
HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
AUDIT_ARCH_I386 = 0x40000003
ALLOW, REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM


def run_bpf(program: list[tuple[int, int, int, int]], arch: int, nr: int) -> int:
    """What the kernel would return for a call: the four instructions the filter uses."""
    data = {0: nr, 4: arch}  # struct seccomp_data: nr at 0, arch at 4
    pc, accumulator = 0, 0
    for _ in range(len(program) + 1):
        code, jt, jf, k = program[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator, pc = data[k], pc + 1
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += 1 + (jt if accumulator == k else jf)
        elif code == 0x35:  # BPF_JMP | BPF_JGE | BPF_K
            pc += 1 + (jt if accumulator >= k else jf)
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("machine", sorted(launcher.SECCOMP_DENIED))
def test_the_filter_refuses_exactly_the_listed_calls(machine):
    arch, denied = launcher.SECCOMP_DENIED[machine]
    program = launcher.seccomp_program(machine)
    assert len(denied) == len(DENIED_NAMES) == len(set(denied))
    assert all(pc + 1 + max(jt, jf) < len(program)  # no jump out of the program
               for pc, (code, jt, jf, _) in enumerate(program) if code & 0x07 == 0x05)
    assert program[-2:] == [(0x06, 0, 0, ALLOW), (0x06, 0, 0, REFUSE)]
    for nr in denied:
        assert run_bpf(program, arch, nr) == REFUSE, nr
    for nr in set(range(0, 460)) - set(denied):
        assert run_bpf(program, arch, nr) == ALLOW, nr
    # Another architecture's numbering (i386's int 0x80 on x86_64): refused, whatever the call.
    for nr in (0, 1, 3, 26, 59):
        assert run_bpf(program, AUDIT_ARCH_I386, nr) == REFUSE


def test_x32_numbers_are_refused_on_x86_64():
    arch, _ = launcher.SECCOMP_DENIED["x86_64"]
    program = launcher.seccomp_program("x86_64")
    for nr in (0, 1, 39, 101, 165):  # read, write, getpid: fine as x86_64, refused as x32
        assert run_bpf(program, arch, nr | 0x40000000) == REFUSE
    # aarch64 has no such numbering: no check for it there.
    arch, _ = launcher.SECCOMP_DENIED["aarch64"]
    assert run_bpf(launcher.seccomp_program("aarch64"), arch, 0x40000000) == ALLOW


@pytest.mark.parametrize("machine", sorted(launcher.SECCOMP_DENIED))
def test_the_numbers_are_the_kernels_for_each_name(machine):
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"{header} is not installed (linux-libc-dev)")
    numbers = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b",
                                                     header.read_text())}
    _, denied = launcher.SECCOMP_DENIED[machine]
    kernel = {name: numbers[name] for name in DENIED_NAMES}
    assert dict(zip(DENIED_NAMES, denied, strict=True)) == kernel


def test_install_seccomp_declines_an_architecture_it_has_no_numbers_for(monkeypatch):
    # Declining must happen before anything is loaded: this very process stays unfiltered.
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "h", "r", "v", "riscv64")))
    assert launcher.install_seccomp() is False
    assert "Seccomp:\t0" in Path("/proc/self/status").read_text()


FILTERED = textwrap.dedent('''
    import ctypes, errno, json, os, subprocess, sys
    from autograder.sandbox.launcher import PR_SET_NO_NEW_PRIVS, install_seccomp, libc

    libc.syscall.restype = ctypes.c_long
    CALLS = {"process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
             "kcmp": 312, "setns": 308, "pivot_root": 155, "umount2": 166, "bpf": 321,
             "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
             "open_by_handle_at": 304, "init_module": 175, "fsopen": 430, "acct": 163,
             "getpid": 39, "getpid_x32": 39 | 0x40000000}

    def errors():
        seen = {}
        for name, nr in CALLS.items():
            ctypes.set_errno(0)
            # Arguments no call accepts (bad pointers and descriptors): each fails or returns
            # at once, and never does anything.
            result = libc.syscall(ctypes.c_long(nr), ctypes.c_long(-1), ctypes.c_long(0),
                                  ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
            seen[name] = errno.errorcode.get(ctypes.get_errno(), "ok") if result < 0 else "ok"
        return seen

    before = errors()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    assert install_seccomp()
    after = errors()
    # A fresh program after exec: still filtered, by the kernel's own account too.
    child = subprocess.run([sys.executable, "-I", "-S", "-c",
                            "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                            "r = libc.unshare(0x00020000); "
                            "print(r, ctypes.get_errno(), open('/proc/self/status').read())"],
                           capture_output=True, text=True)
    print(json.dumps({"before": before, "after": after, "child": child.stdout}))
''')


def test_in_a_filtered_process_every_listed_call_is_refused_and_exec_keeps_the_filter():
    if platform.machine() != "x86_64":
        pytest.skip("the call numbers used here are x86_64's")
    result = subprocess.run([sys.executable, "-c", FILTERED], capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    before, after = seen["before"], seen["after"]
    assert before["getpid"] == after["getpid"] == "ok"
    assert after["getpid_x32"] == "EPERM" and before["getpid_x32"] != "EPERM"
    refused = {name: code for name, code in after.items() if not name.startswith("getpid")}
    assert set(refused.values()) == {"EPERM"}, refused
    # The refusals are the filter's: unfiltered, (almost) every call failed for another reason.
    others = [name for name in refused if before[name] != "EPERM"]
    assert len(others) >= len(refused) - 2, before
    words = seen["child"].split()
    assert words[:2] == ["-1", str(errno.EPERM)]
    assert "Seccomp:\t2" in seen["child"] and "NoNewPrivs:\t1" in seen["child"]


def others_may_run(python: str) -> bool:
    """Whether a sandbox uid can start `python` and read its standard library (the launcher
    imports `resource` after dropping to it, as `uid` mode requires; isolation.detect proves it)."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"]) if python == sys.executable else None
    for path in (Path(python).resolve(), *([stdlib] if stdlib else [])):
        for folder in (path, *path.parents):
            if not folder.stat().st_mode & 0o001 and folder.is_dir():
                return False
    return True


# The launcher is standard library only: any Python 3 runs it. This one's, where a sandbox uid
# may run it; else the system's (here, for example, the grader's Python lies under /root).
LAUNCHER_PYTHON = next((p for p in (sys.executable, "/usr/bin/python3")
                        if Path(p).exists() and others_may_run(p)), None)


def launch(spec: dict, argv: list[str], python: str | None = None) -> subprocess.CompletedProcess:
    command = [python or sys.executable, "-I", "-S", "-B", "-c", LAUNCHER, json.dumps(spec), "--",
               *argv]
    # Started with supplementary groups (as root): the sandbox user must keep none of them.
    groups = {"extra_groups": [0, 4242]} if os.geteuid() == 0 else {}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/", **groups)


def uid_spec(tmp_path: Path, ids: tuple[int, int], **changes) -> dict:
    folder = tmp_path / "sandbox"
    folder.mkdir(exist_ok=True)
    os.chown(folder, *ids)
    tmp_path.chmod(0o711)
    spec = launch_spec(folder, {"PATH": "/usr/bin:/bin", "ONLY": "this"},
                       Isolation("uid", drop_uid=True), ids, tmp_path / "mnt", 12, 1 << 20)
    return {**spec, **changes}


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to a sandbox uid")


def test_uid_mode_follows_the_spec_exactly(tmp_path):
    needs_root()
    if LAUNCHER_PYTHON is None:
        pytest.skip("no Python here that a sandbox uid may run (uid mode needs one)")
    ids = sandbox_ids()
    spec = uid_spec(tmp_path, ids)
    spec["rlimits"] = {"RLIMIT_NPROC": 12, "RLIMIT_NOFILE": 33}
    env = launch(spec, ["/usr/bin/env"], LAUNCHER_PYTHON)
    assert env.returncode == 0, env.stderr
    assert sorted(env.stdout.splitlines()) == ["ONLY=this", "PATH=/usr/bin:/bin"]
    where = launch(spec, ["/bin/pwd", "-P"], LAUNCHER_PYTHON)
    assert where.stdout.strip() == spec["cwd"], where.stderr
    status = launch(spec, ["/bin/cat", "/proc/self/status", "/proc/self/limits"],
                    LAUNCHER_PYTHON)
    assert status.returncode == 0, status.stderr
    fields = dict(re.findall(r"^(\w+):[ \t]*(.*)$", status.stdout, re.M))
    assert fields["Uid"].split() == [str(ids[0])] * 4
    assert fields["Gid"].split() == [str(ids[1])] * 4
    assert fields["Groups"] == ""
    assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0 and int(fields["CapAmb"], 16) == 0
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"
    assert re.search(r"Max processes\s+12\s+12\s", status.stdout)
    assert re.search(r"Max open files\s+33\s+33\s", status.stdout)


def test_uid_mode_without_a_uid_is_refused_never_run_as_root(tmp_path):
    """uid mode is root's, and drops to the sandbox's uid: a spec without one (no path makes
    it, see launch_spec) fails like any spec the launcher cannot follow."""
    needs_root()
    spec = uid_spec(tmp_path, sandbox_ids(), uid=None, gid=None, rlimits={})
    result = launch(spec, ["/usr/bin/id", "-u"])
    assert result.returncode == 121, (result.returncode, result.stdout)
    assert "without an unprivileged uid" in result.stderr and result.stdout == ""


def namespaces_spec(tmp_path: Path) -> dict:
    ids = sandbox_ids()
    folder = tmp_path / "sandbox"
    folder.mkdir()
    os.chown(folder, *ids)
    (tmp_path / "mnt").mkdir()
    tmp_path.chmod(0o711)
    return launch_spec(folder, {"PATH": "/usr/bin:/bin"}, Isolation("namespaces", drop_uid=True),
                       ids, tmp_path / "mnt", 16, 1 << 20)


SEGFAULT = "import ctypes, os; print('pid', os.getpid(), flush=True); ctypes.string_at(0)"


@pytest.mark.parametrize(("argv", "status"), [
    (["/bin/sh", "-c", "echo pid $$; exit 7"], 7),
    (["/bin/sh", "-c", "echo pid $$"], 0),
    # PID 1 ignores signals sent from inside its namespace, not the kernel's own (a fault).
    ([sys.executable, "-I", "-S", "-c", SEGFAULT], 128 + 11),
])
def test_the_launcher_exits_as_pid_1_of_the_namespace_did(tmp_path, argv, status):
    needs_root()
    spec = namespaces_spec(tmp_path)
    result = launch(spec, argv)
    if "unshare" in result.stderr:
        pytest.skip(f"namespaces refused here: {result.stderr.strip()}")
    assert result.stdout.split() == ["pid", "1"], result.stderr
    assert result.returncode == status, result.stderr


def test_a_terminated_launcher_takes_its_whole_namespace_with_it(tmp_path):
    needs_root()
    spec = namespaces_spec(tmp_path)
    marker = f"sleep-{os.getpid()}-{tmp_path.name}"  # names its processes for /proc below
    script = f"echo pid $$; (exec -a {marker} sleep 600) & exec -a {marker} sleep 600"
    command = [sys.executable, "-I", "-S", "-B", "-c", LAUNCHER, json.dumps(spec), "--",
               "/bin/bash", "-c", script]
    if not Path("/bin/bash").exists():
        pytest.skip("needs bash (exec -a)")
    started = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = started.stdout.readline()
        if not line:
            pytest.skip(f"namespaces refused here: {started.stderr.read().strip()}")
        assert line.split() == ["pid", "1"]
        for _ in range(100):
            if len(with_name(marker)) == 2:
                break
            time.sleep(0.05)
        assert len(with_name(marker)) == 2
        started.terminate()  # the launcher's SIGTERM: PID 1 is killed, and its namespace
        assert started.wait(timeout=10) == 128 + 9
        for _ in range(100):
            if not with_name(marker):
                break
            time.sleep(0.05)
        assert with_name(marker) == []
    finally:
        started.kill()
        started.wait()


def with_name(marker: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[0] == marker.encode() and state != "Z":
            found.append(int(entry))
    return found


@pytest.mark.parametrize("change", ["cwd", "argv", "uid"])
def test_a_spec_it_cannot_follow_fails_with_121_and_says_why(tmp_path, change):
    needs_root()
    spec = uid_spec(tmp_path, sandbox_ids())
    argv = ["/usr/bin/env"]
    if change == "cwd":
        spec["cwd"] = str(tmp_path / "no-such-folder")
    elif change == "argv":
        argv = [str(tmp_path / "no-such-program")]
    else:
        spec["uid"] = "not a number"
    result = launch(spec, argv)
    assert result.returncode == 121, (result.returncode, result.stdout)
    assert result.stderr.startswith("isolation launcher: "), result.stderr
    assert result.stdout == ""


CAP_NET_ADMIN = 12
LOOPBACK = ("import socket; s = socket.create_server(('127.0.0.1', 0)); "
            "c = socket.create_connection(s.getsockname()); c.sendall(b'up'); "
            "print('loopback', s.accept()[0].recv(2).decode(), flush=True)")


def _without_net_admin() -> None:
    """As in a Docker container (even with --cap-add SYS_ADMIN): no CAP_NET_ADMIN after exec."""
    if launcher.libc.prctl(launcher.PR_CAPBSET_DROP, CAP_NET_ADMIN, 0, 0, 0) != 0:
        os._exit(99)


@pytest.mark.parametrize("net_admin", [True, False], ids=["with", "without_cap_net_admin"])
def test_the_sandbox_has_its_own_loopback_with_or_without_cap_net_admin(tmp_path, net_admin):
    """Bringing loopback up needs CAP_NET_ADMIN, which Docker withholds; without it the launcher
    makes the network namespace in a user namespace of its own, and ranks still meet on
    127.0.0.1 (in a namespace of the sandbox's own: no host listener is reachable)."""
    needs_root()
    preexec = None if net_admin else _without_net_admin
    bounding = subprocess.run(["/bin/grep", "CapBnd", "/proc/self/status"], capture_output=True,
                              text=True, preexec_fn=preexec).stdout.split()[1]
    assert bool(int(bounding, 16) & (1 << CAP_NET_ADMIN)) == net_admin
    spec = namespaces_spec(tmp_path)
    command = [sys.executable, "-I", "-S", "-B", "-c", LAUNCHER, json.dumps(spec), "--",
               sys.executable, "-I", "-S", "-c", LOOPBACK]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/",
                            preexec_fn=preexec)
    if "unshare" in result.stderr:
        pytest.skip(f"namespaces refused here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["loopback", "up"]
