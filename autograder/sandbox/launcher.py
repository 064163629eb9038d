"""Enter a sandbox's namespaces, build its file-system view, drop privileges, exec the sandbox.

Run by `autograder.sandbox.isolation` as `python -I -S -c <this file's text> SPEC_JSON -- ARGV...`,
as root or inside a new user namespace. Standard library only: it runs before anything untrusted and
must not depend on the grader's package being importable.

Steps: unshare mount, network, PID, IPC and UTS namespaces (and a user namespace when not root);
fork so the child is PID 1 of the new PID namespace (when it ends, the kernel kills every process
left in it); mount a tmpfs as the new root holding read-only binds of the system and Python folders
(recursively read-only), a size-limited tmpfs copy of the sandbox folder and a private /dev with
only the devices it needs; mount a fresh /proc; bring up loopback (in a network namespace made in
a user namespace of its own where CAP_NET_ADMIN is withheld, as in Docker); chroot; drop to the
sandbox uid and every capability; forbid new privileges; refuse ptrace and the like (seccomp); exec.
"""

import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, LINUX_CAPABILITY_VERSION_3 = 47, 4, 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
FAILED = 121  # the exit status of a launcher that could not isolate (it says why on stderr)

libc = ctypes.CDLL(None, use_errno=True)

# Calls no Python or torch program needs, refused (EPERM) in every sandbox process: reaching
# into another process (ptrace, process_vm_*, pidfd_getfd, kcmp: a worker ptrace-ing its
# zygote could detach it from the grader and outlive grading), changing the mount or
# namespace view, kernel keyrings, modules, BPF, perf and userfaultfd (kernel attack surface).
# Numbers per architecture (asm/unistd_64.h for x86_64, asm-generic/unistd.h for aarch64).
SECCOMP_DENIED = {
    # ptrace process_vm_readv/writev pidfd_getfd kcmp mount umount2 pivot_root unshare setns
    # open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr kexec_load
    # kexec_file_load init_module finit_module delete_module bpf perf_event_open userfaultfd
    # keyctl add_key request_key open_by_handle_at reboot swapon swapoff acct quotactl
    "x86_64": (0xC000003E, (101, 310, 311, 438, 312, 165, 166, 155, 272, 308, 428, 429, 430,
                            431, 432, 433, 442, 246, 320, 175, 313, 176, 321, 298, 323, 250,
                            248, 249, 304, 169, 167, 168, 163, 179)),
    "aarch64": (0xC00000B7, (117, 270, 271, 438, 272, 40, 39, 41, 97, 268, 428, 429, 430, 431,
                             432, 433, 442, 104, 294, 105, 273, 106, 280, 241, 282, 219, 217,
                             218, 265, 142, 224, 225, 89, 60)),
}


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter: (code, jt, jf, k) per instruction.

    A call made under another architecture's numbering (an x86_64 process may use the i386
    `int 0x80` table, or the x32 numbers) is refused outright: its numbers would not match."""
    arch, denied = SECCOMP_DENIED[machine]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, _ERRNO
    checks = [(jge, 0x40000000)] if machine == "x86_64" else []  # __X32_SYSCALL_BIT
    checks += [(jeq, nr) for nr in denied]
    program = [(ld_abs, 0, 0, 4)]  # seccomp_data.arch
    program.append((jeq, 0, len(checks) + 2, arch))  # another arch: jump to the refusal
    program.append((ld_abs, 0, 0, 0))  # seccomp_data.nr
    for i, (code, k) in enumerate(checks):
        program.append((code, len(checks) - i, 0, k))  # match: jump past the allow
    program += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    return program


def install_seccomp() -> bool:
    """Load the filter into this process (inherited by forks and execs); needs no_new_privs.
    False on an architecture it has no numbers for."""
    machine = os.uname().machine
    if machine not in SECCOMP_DENIED:
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    program = seccomp_program(machine)
    filters = (SockFilter * len(program))(*(SockFilter(*i) for i in program))
    fprog = SockFprog(len(program), filters)
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")
    return True


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    check(libc.mount(source.encode() if source else None, target.encode(),
                     fstype.encode() if fstype else None, flags,
                     data.encode() if data else None), f"mount {target}")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def loopback_namespace() -> None:
    """Enter a new network namespace whose loopback is up (as root of this user namespace).

    Bringing loopback up needs CAP_NET_ADMIN, which a Docker container lacks by default, even
    with --cap-add SYS_ADMIN. Then a child makes the network namespace inside a user namespace
    of its own (where it holds every capability over what it creates), brings loopback up
    there, and this process joins that network namespace (setns needs only CAP_SYS_ADMIN);
    this process itself stays in its user namespace."""
    check(libc.unshare(CLONE_NEWNET), "unshare")
    try:
        loopback_up()
        return
    except PermissionError:
        pass
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    helper = os.fork()
    if helper == 0:  # only simple calls: the parent may have threads (a warm runner server)
        try:
            check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare")
            loopback_up()
            os.write(ready_w, b"1")
        except BaseException:  # noqa: BLE001 - the parent says what failed
            os.write(ready_w, b"0")
        os.read(done_r, 1)  # keep the namespace until the parent has joined it
        os._exit(0)
    try:
        if os.read(ready_r, 1) != b"1":
            raise PermissionError("loopback could not be brought up in the sandbox's network "
                                  "namespace (no CAP_NET_ADMIN, and no user namespace for it)")
        fd = os.open(f"/proc/{helper}/ns/net", os.O_RDONLY)
        try:
            check(libc.setns(fd, CLONE_NEWNET), "setns")
        finally:
            os.close(fd)
    finally:
        os.write(done_w, b"1")
        os.waitpid(helper, 0)
        for fd in (ready_r, ready_w, done_r, done_w):
            os.close(fd)


def build_root(spec: dict) -> str:
    root = spec["root"]
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks out
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    # A fresh /tmp first: the sandbox folder may live under the host's /tmp and is bound in next.
    os.makedirs(f"{root}/tmp")
    mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m")
    # The sandbox folder: a size-limited tmpfs holding a copy of it, so student code can write
    # files (checkpoints, say) but cannot fill the grader's disk.
    work = root + spec["cwd"]
    os.makedirs(work)
    mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=700,size={spec['disk_bytes']}")
    try:
        shutil.copytree(spec["cwd"], work, symlinks=True, dirs_exist_ok=True)
    except shutil.Error as exc:  # a list of (source, target, why), one per file: say the first
        why = exc.args[0][0][2] if exc.args and exc.args[0] else exc
        raise OSError(f"the sandbox folder could not be copied into its tmpfs "
                      f"({spec['disk_bytes'] / 2**20:g} MiB: grading.yml's limits.disk_mb): "
                      f"{why}") from None
    if spec["uid"] is not None:
        for folder, dirs, files in os.walk(work):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, spec["uid"], spec["gid"], follow_symlinks=False)
    for path, writable in spec["binds"]:
        if os.path.exists(path):
            bind(path, root + path, writable)
    if os.path.isdir(f"{root}/sys/fs/cgroup"):  # other sandboxes' cgroups: none of its business
        mount("tmpfs", f"{root}/sys/fs/cgroup", "tmpfs",
              MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=555,size=4k")
    # A private /dev: only the devices Python and torch use (and a GPU grader's), never the
    # host's whole /dev with its pts, disks and writable submounts.
    os.makedirs(f"{root}/dev", exist_ok=True)
    for device in spec.get("devices", ()):
        if os.path.exists(device):
            bind(device, root + device, True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(f"{root}/dev/shm")  # not shared with the host or other sandboxes
    mount("tmpfs", f"{root}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m")
    os.makedirs(f"{root}/proc", exist_ok=True)
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    try:  # kernel settings, read-only at the mount level too (best effort in a user namespace)
        bind(f"{root}/proc/sys", f"{root}/proc/sys", False)
    except OSError:
        pass
    return root


def bind(path: str, target: str, writable: bool) -> None:
    """Bind `path` (with every mount below it) at `target`, read-only unless `writable`."""
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            open(target, "a").close()
    mount(path, target, None, MS_BIND | MS_REC)
    if not writable:
        readonly_tree(target)


MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}


def readonly_tree(target: str) -> None:
    """Make the mount at `target` and every mount below it read-only.

    A bind remount with MS_REC changes the top mount only (the kernel ignores MS_REC there):
    submounts such as /sys/fs/cgroup or /dev/pts would stay writable. mount_setattr with
    AT_RECURSIVE (Linux 5.12+) does the whole tree at once; older kernels get one remount per
    mount, each keeping its own flags (in a user namespace they are locked and must be kept)."""
    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(ctypes.c_long(MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                    ctypes.c_char_p(target.encode()), ctypes.c_uint(AT_RECURSIVE),
                    ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0:
        return
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:  # parents come before their submounts in mountinfo
        point = fields[4].replace("\\040", " ")
        if point != target and not point.startswith(target.rstrip("/") + "/"):
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for option in fields[5].split(","):
            flags |= _MOUNT_FLAGS.get(option, 0)
        mount("none", point, None, flags)


def drop(spec: dict) -> None:
    """Become the sandbox user with no capabilities, forbid new privileges, apply limits.

    Dropping every capability matters most in a user namespace, where the sandbox is root of
    its own namespace: with CAP_SYS_CHROOT it could chroot out of its view, and with
    CAP_SYS_ADMIN remount the read-only folders (the grader's venv) writable."""
    for cap in range(64):  # the bounding set first: that needs CAP_SETPCAP, lost with setuid
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the kernel's last capability
            check(-1, f"dropping capability {cap}")
    if spec["uid"] is not None:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # absent on old kernels
    # No effective, permitted or inheritable capabilities left (as root, setuid cleared them).
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    install_seccomp()  # last: building the view above needed mount and unshare
    import resource

    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))


