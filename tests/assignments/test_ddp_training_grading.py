"""Acceptance tests of ddp_training, graded by the real engine end to end (as
test_dp_basics_grading.py does for dp_basics): the reference with the key scores 100, the blank
template 0, do-nothing submissions 0 on coding, the demo's partial example in between, and each
mutant (made from the reference by scripts/make_ddp_training_mutants.py into a temporary
folder when the tests start) fails the tests its header names and only tests of its own
function."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from generated import Generated, GeneratedAcceptance

pytestmark = pytest.mark.slow


# Issue 24: correct readings of a docstring that the tests once failed, all in alt_faithful
# (one grading); each of these functions gets every point of every test, among them the ones
# that used to fail, named here.
FAITHFUL = {
    "evaluate_accuracy": ("the counts divided in float32 (0.4000000059604645 for 0.4)",
                          ["evaluate_accuracy: accuracy over the whole dataset"]),
    "load_checkpoint": ("torch.load(path, device) on the CPU, map_location={'cuda:0': "
                        "f'cuda:{rank}'} on GPUs, both through `from torch import load`",
                        ["load_checkpoint: every rank loads onto its own GPU",
                         "load_checkpoint: on CPU ranks"]),
    "save_checkpoint": ("`from torch import save`",
                        ["save_checkpoint: rank 0 writes model, optimizer and epoch once"]),
}



class TestDdpTraining(GeneratedAcceptance):
    NAME = "ddp_training"

    @pytest.mark.parametrize("function", sorted(FAITHFUL))
    def test_a_faithful_reading_of_the_docstring_gets_full_points(self, graded: dict,
                                                                  function: str) -> None:
        reading, once_failed = FAITHFUL[function]
        tests = [t for t in graded["alt_faithful"].tests
                 if t.part == "coding" and t.name.startswith(f"{function}: ")]
        for name in once_failed:
            assert any(t.name.startswith(name) for t in tests), f"no test {name!r}"
        lost = [(t.name, t.message) for t in tests if t.score < t.max_score]
        assert not lost, f"{function} ({reading}): {lost}"

    def test_the_public_tests_accept_the_launch_variables_checked_in_any_order(
            self, subject: Generated, tmp_path: Path, mutants_dir: Path) -> None:
        """The public check of a missing variable matched "RANK" with every variable unset, so
        an init_from_env that checks WORLD_SIZE first failed it (issue 24)."""
        shutil.copytree(subject.assignment.public_tests, tmp_path / "tests")
        shutil.copy(mutants_dir / "alt_faithful.py", tmp_path / "ddp_training.py")
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "tests", "-k", "init_from_env"], capture_output=True, text=True,
                             cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "6 passed" in run.stdout, run.stdout
