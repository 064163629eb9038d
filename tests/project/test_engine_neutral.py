"""The engine (autograder/) holds no assignment: no name, module or function of any assignment
under assignments/ appears in its code, templates or help texts; callers pass the assignment."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "autograder"


def assignment_words() -> dict[str, str]:
    """Word -> where it comes from, for every assignment folder under assignments/."""
    words = {}
    config = yaml.safe_load((ROOT / "grading.yml").read_text())["assignments"]
    for folder in sorted(p for p in (ROOT / "assignments").iterdir() if p.is_dir()):
        words[folder.name] = f"assignment {folder.name}"
        entry = config.get(folder.name) or {}
        if entry.get("module"):
            words[entry["module"]] = f"module of {folder.name}"
        for function in entry.get("parts", {}).get("coding", {}).get("functions", {}):
            words[function] = f"function of {folder.name}"
    return words


def engine_hits(words: dict[str, str], engine: Path = ENGINE) -> list[str]:
    """`file:line: word (where from): line` for each word found in the engine's files."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words))) + r")\b")
    hits = []
    for path in sorted(engine.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                hits.append(f"{path.relative_to(engine.parent)}:{number}: {match.group(1)} "
                            f"({words[match.group(1)]}): {line.strip()}")
    return hits


def test_the_words_come_from_the_assignments() -> None:
    words = assignment_words()
    # Both assignments, their modules and their functions: the scan looks for something real.
    assert {"dp_basics", "ddp_training", "wrap_data_parallel", "init_from_env"} <= set(words)


def test_the_scan_finds_a_planted_name(tmp_path: Path) -> None:
    engine = tmp_path / "autograder"
    (engine / "questions").mkdir(parents=True)
    (engine / "questions" / "bank.py").write_text(
        'DEFAULT_ASSIGNMENT = "dp_basics"\n# dp_basicsX, my_init_from_env: other words\n')
    (engine / "cli.j2").write_text("help: e.g. init_from_env\n")
    hits = engine_hits(assignment_words(), engine)
    assert [h.split(" (")[0] for h in hits] == [
        "autograder/cli.j2:1: init_from_env", "autograder/questions/bank.py:1: dp_basics"], hits


def test_no_assignment_appears_in_the_engine() -> None:
    hits = engine_hits(assignment_words())
    assert not hits, "the engine names assignments (make it generic):\n" + "\n".join(hits)
