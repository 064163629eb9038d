"""A course's first week on the toy assignment: a Gradescope export of four submissions (a
group with a hostile member, a late one whose code is a renamed copy of another's), graded by a
real batch, with a due date and a late policy (10% off per started day)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from autograder.batch.driver import batch
from autograder.project.paths import Project

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
ANSWERS = (TOY / "submissions" / "good" / "answers.yml").read_text()
DUE = "2026-12-14T23:59:00Z"
# Alice's code with its variables renamed: the similarity check pairs the two.
RENAMED = GOOD.replace("(a, b)", "(left, right)").replace("a + b", "left + right").replace(
    "a / b if b", "left / right if right").replace("(x)", "(value)").replace("x * 2", "value * 2")
HOSTILE = GOOD.replace("def add(a, b):\n", """def add(a, b):
    import socket
    try:
        socket.create_connection(("203.0.113.9", 80), timeout=1)
    except Exception:
        pass
""")
COURSE = {  # submission -> (submitters, toy.py, created_at)
    "submission_1": ([("Alice Martin", "s001")], GOOD, "2026-12-14 20:00:00.000000000 Z"),
    "submission_2": ([("Bob Stone", "s002"), ("Mallory Vale", "s003")], HOSTILE,
                     "2026-12-14 21:00:00.000000000 Z"),
    # 30 hours late: two started days, 20% off
    "submission_3": ([("Carol Diaz", "s004")], RENAMED, "2026-12-16 05:59:00.000000000 Z"),
    "submission_4": ([("Dave Okafor", "s005")], GOOD.replace("a + b", "a - b"),
                     "2026-12-14 22:00:00.000000000 Z"),
}


@dataclass(frozen=True)
class Course:
    """A graded class of the toy assignment, due DUE, 10% off per started day late: `export`
    (a Gradescope export folder), `config` (its grading.yml) and `out` (the batch's folder:
    copy it before changing it)."""

    config: Path
    export: Path
    out: Path

    @property
    def project(self) -> Project:
        return Project.of_config(self.config)


def graded_course(root: Path, questions: str = "visible") -> Course:
    """Write the toy project, its export and grade it into ROOT/out; `questions`: the multiple
    choice's visibility (`after_due_date`: withheld, as DUE is still to come)."""
    project = root / "project"
    shutil.copytree(TOY, project, ignore=shutil.ignore_patterns("submissions", "__pycache__"))
    config = project / "grading.yml"
    text = config.read_text()
    assert "    title: Toy assignment\n" in text
    assert "visibility: visible}" in text
    text = text.replace("visibility: visible}", f"visibility: {questions}}}")
    config.write_text(text.replace("    title: Toy assignment\n", f"""    title: Toy assignment
    due: "{DUE}"
    late: {{policy: per_day, percent_per_day: 10}}
    similarity: {{min_overlap: 20}}
"""))
    export = root / "export"
    metadata = ["---"]
    for key, (people, source, created) in COURSE.items():
        (export / key).mkdir(parents=True)
        (export / key / "toy.py").write_text(source)
        (export / key / "answers.yml").write_text(ANSWERS)
        metadata += [f"{key}:", "  :submitters:"]
        for name, sid in people:
            metadata += [f"  - :name: {name}", f"    :sid: '{sid}'",
                         f"    :email: {sid}@example.edu"]
        metadata.append(f"  :created_at: {created}")
    (export / "submission_metadata.yml").write_text("\n".join(metadata) + "\n")
    out = root / "out"
    summary = batch(export, "toy", out, jobs=2, project=Project.of_config(config),
                    progress=False)
    assert (summary.total, summary.graded, summary.failed) == (4, 4, 0), summary
    return Course(config, export, out)
