"""The dp_basics question bank: loads, is complete, and bad banks are rejected precisely."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from repo_project import REPO

from autograder.project.question_bank import (
    ENVIRONMENTS,
    QuestionBankError,
    QuestionBankWarning,
    answers_schema,
    bank_from_data,
    bank_path,
    bank_warnings,
    load_bank,
    render_answers_schema,
)

ROOT = Path(__file__).resolve().parents[2]
BANK_PATH = bank_path(REPO, "dp_basics")


@pytest.fixture(scope="module")
def raw_bank() -> dict[str, Any]:
    return yaml.safe_load(BANK_PATH.read_text(encoding="utf-8"))


def test_bank_loads_with_20_questions_worth_30_points() -> None:
    bank = load_bank(BANK_PATH, REPO.schemas)
    assert bank.assignment == "dp_basics"
    assert len(bank.questions) == 20
    assert bank.total_points == pytest.approx(30.0)
    assert all(q.points == 1.5 for q in bank.questions)
    assert list(bank.by_id) == [q.id for q in bank.questions]
    assert bank.questions[2].title == f"Q3 {bank.questions[2].id}"


def test_bank_covers_the_seed_but_its_two_near_duplicates() -> None:
    # Seed practice 1 and 3 asked again what challenge 1 and 2 ask; new questions replace them.
    sources = Counter(q.source for q in load_bank(BANK_PATH, REPO.schemas).questions)
    for n in range(1, 6):
        assert sources[f"seed challenge {n}"] == 1
        assert sources[f"seed practice {n}"] == (0 if n in (1, 3) else 1)
    assert sources["new"] == 12


def test_ids_are_neutral() -> None:
    # Ids are shown to students in answers.yml: they must not hint at any answer.
    bank = load_bank(BANK_PATH, REPO.schemas)
    assert [q.id for q in bank.questions] == [f"q{n:02d}" for n in range(1, 21)]


def test_no_feedback_quotes_the_keyed_option() -> None:
    for q in load_bank(BANK_PATH, REPO.schemas).questions:
        for letter, text in q.feedback.items():
            for key in q.answer:
                keyed = " ".join(q.options[key].split())
                assert keyed not in " ".join(text.split()), (q.id, letter)
            assert "correct answer" not in text.lower(), (q.id, letter)


def test_the_key_is_balanced_and_not_cued_by_length() -> None:
    bank = load_bank(BANK_PATH, REPO.schemas)
    assert bank.warnings == [] and bank_warnings(bank) == []


def test_every_wrong_option_has_feedback_and_nothing_else_does() -> None:
    for q in load_bank(BANK_PATH, REPO.schemas).questions:
        wrong = [x for x in q.options if x not in q.answer]
        assert wrong, q.id
        assert sorted(q.feedback) == sorted(wrong), q.id
        assert all(text.strip() for text in q.feedback.values()), q.id
        assert q.hint.strip() and q.explanation.strip(), q.id


def test_machine_dependent_snippets_name_the_machine_in_the_stem() -> None:
    # When the outcome differs between machines, the stem must say which machine it means.
    for q in load_bank(BANK_PATH, REPO.schemas).questions:
        if q.snippet is None:
            continue
        outcomes = {q.snippet.expect[env] for env in ENVIRONMENTS}
        if len(outcomes) > 1:
            assert "GPU" in q.stem, f"{q.id}: outcome depends on the machine; say which in the stem"


def test_shown_code_is_the_code_that_was_run() -> None:
    # Predict-the-outcome questions show exactly the snippet that backs their key.
    for q in load_bank(BANK_PATH, REPO.schemas).questions:
        if q.code and q.snippet and not q.multiple:
            assert q.code == q.snippet.code, q.id


def test_schemas_are_valid_json_schemas() -> None:
    jsonschema.Draft202012Validator.check_schema(
        json.loads((REPO.schemas / "questions.schema.json").read_text(encoding="utf-8")))
    jsonschema.Draft202012Validator.check_schema(answers_schema(load_bank(BANK_PATH, REPO.schemas)))


def test_each_assignment_ships_the_answers_schema_of_its_own_bank() -> None:
    """One schema per assignment, derived from its bank: no global answers schema."""
    assert not (ROOT / "schemas" / "answers.schema.json").exists()
    names = sorted(p.parent.name for p in (ROOT / "assignments").glob("*/questions.yml"))
    assert len(names) >= 2, names
    shipped = {}
    for name in names:
        text = (ROOT / "student_templates" / name / "answers.schema.json").read_text()
        assert text == render_answers_schema(load_bank(bank_path(REPO, name), REPO.schemas)), \
            f"student_templates/{name}/answers.schema.json is stale: run autograder generate"
        shipped[name] = json.loads(text)
        assert shipped[name]["title"].endswith(name) and name in shipped[name]["$id"]
    # Banks of the same shape (ten single-choice questions q01..q10) give the same properties:
    # what differs is whose schema it is.
    assert len({s["$id"] for s in shipped.values()}) == len(names)


def test_the_key_is_a_valid_answers_file() -> None:
    bank = load_bank(BANK_PATH, REPO.schemas)
    key = {q.id: list(q.answer) if q.multiple else q.answer[0] for q in bank.questions}
    jsonschema.validate(key, answers_schema(bank))


def _errors(data: Any) -> str:
    with pytest.raises(QuestionBankError) as info:
        bank_from_data(data, REPO.schemas, "bank.yml")
    return "\n".join(info.value.errors)


def _question(raw_bank: dict[str, Any], qid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = copy.deepcopy(raw_bank)
    return data, next(q for q in data["questions"] if q["id"] == qid)


def test_missing_feedback_for_a_wrong_option_names_the_question(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q11")
    del q["feedback"]["D"]
    message = _errors(data)
    assert "question 'q11' (questions[10]) at feedback" in message
    assert "missing for wrong option(s) D" in message


def test_feedback_for_a_right_option_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q11")
    q["feedback"]["C"] = "but C is right"
    assert "'q11'" in _errors(data) and "C is not a wrong option" in _errors(data)


def test_answer_outside_the_options_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q01")
    q["answer"] = ["F"]
    message = _errors(data)
    assert "question 'q01' (questions[0]) at answer: F not among the options" \
        in message


def test_option_letters_must_be_consecutive(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q05")
    q["options"]["F"] = q["options"].pop("D")
    q["feedback"]["F"] = q["feedback"].pop("D")
    assert "'q05'" in _errors(data) and "consecutive from A" in _errors(data)


def test_unknown_key_names_the_question_and_the_key(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q20")
    q["answr"] = ["A"]
    message = _errors(data)
    assert "question 'q20' (questions[19])" in message and "'answr'" in message


def test_wrong_type_names_the_path(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q12")
    q["points"] = "1.5"
    assert "question 'q12' (questions[11]) at points" in _errors(data)


def test_bad_snippet_outcome_names_the_environment(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q11")
    q["snippet"]["expect"]["one_gpu"] = {"stdout": "x", "raises": "RuntimeError"}
    assert "question 'q11' (questions[10]) at snippet.expect.one_gpu" in _errors(data)
    del q["snippet"]["expect"]["one_gpu"]
    assert "'one_gpu' is a required property" in _errors(data)


def test_bad_regex_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "q13")
    q["snippet"]["expect"]["no_gpu"] = {"raises": "RuntimeError", "match": "module.("}
    assert "'q13'" in _errors(data) and "snippet.expect.no_gpu.match" in \
        _errors(data)


def test_duplicate_ids_are_rejected(raw_bank: dict) -> None:
    data = copy.deepcopy(raw_bank)
    data["questions"][1]["id"] = data["questions"][0]["id"]
    assert "question 'q01' (questions[1]) at id: duplicate of questions[0]" in \
        _errors(data)


def test_bank_must_be_a_mapping() -> None:
    assert "top level: expected a mapping" in _errors([1, 2])


def test_yaml_syntax_error_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "questions.yml"
    path.write_text("assignment: dp_basics\nquestions:\n  - id: [unclosed\n", encoding="utf-8")
    with pytest.raises(QuestionBankError) as info:
        load_bank(path, REPO.schemas)
    assert "line 4" in str(info.value) or "line 3" in str(info.value)


def _skewed_bank(raw_bank: dict) -> dict:
    """The bank with every single-answer key moved to A, the key made the longest option."""
    data = copy.deepcopy(raw_bank)
    for q in data["questions"]:
        if q["multiple"] or len(q["answer"]) > 1:
            continue
        key = q["answer"][0]
        options, feedback = q["options"], q["feedback"]
        options["A"], options[key] = options[key], options["A"]
        if key != "A":
            feedback[key] = feedback.pop("A")
        options["A"] += " (the longest option by far, to be sure)" * 3
        q["answer"] = ["A"]
    return data


def test_unbalanced_letters_and_length_cues_warn_but_do_not_fail(raw_bank: dict,
                                                                 tmp_path: Path) -> None:
    data = _skewed_bank(raw_bank)
    bank = bank_from_data(data, REPO.schemas)  # still a valid bank
    found = bank_warnings(bank)
    assert len(found) == 2, found
    assert found[0].startswith("keyed letters are unbalanced over the 18 single-answer "
                               "questions: A 17.5, B 0, C 0.5, D 0")
    assert found[1].startswith("the key is the longest option (or joint longest) in 18 of 18")
    path = tmp_path / "questions.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.warns(QuestionBankWarning) as caught:
        loaded = load_bank(path, REPO.schemas)
    assert loaded.warnings == found
    assert [str(w.message) for w in caught] == [f"{path}: {w}" for w in found]


def test_the_shortest_key_is_a_cue_too(raw_bank: dict) -> None:
    data = copy.deepcopy(raw_bank)
    for q in data["questions"]:
        for letter in q["answer"]:
            q["options"][letter] = "x"
    assert any("shortest option" in w for w in bank_warnings(bank_from_data(data, REPO.schemas)))


def test_small_banks_are_not_judged() -> None:
    data = {"assignment": "toy", "questions": [
        {"id": f"t{n}", "source": "new", "topic": "t", "stem": "s", "options":
         {"A": "a much longer option than the other", "B": "b"}, "answer": ["A"],
         "multiple": False, "points": 1, "hint": "h", "explanation": "e",
         "feedback": {"B": "no"}} for n in range(7)]}
    assert bank_warnings(bank_from_data(data, REPO.schemas)) == []


def test_validate_prints_the_warning_and_succeeds(raw_bank: dict, tmp_path: Path) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments" / "dp_basics", course / "assignments" / "dp_basics",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "grading.yml", course / "grading.yml")
    (course / "assignments" / "dp_basics" / "questions.yml").write_text(
        yaml.safe_dump(_skewed_bank(raw_bank)), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "autograder.cli", "validate", "dp_basics",
                             "--config", str(course / "grading.yml")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "QuestionBankWarning" in result.stderr
    assert "keyed letters are unbalanced" in result.stderr
    assert "the key is the longest option" in result.stderr
