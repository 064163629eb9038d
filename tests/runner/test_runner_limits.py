"""The trusted runner's own bounds: a memory limit, and messages clipped before they leave it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.project.inert import ELLIPSIS, MAX_MESSAGE
from autograder.runner.pytest_plugin import describe_failure
from autograder.sandbox.client import SandboxFailure


def test_the_runner_runs_under_a_memory_limit_and_memory_errors_are_the_students():
    script = textwrap.dedent("""
        import pytest
        from autograder.runner.suite import MEMORY_HEADROOM, limit_memory
        from autograder.runner.pytest_plugin import describe_failure
        assert limit_memory() is not None
        try:
            hog = bytearray(MEMORY_HEADROOM + (1 << 30))
        except MemoryError:
            info = pytest.ExceptionInfo.from_current()
            print(describe_failure(info))
        small = bytearray(64 << 20)  # the runner still works afterwards
        print("still alive", len(small))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert "('too_large', 'the result was too large to check" in out.stdout
    assert "still alive" in out.stdout


def test_messages_are_clipped_in_the_runner():
    huge = "x" * (64 << 20)
    for exc in (SandboxFailure(huge), AssertionError(huge), KeyError(huge)):
        try:
            raise exc
        except Exception:  # noqa: BLE001
            status, message = describe_failure(pytest.ExceptionInfo.from_current())
        assert len(message) <= MAX_MESSAGE and message.endswith(ELLIPSIS), type(exc).__name__
