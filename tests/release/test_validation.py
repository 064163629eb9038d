"""`autograder validate`'s warnings: torch names the installed torch lacks, and keys leaked
into what a student reads (the template, the public tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from repo_project import REPO

from autograder.project.config import load_config
from autograder.project.paths import Project
from autograder.project.question_bank import (
    bank_from_data,
    key_phrases,
    key_sequences,
    key_texts,
    leaks,
)
from autograder.release.validation import check_warnings, missing_torch_names

ROOT = Path(__file__).resolve().parents[2]


def _course(tmp_path: Path, name: str = "ddp_training") -> Path:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments" / name, course / "assignments" / name,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "student_templates" / name, course / "student_templates" / name,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "grading.yml", course / "grading.yml")
    return course


def test_every_assignment_is_clean() -> None:
    for name in load_config(REPO):
        assert check_warnings(name, REPO) == [], name


def test_names_torch_has_are_not_reported() -> None:
    text = ("torch.nn.parallel.DataParallel, torch.nn.utils.clip_grad_norm_, ValueError, "
            "torch.OutOfMemoryError, _check_sync_bufs_pre_fwd (torch/nn/parallel/distributed.py)")
    assert missing_torch_names(text) == []


def test_a_planted_nonexistent_torch_name_is_reported(tmp_path: Path) -> None:
    course = _course(tmp_path)
    bank_file = course / "assignments" / "ddp_training" / "questions.yml"
    data = yaml.safe_load(bank_file.read_text(encoding="utf-8"))
    data["questions"][0]["explanation"] += (
        " See torch.distributed.elastic.rank_for_node, _node_rank_table and NodeRankError"
        " (torch/distributed/elastic/ranks.py).")
    bank_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    found = check_warnings("ddp_training", Project.of_config(course / "grading.yml"))
    for name in ("torch.distributed.elastic.rank_for_node", "_node_rank_table",
                 "NodeRankError", "torch/distributed/elastic/ranks.py"):
        assert any(f"q01 explanation names {name}," in line for line in found), (name, found)


def test_a_distractor_may_name_what_torch_lacks_when_its_feedback_says_so() -> None:
    text = (ROOT / "assignments" / "dp_basics" / "questions.yml").read_text(encoding="utf-8")
    bank = bank_from_data(yaml.safe_load(text), REPO.schemas)
    from autograder.project.question_bank import question_texts
    q07 = next(q for q in bank.questions if q.id == "q07")
    assert [where for where, _ in question_texts(q07)] == ["explanation", "option A",
                                                           "option C"]


def test_a_leak_planted_in_a_public_test_is_found(tmp_path: Path) -> None:
    course = _course(tmp_path)
    text = (course / "assignments" / "ddp_training" / "questions.yml").read_text("utf-8")
    bank = bank_from_data(yaml.safe_load(text), REPO.schemas)
    q = next(q for q in bank.questions if key_phrases(q))
    phrase = " ".join(sorted(key_phrases(q))[0])
    public = course / "assignments" / "ddp_training" / "tests" / "public" / "test_public.py"
    public.write_text(public.read_text("utf-8") + f"\n# Note: {phrase.upper()}!\n", "utf-8")
    found = check_warnings("ddp_training", Project.of_config(course / "grading.yml"))
    assert any(line.startswith(f"leak: {q.id}: assignments/ddp_training/tests/public/"
                               "test_public.py holds the key's phrase") for line in found), found


def test_a_leaked_number_is_found_and_numbers_every_option_has_are_not() -> None:
    data = {"assignment": "x", "questions": [{
        "id": "q01", "source": "new", "topic": "t", "stem": "How many samples in all?",
        "options": {"A": "12", "B": "10", "C": "40 or 10"}, "answer": ["A"],
        "multiple": False, "points": 1, "hint": "h", "explanation": "e",
        "feedback": {"B": "b", "C": "c"}}]}
    q = bank_from_data(data, REPO.schemas).questions[0]
    assert leaks(q, {"t.py": "pads to 12 samples"}) == ["q01: t.py holds the key's number 12"]
    assert leaks(q, {"t.py": "10 samples, 112 or 1.2"}) == []


def _bank(course: Path, name: str):
    return bank_from_data(yaml.safe_load(
        (course / "assignments" / name / "questions.yml").read_text("utf-8")), REPO.schemas)


def test_a_leak_planted_in_a_template_docstring_is_found(tmp_path: Path) -> None:
    # A key's whole text, re-wrapped and re-cased inside a docstring, as a template would word it.
    course = _course(tmp_path)
    q = next(q for q in _bank(course, "ddp_training").questions if key_texts(q))
    words = " ".join(sorted(key_texts(q))[0]).split()
    wrapped = "\n    ".join(" ".join(words[i:i + 4]).capitalize() for i in range(0, len(words), 4))
    template = course / "student_templates" / "ddp_training" / "ddp_training.py"
    source = template.read_text("utf-8")
    marker = '    """Initialise the default process group'
    assert marker in source
    template.write_text(source.replace(marker, f'    """{wrapped}.\n\n    Initialise the '
                                                "default process group", 1), "utf-8")
    found = check_warnings("ddp_training", Project.of_config(course / "grading.yml"))
    assert any(line.startswith(f"leak: {q.id}: student_templates/ddp_training/ddp_training.py "
                               "holds the key's text") for line in found), found


