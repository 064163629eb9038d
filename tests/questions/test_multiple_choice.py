"""The multiple-choice grader on real answers files, good and bad."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_project import REPO

from autograder.project.question_bank import QuestionBank, bank_path, load_bank
from autograder.questions.answers import (
    MAX_ANSWERS_BYTES,
    NO_FILE_MESSAGE,
    MultipleChoiceGrade,
    QuestionResult,
    find_answers_file,
    grade_answers,
    load_answers,
)


@pytest.fixture(scope="module")
def bank() -> QuestionBank:
    return load_bank(bank_path(REPO, "dp_basics"), REPO.schemas)


def _key(bank: QuestionBank) -> dict[str, object]:
    return {q.id: list(q.answer) if q.multiple else q.answer[0] for q in bank.questions}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _yaml(answers: dict[str, object]) -> str:
    lines = []
    for qid, value in answers.items():
        shown = f"[{', '.join(value)}]" if isinstance(value, list) else value
        lines.append(f"{qid}: {shown}")
    return "\n".join(lines) + "\n"


def _by_id(grade: MultipleChoiceGrade) -> dict[str, QuestionResult]:
    return {r.id: r for r in grade.results}


def test_full_key_scores_30_in_yaml_and_json(bank: QuestionBank, tmp_path: Path) -> None:
    for path in (_write(tmp_path, "answers.yml", _yaml(_key(bank))),
                 _write(tmp_path, "answers.json", json.dumps(_key(bank)))):
        grade = grade_answers(bank, path)
        assert grade.score == pytest.approx(30.0) and grade.max_score == pytest.approx(30.0)
        assert {r.status for r in grade.results} == {"correct"}
        assert grade.warnings == []


def test_letters_are_case_insensitive_and_one_letter_lists_are_accepted(
        bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml",
                  "q11: ' c '\nq12: [b]\nq14: [b, a]\n")
    results = _by_id(grade_answers(bank, path))
    for qid in ("q11", "q12", "q14"):
        assert results[qid].status == "correct", results[qid].message


def test_any_accepted_letter_of_a_single_answer_question_scores(
        bank: QuestionBank, tmp_path: Path) -> None:
    assert bank.by_id["q07"].answer == ("A", "C")
    for letter in "AC":
        path = _write(tmp_path, "answers.yml", f"q07: {letter}\n")
        assert _by_id(grade_answers(bank, path))["q07"].score == 1.5


def test_missing_file_leaves_every_question_unanswered(bank: QuestionBank, tmp_path: Path) -> None:
    for path in (None, tmp_path / "answers.yml"):
        grade = grade_answers(bank, path)
        assert grade.score == 0 and grade.max_score == pytest.approx(30.0)
        assert all(r.status == "unanswered" and r.message == NO_FILE_MESSAGE
                   for r in grade.results)


def test_malformed_yaml_reports_line_and_column(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "q11: B\nq12: [B\n")
    grade = grade_answers(bank, path)
    assert grade.score == 0
    message = grade.results[0].message
    assert all(r.status == "invalid" and r.message == message for r in grade.results)
    assert "answers.yml is not valid YAML at line 3, column 1" in message


def test_malformed_json_reports_line_and_column(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.json", '{"q11": "B",\n "q12": }')
    grade = grade_answers(bank, path)
    assert grade.score == 0
    assert "answers.json is not valid JSON at line 2, column 9" in grade.results[0].message


@pytest.mark.parametrize("text, kind", [("- A\n- B\n", "a list"), ("B\n", "a single text value"),
                                        ("42\n", "int")])
def test_top_level_must_be_a_mapping(bank: QuestionBank, tmp_path: Path, text: str,
                                     kind: str) -> None:
    grade = grade_answers(bank, _write(tmp_path, "answers.yml", text))
    assert grade.score == 0
    assert grade.results[0].status == "invalid"
    assert "the top level must be a mapping from question id to answer" in \
        grade.results[0].message and kind in grade.results[0].message


def test_python_object_tags_are_refused_and_never_run(bank: QuestionBank, tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    path = _write(tmp_path, "answers.yml",
                  f"q11: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
    grade = grade_answers(bank, path)
    assert not marker.exists()
    assert grade.score == 0
    message = grade.results[0].message
    assert "the YAML tag !!python/object/apply:os.mkdir is not allowed" in message
    assert "line 1" in message
    _, errors = load_answers(_write(tmp_path, "other.yml", "q: !!python/object:os.PathLike {}\n"))
    assert errors and "!!python/object:os.PathLike is not allowed" in errors[0]


def test_unknown_ids_are_warned_about_and_the_rest_still_scored(
        bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "Q01: B\nq99: A\nq12: B\n")
    grade = grade_answers(bank, path)
    assert grade.score == 1.5
    assert len(grade.warnings) == 1
    warning = grade.warnings[0]
    assert "'Q01' (did you mean 'q01'?)" in warning and "'q99'" in warning


def test_bad_answers_make_only_their_question_invalid(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "\n".join([
        "q01: Z",              # letter out of range
        "q11: [A, B]",            # several letters, single-answer question
        "q12: 2",                # wrong type
        "q06: {pick: B}",        # wrong type
        "q14: 'A, B'",         # select-all given as text
        "q15: [A, C, a]",      # repeated letter
        "q20: [A, 3]",            # not a letter inside a list
        "q18: A",
        "q18: B",            # answered twice
        "q17: true",       # YAML boolean
        "q08: B",        # valid, right
        "q03: C",           # valid, wrong
    ]) + "\n")
    grade = grade_answers(bank, path)
    results = _by_id(grade)
    expected = {
        "q01": 'Q1 q01: "Z" is not one of the options A-D',
        "q11": "Q11 q11: expects exactly one letter from A-D, "
                          "but got several: A, B",
        "q12": "Q12 q12: expected one letter from A-D, got int 2",
        "q06": "Q6 q06: expected one letter from A-D, got dict",
        "q14": "Q14 q14: select-all question: give a list of "
                             'letters from A-D, e.g. [A, C], not the text "A, B"',
        "q15": "Q15 q15: lists A more than once",
        "q20": "Q20 q20: expects exactly one letter from A-D, "
                          "but got several: A, 3",
        "q18": "Q18 q18: answered more than once "
                               "(line 8, line 9); keep a single answer",
        "q17": "Q17 q17: expected one letter from A-D, "
                                 "got bool true",
    }
    for qid, message in expected.items():
        assert results[qid].status == "invalid", qid
        assert results[qid].score == 0
        assert results[qid].message.startswith(message), results[qid].message
    assert results["q08"].status == "correct"
    assert results["q03"].status == "incorrect"
    assert grade.score == 1.5


def test_item_that_is_not_a_letter_in_a_select_all_list(bank: QuestionBank,
                                                        tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "q15: [A, [C]]\nq14: [Q]\n")
    results = _by_id(grade_answers(bank, path))
    assert results["q15"].message == \
        "Q15 q15: item 2 of the list (['C']) is not a letter from A-E"
    assert results["q14"].message == \
        'Q14 q14: "Q" is not one of the options A-D'


def test_wrong_answer_gets_its_feedback_and_the_hint_not_the_key(
        bank: QuestionBank, tmp_path: Path) -> None:
    q = bank.by_id["q11"]
    result = _by_id(grade_answers(bank, _write(tmp_path, "answers.yml", "q11: a\n")))[
        q.id]
    assert result.status == "incorrect" and result.given == ["A"]
    assert result.message == f"A: {q.feedback['A']}\nHint: {q.hint}"
    assert q.explanation not in result.message
    assert result.key == ["C"] and result.explanation == q.explanation


def test_select_all_must_match_exactly(bank: QuestionBank, tmp_path: Path) -> None:
    q = bank.by_id["q14"]  # key A, B
    path = _write(tmp_path, "answers.yml", "q14: [A]\nq15: [A, C, E]\n")
    results = _by_id(grade_answers(bank, path))
    subset = results["q14"]
    assert subset.status == "incorrect" and subset.score == 0
    assert subset.message == ("At least one correct option is missing from your selection.\n"
                              f"Hint: {q.hint}")
    superset = results["q15"]
    assert superset.status == "incorrect"
    assert superset.message.startswith(
        "You selected E: " + bank.by_id["q15"].feedback["E"])


def test_unanswered_values(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "q11:\nq12: ''\n"
                                           "q14: []\n")
    results = _by_id(grade_answers(bank, path))
    for qid in ("q11", "q12", "q14"):
        assert results[qid].status == "unanswered" and results[qid].message == "not answered"


def test_empty_file_is_all_unanswered_with_a_warning(bank: QuestionBank, tmp_path: Path) -> None:
    grade = grade_answers(bank, _write(tmp_path, "answers.yml", "# my answers\n"))
    assert grade.score == 0 and {r.status for r in grade.results} == {"unanswered"}
    assert grade.warnings == ["answers.yml holds no answers"]


def test_other_unreadable_files(bank: QuestionBank, tmp_path: Path) -> None:
    txt = _write(tmp_path, "answers.txt", "q11: B\n")
    assert "unsupported file type" in grade_answers(bank, txt).results[0].message
    big = _write(tmp_path, "answers.yml", "#" * (MAX_ANSWERS_BYTES + 1))
    assert "is too large" in grade_answers(bank, big).results[0].message
    binary = tmp_path / "answers.json"
    binary.write_bytes(b'{"q11": "\xff"}')
    assert "is not UTF-8 text" in grade_answers(bank, binary).results[0].message
    deep = _write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    assert load_answers(deep)[1], "deep nesting must be an error, not a crash"


def test_load_answers_returns_data_or_errors(tmp_path: Path) -> None:
    data, errors = load_answers(_write(tmp_path, "answers.yml", "a: B\nb: [A, C]\n"))
    assert (data, errors) == ({"a": "B", "b": ["A", "C"]}, [])
    data, errors = load_answers(_write(tmp_path, "answers.json", "[1]"))
    assert data == {} and len(errors) == 1


def test_find_answers_file_prefers_yml_and_warns_about_others(tmp_path: Path) -> None:
    assert find_answers_file(tmp_path) == (None, [])
    _write(tmp_path, "answers.json", "{}")
    assert find_answers_file(tmp_path) == (tmp_path / "answers.json", [])
    _write(tmp_path, "answers.yml", "")
    path, warnings = find_answers_file(tmp_path)
    assert path == tmp_path / "answers.yml"
    assert warnings == ["several answers files found (answers.yml, answers.json); "
                        "graded answers.yml only"]


def test_a_long_tag_is_shown_short(bank: QuestionBank, tmp_path: Path) -> None:
    # Found by the fuzzer: the tag is the student's text, and it was quoted whole (5,000+ chars).
    path = _write(tmp_path, "answers.yml", "!!python/object:os.system" + "1" * 6000)
    grade = grade_answers(bank, path)
    assert all(r.status == "invalid" and len(r.message) < 400 for r in grade.results)
    assert "the YAML tag !!python/object:os.system1" in grade.results[0].message
