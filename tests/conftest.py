"""Shared fixtures for the project's own tests."""

from __future__ import annotations

import resource
import shutil
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from repo_project import REPO

from autograder.project.config import default_limits
from autograder.sandbox.client import Sandbox, Starts
from autograder.sandbox.folder import prepare_sandbox_dir


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background (`make test &` in a script, without job control)
    # inherits SIGINT ignored, and so would every batch it starts: the Ctrl-C tests would then
    # see a batch that never stops. Ctrl-C is Python's again, here and in those processes.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Parallel runs (`make test`: pytest -n 3): the unit of work is a test file, run whole by one
# process, so its module fixtures start once; files that share a resource share a unit, and a
# file of independent long tests is split. (By path: pytest-xdist's own `loadgroup` marks do
# not take with pytest 9, which no longer reads a test's id from `_nodeid`.)
SHARED_UNITS = {"tests/batch/test_ray_workers.py": "ray",  # one local Ray instance at a time:
                "tests/batch/test_ray_cluster.py": "ray"}  # a loaded machine makes raylets late
SPLIT_FILES = {"tests/test_fuzz_inputs.py"}


@pytest.hookimpl(optionalhook=True)  # (a run without pytest-xdist has no such hook)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.partition("::")[0]
            return SHARED_UNITS.get(path) or (nodeid if path in SPLIT_FILES else path)

    return ByFile(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a test marked `slow` first (parallel runs hand out units in this order: the
    last unit to start should be a short one), each file's tests still together."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable


# Where the suite's CPU goes: each test's CPU seconds (its process and every child it reaped,
# graders and their sandboxes), sent with its report (parallel runs too; `--junitxml` keeps it as
# a property), summed by file at the end. Wall time is --durations'; on two cores, with most
# tests waiting on subprocesses, CPU is what decides how long the whole suite takes.
CPU_STARTED = pytest.StashKey[float]()
_cpu_by_file: dict[str, float] = {}


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[CPU_STARTED] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    if call.when == "teardown" and CPU_STARTED in item.stash:
        spent = round(_cpu_seconds() - item.stash[CPU_STARTED], 2)
        report.user_properties = [*report.user_properties, ("cpu_s", spent)]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s":
            path = report.nodeid.partition("::")[0]
            _cpu_by_file[path] = _cpu_by_file.get(path, 0.0) + float(value)


def pytest_terminal_summary(terminalreporter: object, config: pytest.Config) -> None:
    if not _cpu_by_file or config.getoption("collectonly"):
        return
    write = terminalreporter.write_line
    terminalreporter.section("CPU seconds by test file (with the children each test reaped)")
    for path, seconds in sorted(_cpu_by_file.items(), key=lambda kv: -kv[1])[:15]:
        write(f"{seconds:8.1f}  {path}")
    write(f"{sum(_cpu_by_file.values()):8.1f}  in all ({len(_cpu_by_file)} files)")


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

        sandbox = Sandbox(folder, "dp_basics",
                          default_limits(REPO.schemas, **{"call_timeout": 5, **limits}),
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
