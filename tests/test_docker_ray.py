"""docker/Dockerfile.ray kept in step with the package: a static check of the file, NOT a build
(no Docker daemon, and no network to pull base images, where this project is tested). What a
worker node runs is tested for real by tests/batch/test_ray_cluster.py (a worker node that sees none
of the project's files, only the installed package)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile.ray"


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))


def test_it_installs_the_package_with_its_ray_extra_and_the_makefiles_torch():
    text = DOCKERFILE.read_text()
    args = _args(text)
    makefile = re.search(r"^TORCH\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert makefile and args["TORCH"] == makefile.group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    assert re.search(r'^ray = \["ray>=[\d.]+"\]$', extras, re.MULTILINE)
    assert re.search(r'pip install "\.\[ray\]" "\$\{RAY\}"', text)
    # The package's data (report templates) is installed with it; schemas come in the bundle.
    assert 'autograder = ["templates/*"]' in pyproject


def test_its_ray_is_the_one_tested_here():
    ray = pytest.importorskip("ray")
    assert _args(DOCKERFILE.read_text())["RAY"] == f"ray=={ray.__version__}"


def test_it_holds_the_engine_only_and_starts_a_ray_node():
    text = DOCKERFILE.read_text()
    copied = [part for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE)
              for part in line.split()[:-1]]
    assert copied == ["pyproject.toml", "README.md", "autograder/"]
    for source in copied:
        assert (ROOT / source).exists()
    allowed = [line[1:] for line in (ROOT / "docker" / "Dockerfile.ray.dockerignore")
               .read_text().splitlines() if line.startswith("!")]
    assert sorted(allowed) == sorted(copied)
    # Assignments arrive as content: no project in the image, no path of the driver's.
    assert "AUTOGRADER_ROOT" not in text.split("# Build from")[1]
    assert not re.search(r"^COPY .*(assignments|grading\.yml|schemas)", text, re.MULTILINE)
    assert 'ENTRYPOINT ["ray", "start", "--block", "--disable-usage-stats"]' in text