def main() -> None:
    spec = json.loads(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1:]
    if spec["mode"] == "uid":  # root where namespaces are refused (a locked-down container)
        enter_uid(spec)
    else:
        enter_namespaces(spec)
    os.execve(argv[0], argv, spec["env"])


def enter_uid(spec: dict) -> None:
    """Everything but the exec in `uid` mode: the sandbox's folder, as the sandbox user. Also
    called by a warm runner server in a freshly forked child (autograder.runner.warm)."""
    if not spec["uid"]:  # never root: uid mode is root's, and it always drops to a uid
        raise RuntimeError("uid mode without an unprivileged uid to drop to")
    os.umask(0o022)
    os.chdir(spec["cwd"])
    drop(spec)


def enter_namespaces(spec: dict) -> None:
    """Everything but the exec: returns in PID 1 of the new namespaces, as the sandbox user.

    The calling process stays outside, waits for PID 1 and exits as it did. Also called by a
    warm runner server in a freshly forked child (see autograder.runner.warm)."""
    os.umask(0o022)  # folders made for the new root must be traversable by the sandbox user
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if spec["user_namespace"]:
        flags |= CLONE_NEWUSER | CLONE_NEWNET  # loopback comes up below, as root inside
    else:
        loopback_namespace()  # before the PID namespace: it may fork a helper
    check(libc.unshare(flags), "unshare")
    if spec["user_namespace"]:
        # Root inside, our own uid outside: enough to mount and chroot, nothing more.
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    child = os.fork()
    if child:
        # The launcher waits for PID 1 of the namespace and mirrors how it ended.
        signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    root = build_root(spec)
    if spec["user_namespace"]:
        loopback_up()
    os.chroot(root)
    os.chdir(spec["cwd"])
    drop(spec)


if __name__ == "__main__":  # run as `python -I -S -c <this file's text>`
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - say why isolation failed, then fail
        print(f"isolation launcher: {exc}", file=sys.stderr, flush=True)
        os._exit(FAILED)
