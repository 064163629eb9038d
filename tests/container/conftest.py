"""A Docker daemon, the stand-in base image and each assignment's Gradescope image, once a session.

Docker comes from Debian's packages (`make container` installs docker.io and debootstrap).
Where no daemon answers and we are root, one is started for the session (`dockerd
--iptables=false --bridge=none`: graded runs use `--network none` as Gradescope's do, and the one
build step that needs the network uses the host's) and stopped at the end; images stay cached
in Docker's own store between sessions. Without Docker the tests skip, except in CI (CI=1),
where they fail: the container is a deployment target, not an option.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from repo_project import REPO

from autograder.gradescope import container
from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import key_answers
from autograder.release.gradescope_bundle import build_bundle

HOSTILE = Path(__file__).with_name("hostile_gradescope.py")
SABOTEUR = Path(__file__).with_name("saboteur_gradescope.py")


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must test the container: `make container` installs Docker)")
    pytest.skip(why)


def _answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="session")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if shutil.which("docker") is None:
        _unavailable("docker is not installed")
    if _answers():
        yield
        return
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        _unavailable("no Docker daemon answers, and none can be started here")
    folder = tmp_path_factory.mktemp("dockerd")
    log, pidfile = folder / "dockerd.log", folder / "dockerd.pid"
    # Started by a shell that exits at once: the daemon is no child of this test process, which
    # other tests check has none left (tests/test_input_layer.py).
    subprocess.run(["sh", "-c", 'dockerd --iptables=false --bridge=none --pidfile "$1" '
                    '>"$2" 2>&1 </dev/null &', "sh", str(pidfile), str(log)], check=True)
    deadline = time.monotonic() + 60
    while not _answers():
        if time.monotonic() > deadline:
            _stop(pidfile)
            _unavailable(f"dockerd did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    yield
    _stop(pidfile)


def _stop(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def base(docker_daemon: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    return container.base_image(log=tmp_path_factory.mktemp("base") / "debootstrap.log")


@pytest.fixture(scope="session")
def image(base: str, tmp_path_factory: pytest.TempPathFactory):
    """image(name): the Gradescope image of assignment `name`, built from a fresh bundle."""
    built: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in built:
            folder = tmp_path_factory.mktemp(f"bundle-{name}")
            bundle = build_bundle(name, REPO, folder / f"{name}-gradescope.zip")
            built[name] = container.build_image(bundle, base,
                                                container.PipSettings.from_environment(),
                                                log=folder / "setup.log")
        return built[name]
    return get


@pytest.fixture(scope="session")
def submission(tmp_path_factory: pytest.TempPathFactory):
    """submission(name, kind): a folder holding the reference with the key ("reference"), the
    blank template ("blank"), the blank template with HOSTILE appended ("hostile"), or the
    reference and key with SABOTEUR appended ("saboteur")."""
    made: dict[tuple[str, str], Path] = {}

    def get(name: str, kind: str) -> Path:
        if (name, kind) not in made:
            assignment = load_assignment(name, REPO)
            folder = tmp_path_factory.mktemp(f"{name}-{kind}")
            source = assignment.solution.read_text()
            module = folder / f"{assignment.config.module}.py"
            if kind in ("reference", "saboteur"):
                extra = "\n" + SABOTEUR.read_text() if kind == "saboteur" else ""
                module.write_text(reference(source) + extra)
                (folder / "answers.yml").write_text(yaml.safe_dump(key_answers(assignment.bank)))
            elif kind == "blank":
                module.write_text(strip_solutions(source))
            else:
                module.write_text(strip_solutions(source) + "\n" + HOSTILE.read_text())
            made[(name, kind)] = folder
        return made[(name, kind)]
    return get
