"""`autograder validate`'s warnings: torch names the installed torch lacks, and keys leaked
into what a student reads (the template, the public tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from autograder.project.question_bank import bank_from_data, key_phrases, leaks
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


def test_both_assignments_are_clean() -> None:
    for name in ("dp_basics", "ddp_training"):
        assert check_warnings(name, ROOT / "grading.yml") == [], name


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
    found = check_warnings("ddp_training", course / "grading.yml")
    for name in ("torch.distributed.elastic.rank_for_node", "_node_rank_table",
                 "NodeRankError", "torch/distributed/elastic/ranks.py"):
        assert any(f"q01 explanation names {name}," in line for line in found), (name, found)


def test_a_distractor_may_name_what_torch_lacks_when_its_feedback_says_so() -> None:
    bank = bank_from_data(yaml.safe_load(
        (ROOT / "assignments" / "dp_basics" / "questions.yml").read_text(encoding="utf-8")))
    from autograder.project.question_bank import question_texts
    q07 = next(q for q in bank.questions if q.id == "q07")
    assert [where for where, _ in question_texts(q07)] == ["explanation", "option A",
                                                           "option C"]


def test_a_leak_planted_in_a_public_test_is_found(tmp_path: Path) -> None:
    course = _course(tmp_path)
    bank = bank_from_data(yaml.safe_load(
        (course / "assignments" / "ddp_training" / "questions.yml").read_text("utf-8")))
    q = next(q for q in bank.questions if key_phrases(q))
    phrase = " ".join(sorted(key_phrases(q))[0])
    public = course / "assignments" / "ddp_training" / "tests" / "public" / "test_public.py"
    public.write_text(public.read_text("utf-8") + f"\n# Note: {phrase.upper()}!\n", "utf-8")
    found = check_warnings("ddp_training", course / "grading.yml")
    assert any(line.startswith(f"leak: {q.id}: assignments/ddp_training/tests/public/"
                               "test_public.py holds the key's phrase") for line in found), found


def test_a_leaked_number_is_found_and_numbers_every_option_has_are_not() -> None:
    data = {"assignment": "x", "questions": [{
        "id": "q01", "source": "new", "topic": "t", "stem": "How many samples in all?",
        "options": {"A": "12", "B": "10", "C": "40 or 10"}, "answer": ["A"],
        "multiple": False, "points": 1, "hint": "h", "explanation": "e",
        "feedback": {"B": "b", "C": "c"}}]}
    q = bank_from_data(data).questions[0]
    assert leaks(q, {"t.py": "pads to 12 samples"}) == ["q01: t.py holds the key's number 12"]
    assert leaks(q, {"t.py": "10 samples, 112 or 1.2"}) == []
