"""bench/profile_warm.py, run for real on one small case: every phase it reports is measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNTED = " counted"  # (profile_warm.COUNTED: how many, beside a phase, not a phase)


def test_no_phase_it_reports_always_reads_zero(tmp_path: Path) -> None:
    """One warm grading of dp_basics' reference (the suite has every kind of test) and of
    ddp_internals' (its scenarios have the grader's observer): a phase that reads 0 there
    measures nothing (as every phase but one did once the runner's events became typed
    records). The bench refuses a grading its wrappers broke (the reference losing points):
    one of them once failed every rank scenario, another every observer."""
    from autograder.sandbox.isolation import IsolationUnavailable, detect

    try:
        detect()
    except IsolationUnavailable as exc:
        pytest.skip(f"no grading here: {exc}")
    out = tmp_path / "profile.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "profile_warm.py"), "--assignment", "dp_basics",
         "ddp_internals", "--examples", "reference", "--rounds", "1", "--warmup", "0",
         "--json", str(out)],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    measured = json.loads(out.read_text())
    assert all(g["tests: ranks"] > 0 for g in measured["ddp_internals"]["reference"])
    gradings = [g for runs in measured["dp_basics"].values() for g in runs]
    phases = {p for g in gradings for p in g if not p.endswith(COUNTED)}
    assert {"tests: plain", "tests: simulated", "tests: ranks", "parent: report building",
            "parent: results writing", "sandbox: zygote starts (and first fork)",
            "sandbox: serve worker forks", "sandbox: rank worker forks"} <= phases
    always_zero = sorted(p for p in phases if all(g[p] <= 0 for g in gradings))
    assert not always_zero, f"phases that measured nothing: {always_zero}\n{run.stdout}"
    # and the table shows them
    assert "tests: ranks" in run.stdout and "load average" in run.stdout
