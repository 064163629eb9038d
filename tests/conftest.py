"""Shared fixtures for the project's own tests."""

from __future__ import annotations

import shutil
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from autograder.project.config import default_limits
from autograder.sandbox.client import Sandbox, Starts
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
        from autograder.runner.stores import TcpStores  # (torch: only when a test needs it)

        sandbox = Sandbox(folder, "dp_basics", default_limits(**{"call_timeout": 5, **limits}),
                          tmp_path / f"out{len(made)}.log", starts=Starts(stores=TcpStores()))
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


TOY = Path(__file__).resolve().parent / "fixtures" / "toy"


@pytest.fixture
def sandbox_cannot_start(tmp_path: Path) -> Path:
    """The grading.yml of a copy of the toy course whose sandboxes cannot start, for real: its
    probes.py (2 MB) does not fit in the 1 MiB tmpfs its limits give a sandbox's folder, so the
    isolation launcher fails to copy it there (only namespaces mode copies the folder)."""
    from autograder.sandbox.isolation import detect

    if detect().mode != "namespaces":
        pytest.skip("only namespaces mode copies the sandbox folder into a tmpfs")
    course = tmp_path / "unstartable"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    text = config.read_text()
    assert "output_kb: 4}" in text
    config.write_text(text.replace("output_kb: 4}", "output_kb: 4, disk_mb: 1}"))
    with open(course / "assignments" / "toy" / "probes.py", "a") as probes:
        probes.write("\n# more than a 1 MiB disk holds\n" + ("#" * 99 + "\n") * 20000)
    return config
