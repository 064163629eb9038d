"""Time budgets of hidden tests, calibrated from the reference solution.

At release, the self-check grades the reference and records each hidden test's wall time, with
the time this machine took for a fixed CPU workload, in `assignments/<name>/timings.json`. When
grading, each test gets

    budget = min(cap, max(k x reference time x machine factor, floor))

where `cap` is the test's own `timeout_s` (or `timeouts.test`), k and the floor come from
grading.yml (`timeouts.budget_factor`, `timeouts.budget_floor`), and the machine factor is the
same workload timed once per grading process divided by its time at release (at least 1, at most
MAX_FACTOR): a container with half a CPU gets budgets about twice as long. A test missing from the
file (added since the release) keeps the flat cap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

TIMINGS_NAME = "timings.json"
MAX_FACTOR = 8.0
# The workload: long enough (~0.25 s of one core) to span a few CFS periods (100 ms), so a CPU
# quota (cgroup cpu.max, Docker's --cpus) slows it down as it slows grading.
_ROUNDS = 8
_SIZE = 60_000


def _workload() -> int:
    # Pure Python (the interpreter is what grading mostly spends its CPU on): arithmetic,
    # allocation, a dict and a sort, fixed in size so the work never depends on the machine.
    total = 0
    for r in range(_ROUNDS):
        table = {i: (i * 2654435761 + r) % 1000003 for i in range(_SIZE)}
        total += sum(sorted(table.values())[:: 97])
        total += len("".join(str(v) for v in list(table.values())[:: 13]))
    return total


@functools.cache
def calibration_seconds() -> float:
    """Wall seconds of the fixed workload here, now; measured once per process (a warm runner
    server measures it once, and the runners it forks inherit it)."""
    started = time.perf_counter()
    _workload()
    return time.perf_counter() - started


def machine_factor(reference_calibration: float | None, measured: float) -> float:
    """How much slower this machine is than the one that recorded the timings (1 to MAX)."""
    if not reference_calibration or reference_calibration <= 0:
        return 1.0
    return min(MAX_FACTOR, max(1.0, measured / reference_calibration))


def budget(reference_seconds: float | None, cap: float, k: float, floor: float,
           factor: float) -> float:
    """A test's time budget in seconds (see the module's docstring)."""
    if reference_seconds is None or k <= 0:
        return cap
    return min(cap, max(k * reference_seconds * factor, floor))


@dataclass
class Timings:
    """What timings.json holds."""

    fingerprint: str  # of the hidden tests, probes and solution the times were taken with
    calibration: float  # seconds of the workload on the recording machine
    tests: dict[str, float] = field(default_factory=dict)  # nodeid -> reference seconds

    def to_json(self) -> str:
        data = {"fingerprint": self.fingerprint, "calibration": round(self.calibration, 4),
                "tests": {k: round(v, 3) for k, v in sorted(self.tests.items())}}
        return json.dumps(data, indent=1) + "\n"


def fingerprint(assignment_root: Path, module: str) -> str:
    """A hash of what the reference's times depend on: hidden tests, probes, solution."""
    digest = hashlib.sha256()
    files = sorted((assignment_root / "tests" / "hidden").rglob("*.py"))
    files += [assignment_root / "probes.py", assignment_root / "solution" / f"{module}.py"]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(assignment_root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load(assignment_root: Path) -> Timings | None:
    """The assignment's recorded timings; None when there are none or they cannot be read."""
    try:
        data = json.loads((assignment_root / TIMINGS_NAME).read_text())
        return Timings(str(data["fingerprint"]), float(data["calibration"]),
                       {str(k): float(v) for k, v in data["tests"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def stale(assignment_root: Path, module: str) -> str | None:
    """Why timings.json is out of date (missing, or taken with other tests), else None."""
    timings = load(assignment_root)
    if timings is None:
        return f"{TIMINGS_NAME} is missing (run `autograder release` to record it)"
    if timings.fingerprint != fingerprint(assignment_root, module):
        return (f"{TIMINGS_NAME} was recorded with other hidden tests, probes or solution "
                f"(`autograder release`, or scripts/record_timings.py "
                f"{assignment_root.name}, records it again)")
    return None