def test_a_run_of_the_keys_numbers_in_the_notebook_or_the_readme_is_found(
        tmp_path: Path) -> None:
    course = _course(tmp_path, "dp_basics")
    q = next(q for q in _bank(course, "dp_basics").questions if key_sequences(q))
    numbers = sorted(key_sequences(q))[0]
    folder = course / "student_templates" / "dp_basics"
    notebook = folder / "dp_basics.ipynb"
    data = json.loads(notebook.read_text("utf-8"))
    data["cells"][1]["source"] = ["# e.g. [", ",\n".join(numbers), "]\n"]
    notebook.write_text(json.dumps(data), "utf-8")
    readme = folder / "README.md"
    readme.write_text(readme.read_text("utf-8") + f"\nFor example ({', '.join(numbers)}).\n")
    found = check_warnings("dp_basics", Project.of_config(course / "grading.yml"))
    for label in ("dp_basics.ipynb", "README.md"):
        assert f"leak: {q.id}: student_templates/dp_basics/{label} holds the key's numbers " \
               f"{', '.join(numbers)}" in found, (label, found)


def test_runs_of_small_numbers_and_whole_keys_are_matched_and_what_others_hold_is_not() -> None:
    data = {"assignment": "x", "questions": [{
        "id": "q01", "source": "new", "topic": "t",
        "stem": "Which indices does rank 3 of 4 get from 10 samples?",
        "options": {"A": "[3, 7, 1]", "B": "[3, 7]", "C": "[9]",
                    "D": "Rank 3 gets every fourth sample"},
        "answer": ["A"], "multiple": False, "points": 1, "hint": "h", "explanation": "e",
        "feedback": {"B": "b", "C": "c", "D": "d"}}, {
        "id": "q02", "source": "new", "topic": "t", "stem": "Which is true?",
        "options": {"A": "The ranks shuffle alike", "B": "The ranks shuffle alike and stop",
                    "C": "Each rank pads its share with its own first samples"},
        "answer": ["C"], "multiple": False, "points": 1, "hint": "h", "explanation": "e",
        "feedback": {"A": "a", "B": "b"}}]}
    q01, q02 = bank_from_data(data, REPO.schemas).questions
    assert key_sequences(q01) == {("3", "7", "1")}
    assert leaks(q01, {"t.py": "shares: [0, 4, 8], [3, 7,\n 1]"}) == [
        "q01: t.py holds the key's numbers 3, 7, 1"]
    assert leaks(q01, {"t.py": "[3, 7] and [7, 1] and 3, 7, 10 and x3, 7, 1"}) == []
    assert key_texts(q02) == {tuple("each rank pads its share with its own first samples".split())}
    assert leaks(q02, {"t.py": "EACH rank pads its\n    share with its own first samples."})[0] \
        == "q02: t.py holds the key's text 'each rank pads its share with its own first samples'"
    q02_wrong = bank_from_data({**data, "questions": [
        {**data["questions"][1], "answer": ["A"], "feedback": {"B": "b", "C": "c"}}]},
        REPO.schemas).questions[0]
    assert key_texts(q02_wrong) == set()  # a wrong option holds the key's words in a row
