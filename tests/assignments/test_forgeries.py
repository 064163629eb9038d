"""Forgeries of distributed work, graded by the real engine end to end: each earns nothing.

A red-team review found that ranks sharing a sandbox could "meet" through files instead of a
process group, that a class merely *named* DistributedDataParallel, SyncBatchNorm or
DistributedSampler passed for torch's, and that an evaluation that never left its own process
passed for a distributed one (19/70 on dp_basics, 23/70 on ddp_training). The grader now hosts
every scenario's rendezvous store (autograder/sandbox/rendezvous.py) and checks which ranks
made a real group there, the sandbox's codec names look-alike classes as such, and each rank
of a distributed evaluation is handed only its own share of the data. The forgers are in
hostile/: the collusion ones replace torch.distributed by fakes that sum through /tmp.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from acceptance import grade_all
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions

HOSTILE = Path(__file__).parent / "hostile"
DP_BASICS = load_assignment("dp_basics", REPO)
DDP_TRAINING = load_assignment("ddp_training", REPO)

pytestmark = pytest.mark.slow


def _hostile(*names: str) -> str:
    return "".join("\n\n" + (HOSTILE / name).read_text() for name in names)


def _submissions() -> dict[str, tuple]:
    dp_source, ddp_source = DP_BASICS.solution.read_text(), DDP_TRAINING.solution.read_text()
    return {
        # name: (assignment, module text)
        "dp_basics_collusion": (DP_BASICS, strip_solutions(dp_source) + _hostile(
            "collusion_dp_basics.py", "lookalikes_dp_basics.py")),
        "dp_basics_lookalikes": (DP_BASICS, reference(dp_source) + _hostile(
            "lookalikes_dp_basics.py")),
        "ddp_training_collusion": (DDP_TRAINING, strip_solutions(ddp_source) + _hostile(
            "collusion_ddp_training.py", "local_evaluation_ddp_training.py")),
        "ddp_training_local_evaluation": (DDP_TRAINING, reference(ddp_source) + _hostile(
            "local_evaluation_ddp_training.py")),
    }


# Each forgery graded both ways the engine runs: runners started cold (`autograder grade`,
# Gradescope) and forked warm (a batch worker). The warm zygotes once lacked modules that probes
# import, and look-alike classes passed in batches only.
@pytest.fixture(scope="module", params=["cold", "warm"])
def graded(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict:
    base = tmp_path_factory.mktemp(f"forgeries_{request.param}")
    submissions = _submissions()

    folders = {}
    for name, (assignment, text) in submissions.items():
        folder = base / "submissions" / name
        folder.mkdir(parents=True)
        (folder / f"{assignment.config.module}.py").write_text(text)
        folders[name] = (folder, assignment)
    return grade_all(folders, base / "out", warm=request.param == "warm")


def by_function(report) -> dict[str, float]:
    """Coding points earned per student function (a test's name starts with it)."""
    earned: dict[str, float] = {}
    for test in report.tests:
        if test.part == "coding":
            function = test.item
            earned[function] = earned.get(function, 0.0) + test.score
    return earned


def coding(report) -> float:
    return next(p.score for p in report.parts if p.name == "coding")


def earning(report) -> list[str]:
    return [f"{t.name} ({t.score})" for t in report.tests if t.part == "coding" and t.score > 0]


@pytest.mark.parametrize("name", ["dp_basics_collusion", "ddp_training_collusion"])
def test_ranks_that_collude_through_files_earn_nothing(graded, name: str) -> None:
    report = graded[name]
    assert not isinstance(report, Exception), report
    assert coding(report) == 0, earning(report)
    # They fail on the grader's store, not on a check the fakes happened to miss.
    messages = " ".join(t.message for t in report.tests if t.part == "coding")
    assert "no process group met at the rendezvous store" in messages


def test_look_alike_classes_earn_nothing_for_their_functions(graded) -> None:
    report = graded["dp_basics_lookalikes"]
    assert not isinstance(report, Exception), report
    earned = by_function(report)
    for function in ("wrap_ddp", "convert_to_sync_batchnorm", "make_distributed_loader"):
        assert earned[function] == 0, (function, earning(report))
    messages = [t.message for t in report.tests if t.part == "coding"]
    assert any("a look-alike from dp_basics, not torch's" in text for text in messages)
    # Every other function is the reference's, and keeps its points.
    points = DP_BASICS.config.functions
    lost = {f for f, score in earned.items()
            if f not in ("wrap_ddp", "convert_to_sync_batchnorm", "make_distributed_loader")
            and abs(score - points[f]) > 1e-6}
    assert not lost, [(t.name, t.message) for t in report.tests
                      if t.part == "coding" and t.item in lost]


def test_an_evaluation_that_is_not_distributed_earns_nothing(graded) -> None:
    report = graded["ddp_training_local_evaluation"]
    assert not isinstance(report, Exception), report
    earned = by_function(report)
    assert earned["evaluate_accuracy"] == 0, earning(report)
    assert coding(report) == 70 - DDP_TRAINING.config.functions["evaluate_accuracy"]
