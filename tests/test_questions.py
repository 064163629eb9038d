"""The dp_basics question bank: loads, is complete, and bad banks are rejected precisely."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from autograder.questions import (
    ANSWERS_SCHEMA_PATH,
    QUESTIONS_SCHEMA_PATH,
    QuestionBankError,
    answers_schema,
    bank_from_data,
    bank_path,
    load_bank,
    render_answers_schema,
)
from autograder.snippets import ENVIRONMENTS


@pytest.fixture(scope="module")
def raw_bank() -> dict[str, Any]:
    return yaml.safe_load(bank_path().read_text(encoding="utf-8"))


def test_bank_loads_with_20_questions_worth_30_points() -> None:
    bank = load_bank()
    assert bank.assignment == "dp_basics"
    assert len(bank.questions) == 20
    assert bank.total_points == pytest.approx(30.0)
    assert all(q.points == 1.5 for q in bank.questions)
    assert list(bank.by_id) == [q.id for q in bank.questions]
    assert bank.questions[2].title == f"Q3 {bank.questions[2].id}"


def test_bank_covers_the_whole_seed_and_ten_new_questions() -> None:
    sources = Counter(q.source for q in load_bank().questions)
    for n in range(1, 6):
        assert sources[f"seed challenge {n}"] == 1
        assert sources[f"seed practice {n}"] == 1
    assert sources["new"] == 10


def test_every_wrong_option_has_feedback_and_nothing_else_does() -> None:
    for q in load_bank().questions:
        wrong = [x for x in q.options if x not in q.answer]
        assert wrong, q.id
        assert sorted(q.feedback) == sorted(wrong), q.id
        assert all(text.strip() for text in q.feedback.values()), q.id
        assert q.hint.strip() and q.explanation.strip(), q.id


def test_machine_dependent_snippets_name_the_machine_in_the_stem() -> None:
    # When the outcome differs between machines, the stem must say which machine it means.
    for q in load_bank().questions:
        if q.snippet is None:
            continue
        outcomes = {q.snippet.expect[env] for env in ENVIRONMENTS}
        if len(outcomes) > 1:
            assert "GPU" in q.stem, f"{q.id}: outcome depends on the machine; say which in the stem"


def test_shown_code_is_the_code_that_was_run() -> None:
    # Predict-the-outcome questions show exactly the snippet that backs their key.
    for q in load_bank().questions:
        if q.code and q.snippet and not q.multiple:
            assert q.code == q.snippet.code, q.id


def test_schemas_are_valid_json_schemas() -> None:
    jsonschema.Draft202012Validator.check_schema(
        json.loads(QUESTIONS_SCHEMA_PATH.read_text(encoding="utf-8")))
    jsonschema.Draft202012Validator.check_schema(answers_schema(load_bank()))


def test_committed_answers_schema_is_in_sync_with_the_bank() -> None:
    committed = ANSWERS_SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == render_answers_schema(load_bank()), \
        "schemas/answers.schema.json is stale: run python -m autograder.questions"


def test_the_key_is_a_valid_answers_file() -> None:
    bank = load_bank()
    key = {q.id: list(q.answer) if q.multiple else q.answer[0] for q in bank.questions}
    jsonschema.validate(key, answers_schema(bank))


def _errors(data: Any) -> str:
    with pytest.raises(QuestionBankError) as info:
        bank_from_data(data, "bank.yml")
    return "\n".join(info.value.errors)


def _question(raw_bank: dict[str, Any], qid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = copy.deepcopy(raw_bank)
    return data, next(q for q in data["questions"] if q["id"] == qid)


def test_missing_feedback_for_a_wrong_option_names_the_question(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_chunk_sizes")
    del q["feedback"]["C"]
    message = _errors(data)
    assert "question 'dp_chunk_sizes' (questions[10]) at feedback" in message
    assert "missing for wrong option(s) C" in message


def test_feedback_for_a_right_option_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_chunk_sizes")
    q["feedback"]["B"] = "but B is right"
    assert "'dp_chunk_sizes'" in _errors(data) and "B is not a wrong option" in _errors(data)


def test_answer_outside_the_options_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "why_data_parallel")
    q["answer"] = ["F"]
    message = _errors(data)
    assert "question 'why_data_parallel' (questions[0]) at answer: F not among the options" \
        in message


def test_option_letters_must_be_consecutive(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_main_purpose")
    q["options"]["F"] = q["options"].pop("D")
    q["feedback"]["F"] = q["feedback"].pop("D")
    assert "'dp_main_purpose'" in _errors(data) and "consecutive from A" in _errors(data)


def test_unknown_key_names_the_question_and_the_key(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "syncbn_convert")
    q["answr"] = ["A"]
    message = _errors(data)
    assert "question 'syncbn_convert' (questions[19])" in message and "'answr'" in message


def test_wrong_type_names_the_path(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_devices_used")
    q["points"] = "1.5"
    assert "question 'dp_devices_used' (questions[11]) at points" in _errors(data)


def test_bad_snippet_outcome_names_the_environment(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_chunk_sizes")
    q["snippet"]["expect"]["one_gpu"] = {"stdout": "x", "raises": "RuntimeError"}
    assert "question 'dp_chunk_sizes' (questions[10]) at snippet.expect.one_gpu" in _errors(data)
    del q["snippet"]["expect"]["one_gpu"]
    assert "'one_gpu' is a required property" in _errors(data)


def test_bad_regex_is_rejected(raw_bank: dict) -> None:
    data, q = _question(raw_bank, "dp_state_dict_keys")
    q["snippet"]["expect"]["no_gpu"] = {"raises": "RuntimeError", "match": "module.("}
    assert "'dp_state_dict_keys'" in _errors(data) and "snippet.expect.no_gpu.match" in \
        _errors(data)


def test_duplicate_ids_are_rejected(raw_bank: dict) -> None:
    data = copy.deepcopy(raw_bank)
    data["questions"][1]["id"] = data["questions"][0]["id"]
    assert "question 'why_data_parallel' (questions[1]) at id: duplicate of questions[0]" in \
        _errors(data)


def test_bank_must_be_a_mapping() -> None:
    assert "top level: expected a mapping" in _errors([1, 2])


def test_yaml_syntax_error_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "questions.yml"
    path.write_text("assignment: dp_basics\nquestions:\n  - id: [unclosed\n", encoding="utf-8")
    with pytest.raises(QuestionBankError) as info:
        load_bank(path)
    assert "line 4" in str(info.value) or "line 3" in str(info.value)
