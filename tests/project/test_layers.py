"""The engine's import layers (pyproject.toml [tool.importlinter]), as `make lint` checks them.

The contracts hold on the real tree, and each one fails, naming the import, when a copy of the
engine gets one wrong-direction import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter not installed")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          timeout=300)


def engine_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "autograder", tmp_path / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_engine_keeps_its_layers():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # a lower layer reaching up: the project layer importing batch grading
    ("project/paths.py", "from autograder.batch import driver", "Layers"),
    # the untrusted side importing the trusted side
    ("sandbox_runtime/wire.py", "from autograder.project import config",
     "The sandbox runtime"),
    # check.py, shipped to students, importing the engine
    ("student_files/check.py", "from autograder.project import paths", "Files shipped"),
    # the parent of a grading pulling pytest in through the plugin
    ("grading/grade.py", "from autograder.runner import pytest_plugin",
     "The trusted parent"),
    # Gradescope's entry point pulling torch in through the runner's stores
    ("gradescope/entry.py", "from autograder.runner import stores", "The trusted parent"),
    # the bundle's build (release) importing Gradescope's entry point, a layer above it
    ("release/gradescope_bundle.py", "from autograder.gradescope import entry", "Layers"),
    # the parent importing the runner process's code (it starts it by name)
    ("grading/supervisor.py", "from autograder.runner import suite", "Layers"),
    ("release/validation.py", "from autograder.runner import torch_lookup",
     "The runner is started, never imported"),
    # what was submitted is read without knowing how it is graded
    ("inputs/archives.py", "from autograder.grading import grade", "The inputs"),
    # the runner and the parent are independent: neither imports the other
    ("runner/suite.py", "from autograder.grading import grade", "Layers"),
    # torch imported by trusted code outside the runner package
    ("sandbox/rendezvous.py", "import torch.distributed",
     "Of the trusted side, only the runner imports torch or pytest"),
    ("release/validation.py", "import torch", "Of the trusted side, only the runner"),
])
def test_a_wrong_direction_import_fails_naming_it(tmp_path, module, line, contract):
    root = engine_copy(tmp_path)
    path = root / "autograder" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint(root)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken
    assert "autograder." + module.removesuffix(".py").replace("/", ".") in broken


def test_the_parents_of_a_grading_load_neither_torch_nor_pytest():
    """What the contracts cannot see (an import by name at run time) shows in sys.modules."""
    parents = ("autograder.cli", "autograder.grading.grade", "autograder.batch.worker",
               "autograder.batch.driver", "autograder.gradescope.entry")
    code = f"import sys\nfor m in {parents!r}: __import__(m)\n" \
           "print(sorted({'torch', 'pytest'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_contracts_name_packages_not_modules():
    # A contract that names a module (say, an exception for one file) stops holding the day that
    # module moves or a sibling gains the same import; packages are the layers' unit.
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    named = []
    for contract in contracts:
        for key in ("source_modules", "forbidden_modules"):
            named += contract.get(key, [])
        named += [name.strip() for layer in contract.get("layers", [])
                  for name in layer.split("|")]
        for edge in contract.get("ignore_imports", []):
            importer, imported = (side.strip() for side in edge.split("->"))
            named += [importer.removesuffix(".**"), imported]
            assert importer.endswith(".**"), f"{edge}: name the importing package (pkg.**)"
    engine = [name for name in named if name.startswith("autograder")]
    assert engine and all(name.count(".") == 1 for name in engine), sorted(
        name for name in engine if name.count(".") != 1)
