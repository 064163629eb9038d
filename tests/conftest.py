"""Shared fixtures for the project's own tests."""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from autograder.project.config import default_limits
from autograder.sandbox.client import Sandbox
from autograder.sandbox.folder import prepare_sandbox_dir


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background (`make test &` in a script, without job control)
    # inherits SIGINT ignored, and so would every batch it starts: the Ctrl-C tests would then
    # see a batch that never stops. Ctrl-C is Python's again, here and in those processes.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def make_sandbox(tmp_path: Path) -> Callable[..., Sandbox]:
    """A real sandbox process around a student module given as source text."""
    made: list[Sandbox] = []

    def make(source: str, probes: str | None = None, **limits: object) -> Sandbox:
        module = tmp_path / "dp_basics.py"
        module.write_text(textwrap.dedent(source))
        probes_path = None
        if probes is not None:
            probes_path = tmp_path / "probes.py"
            probes_path.write_text(textwrap.dedent(probes))
        folder = prepare_sandbox_dir(module, "dp_basics", probes_path, tmp_path)
        sandbox = Sandbox(folder, "dp_basics", default_limits(**{"call_timeout": 5, **limits}),
                          tmp_path / f"out{len(made)}.log")
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
