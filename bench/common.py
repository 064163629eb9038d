"""What the benchmark scripts share: a reference submission, timing, A/B comparison."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def reference_submission(folder: Path, name: str = "dp_basics") -> Path:
    """The reference solution (markers removed) with the full key, as a submission folder."""
    sys.path.insert(0, str(ROOT))
    from autograder.project.assignment import load_assignment
    from autograder.project.markers import reference
    from autograder.project.paths import Project

    assignment = load_assignment(name, Project.find())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{assignment.config.module}.py").write_text(
        reference(assignment.solution.read_text()))
    key = {q.id: (list(q.answer) if q.multiple else q.answer[0])
           for q in assignment.bank.questions}
    (folder / "answers.yml").write_text(yaml.safe_dump(key))
    return folder


def grade_command(submission: Path, out: Path) -> list[str]:
    return [str(BIN / "autograder"), "grade", str(submission), "--assignment", "dp_basics",
            "--out", str(out)]


def timed(command: list[str], env: dict | None = None, ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one run of `command`; exits if it fails."""
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if result.returncode not in ok:
        sys.exit(f"command failed ({result.returncode}): {' '.join(command)}\n"
                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed


def compare(runs: int, a: tuple[str, list[str], dict | None],
            b: tuple[str, list[str], dict | None], ok_b: tuple[int, ...] = (0,),
            target: str = "") -> None:
    """Time A and B alternately after one warm-up each; print medians and per-pair ratios."""
    (label_a, cmd_a, env_a), (label_b, cmd_b, env_b) = a, b
    timed(cmd_a, env_a), timed(cmd_b, env_b, ok_b)  # warm-up: file caches
    times_a, times_b = [], []
    for _ in range(runs):
        times_a.append(timed(cmd_a, env_a))
        times_b.append(timed(cmd_b, env_b, ok_b))
    ratios = [x / y for x, y in zip(times_a, times_b, strict=True)]
    print(f"runs: {runs} each, alternating")
    for name, label, times in (("A", label_a, times_a), ("B", label_b, times_b)):
        print(f"{name}  {label:<38} median {statistics.median(times):6.2f} s  "
              f"(min {min(times):.2f}, max {max(times):.2f})")
    print(f"A/B per pair: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median ratio {statistics.median(ratios):.2f}{target}")
