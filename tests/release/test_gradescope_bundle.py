"""The Gradescope bundle's scripts, as autograder.release.gradescope_bundle writes them (the
bundle built and run end to end: tests/gradescope/test_gradescope.py)."""

from __future__ import annotations

import importlib
import subprocess

import pytest

from autograder.release.gradescope_bundle import (
    ENTRY_MODULE,
    FALLBACK_MESSAGE,
    run_script,
    setup_script,
)


def test_run_autograder_runs_gradescopes_entry_point_by_name() -> None:
    # release is a layer below gradescope: it names the entry point, never imports it.
    script = run_script("dp_basics")
    assert f'"$PYTHON" -m {ENTRY_MODULE} --root "$ROOT" --assignment dp_basics\n' in script
    entry = importlib.import_module(ENTRY_MODULE)
    assert callable(entry.main)
    # Both fallbacks, the entry point's and run_autograder's own, say the same to the student.
    fallback = entry.fallback_results(entry.GradingFailed("boom"))
    assert fallback["output"].startswith(FALLBACK_MESSAGE)
    assert FALLBACK_MESSAGE in script


@pytest.mark.parametrize("script", [run_script("dp_basics"), setup_script("torch==2.5.1")])
def test_the_scripts_are_valid_shell(script: str) -> None:
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
