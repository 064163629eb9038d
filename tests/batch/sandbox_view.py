"""What a submission sees from inside its sandbox, for the wall tests of warm workers (local
and Ray): a toy.py whose `add` prints it, and the reader of that print."""

from __future__ import annotations

from pathlib import Path

from autograder.grading.results import TestResult

_SNOOP = '''
import gc, glob, os, sys


def add(a, b):
    seen = {
        "pid": os.getpid(), "uid": os.getuid(),
        # (os.environ: /proc/self/environ is root's once the zygote is not dumpable)
        "environ": chr(0).join(f"{k}={v}" for k, v in os.environ.items()),
        "test_modules": sorted(m for m in sys.modules if not m.startswith("torch.")
                               and m.rsplit(".", 1)[-1].startswith(("test_", "conftest"))),
        "hidden_visible": any(glob.glob(p) for p in HIDDEN_GLOBS) or os.path.exists(HIDDEN),
        "canary_in_memory": any(isinstance(o, str) and "CANARY-" in o for o in gc.get_objects()),
        "foreign_processes": [p for p in os.listdir("/proc") if p.isdigit() and os.stat(
            f"/proc/{p}").st_uid != os.getuid()],
    }
    print("SEEN", repr(seen))
    return a + b
'''


def snooping_source(hidden: Path, *hidden_globs: str) -> str:
    """toy.py whose `add` reports what it sees; `hidden` (and any file matching `hidden_globs`)
    must not be visible."""
    return (_SNOOP.replace("HIDDEN_GLOBS", repr(hidden_globs))
            .replace("HIDDEN", repr(str(hidden))))


def seen_in(tests: list[TestResult]) -> dict:
    """What the snooping `add` reported, from a report's tests."""
    output = next(t.output for t in tests if t.name == "add: adds two integers")
    return eval(output.split("SEEN ", 1)[1].strip())  # our own repr of plain values
