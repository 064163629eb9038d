"""The multiple-choice grader on real answers files, good and bad."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.multiple_choice import (
    MAX_ANSWERS_BYTES,
    NO_FILE_MESSAGE,
    MultipleChoiceGrade,
    QuestionResult,
    find_answers_file,
    grade_answers,
    load_answers,
)
from autograder.questions import QuestionBank, load_bank


@pytest.fixture(scope="module")
def bank() -> QuestionBank:
    return load_bank()


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
                  "dp_chunk_sizes: ' b '\ndp_devices_used: [b]\ndp_state_dict_fix: [b, a]\n")
    results = _by_id(grade_answers(bank, path))
    for qid in ("dp_chunk_sizes", "dp_devices_used", "dp_state_dict_fix"):
        assert results[qid].status == "correct", results[qid].message


def test_any_accepted_letter_of_a_single_answer_question_scores(
        bank: QuestionBank, tmp_path: Path) -> None:
    assert bank.by_id["dp_wrap_syntax"].answer == ("B", "C")
    for letter in "BC":
        path = _write(tmp_path, "answers.yml", f"dp_wrap_syntax: {letter}\n")
        assert _by_id(grade_answers(bank, path))["dp_wrap_syntax"].score == 1.5


def test_missing_file_leaves_every_question_unanswered(bank: QuestionBank, tmp_path: Path) -> None:
    for path in (None, tmp_path / "answers.yml"):
        grade = grade_answers(bank, path)
        assert grade.score == 0 and grade.max_score == pytest.approx(30.0)
        assert all(r.status == "unanswered" and r.message == NO_FILE_MESSAGE
                   for r in grade.results)


def test_malformed_yaml_reports_line_and_column(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "dp_chunk_sizes: B\ndp_devices_used: [B\n")
    grade = grade_answers(bank, path)
    assert grade.score == 0
    message = grade.results[0].message
    assert all(r.status == "invalid" and r.message == message for r in grade.results)
    assert "answers.yml is not valid YAML at line 3, column 1" in message


def test_malformed_json_reports_line_and_column(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.json", '{"dp_chunk_sizes": "B",\n "dp_devices_used": }')
    grade = grade_answers(bank, path)
    assert grade.score == 0
    assert "answers.json is not valid JSON at line 2, column 21" in grade.results[0].message


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
                  f"dp_chunk_sizes: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
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
    path = _write(tmp_path, "answers.yml", "dp_chunk_size: B\nq99: A\ndp_devices_used: B\n")
    grade = grade_answers(bank, path)
    assert grade.score == 1.5
    assert len(grade.warnings) == 1
    warning = grade.warnings[0]
    assert "'dp_chunk_size' (did you mean 'dp_chunk_sizes'?)" in warning and "'q99'" in warning


def test_bad_answers_make_only_their_question_invalid(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "\n".join([
        "why_data_parallel: Z",              # letter out of range
        "dp_chunk_sizes: [A, B]",            # several letters, single-answer question
        "dp_devices_used: 2",                # wrong type
        "dp_main_purpose: {pick: B}",        # wrong type
        "dp_state_dict_fix: 'A, B'",         # select-all given as text
        "numpy_float64_fix: [A, C, a]",      # repeated letter
        "syncbn_convert: [A, 3]",            # not a letter inside a list
        "ddp_sampler_padding: A",
        "ddp_sampler_padding: B",            # answered twice
        "ddp_sampler_set_epoch: true",       # YAML boolean
        "dp_two_gpu_output_shape: A",        # valid, right
        "dp_global_batch_size: C",           # valid, wrong
    ]) + "\n")
    grade = grade_answers(bank, path)
    results = _by_id(grade)
    expected = {
        "why_data_parallel": 'Q1 why_data_parallel: "Z" is not one of the options A-D',
        "dp_chunk_sizes": "Q11 dp_chunk_sizes: expects exactly one letter from A-D, "
                          "but got several: A, B",
        "dp_devices_used": "Q12 dp_devices_used: expected one letter from A-D, got int 2",
        "dp_main_purpose": "Q6 dp_main_purpose: expected one letter from A-D, got dict",
        "dp_state_dict_fix": "Q14 dp_state_dict_fix: select-all question: give a list of "
                             'letters from A-D, e.g. [A, C], not the text "A, B"',
        "numpy_float64_fix": "Q15 numpy_float64_fix: lists A more than once",
        "syncbn_convert": "Q20 syncbn_convert: expects exactly one letter from A-D, "
                          "but got several: A, 3",
        "ddp_sampler_padding": "Q18 ddp_sampler_padding: answered more than once "
                               "(line 8, line 9); keep a single answer",
        "ddp_sampler_set_epoch": "Q17 ddp_sampler_set_epoch: expected one letter from A-D, "
                                 "got bool true",
    }
    for qid, message in expected.items():
        assert results[qid].status == "invalid", qid
        assert results[qid].score == 0
        assert results[qid].message.startswith(message), results[qid].message
    assert results["dp_two_gpu_output_shape"].status == "correct"
    assert results["dp_global_batch_size"].status == "incorrect"
    assert grade.score == 1.5


def test_item_that_is_not_a_letter_in_a_select_all_list(bank: QuestionBank,
                                                        tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "numpy_float64_fix: [A, [C]]\ndp_state_dict_fix: [Q]\n")
    results = _by_id(grade_answers(bank, path))
    assert results["numpy_float64_fix"].message == \
        "Q15 numpy_float64_fix: item 2 of the list (['C']) is not a letter from A-E"
    assert results["dp_state_dict_fix"].message == \
        'Q14 dp_state_dict_fix: "Q" is not one of the options A-D'


def test_wrong_answer_gets_its_feedback_and_the_hint_not_the_key(
        bank: QuestionBank, tmp_path: Path) -> None:
    q = bank.by_id["dp_chunk_sizes"]
    result = _by_id(grade_answers(bank, _write(tmp_path, "answers.yml", "dp_chunk_sizes: a\n")))[
        q.id]
    assert result.status == "incorrect" and result.given == ["A"]
    assert result.message == f"A: {q.feedback['A']}\nHint: {q.hint}"
    assert q.explanation not in result.message
    assert result.key == ["B"] and result.explanation == q.explanation


def test_select_all_must_match_exactly(bank: QuestionBank, tmp_path: Path) -> None:
    q = bank.by_id["dp_state_dict_fix"]  # key A, B
    path = _write(tmp_path, "answers.yml", "dp_state_dict_fix: [A]\nnumpy_float64_fix: [A, C, E]\n")
    results = _by_id(grade_answers(bank, path))
    subset = results["dp_state_dict_fix"]
    assert subset.status == "incorrect" and subset.score == 0
    assert subset.message == ("At least one correct option is missing from your selection.\n"
                              f"Hint: {q.hint}")
    superset = results["numpy_float64_fix"]
    assert superset.status == "incorrect"
    assert superset.message.startswith(
        "You selected E: " + bank.by_id["numpy_float64_fix"].feedback["E"])


def test_unanswered_values(bank: QuestionBank, tmp_path: Path) -> None:
    path = _write(tmp_path, "answers.yml", "dp_chunk_sizes:\ndp_devices_used: ''\n"
                                           "dp_state_dict_fix: []\n")
    results = _by_id(grade_answers(bank, path))
    for qid in ("dp_chunk_sizes", "dp_devices_used", "dp_state_dict_fix"):
        assert results[qid].status == "unanswered" and results[qid].message == "not answered"


def test_empty_file_is_all_unanswered_with_a_warning(bank: QuestionBank, tmp_path: Path) -> None:
    grade = grade_answers(bank, _write(tmp_path, "answers.yml", "# my answers\n"))
    assert grade.score == 0 and {r.status for r in grade.results} == {"unanswered"}
    assert grade.warnings == ["answers.yml holds no answers"]


def test_other_unreadable_files(bank: QuestionBank, tmp_path: Path) -> None:
    txt = _write(tmp_path, "answers.txt", "dp_chunk_sizes: B\n")
    assert "unsupported file type" in grade_answers(bank, txt).results[0].message
    big = _write(tmp_path, "answers.yml", "#" * (MAX_ANSWERS_BYTES + 1))
    assert "is too large" in grade_answers(bank, big).results[0].message
    binary = tmp_path / "answers.json"
    binary.write_bytes(b'{"dp_chunk_sizes": "\xff"}')
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
