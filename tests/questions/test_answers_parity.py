"""check.py and the grader give the same verdict on every answers file.

A student who sees "all in order" from check.py must not get an "invalid" from the grader, and
the other way round. Over a corpus of tricky files (aliases, tags, duplicate keys, a BOM, tabs,
lower-case letters, lists written as text, huge files, unknown ids...), the verdict is compared:
whether the file as a whole is refused, and which questions are malformed. Right or wrong is the
grader's alone (check.py has no key), so it is not compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.project.assignment import load_assignment
from autograder.project.paths import Project
from autograder.project.question_bank import render_answers_schema
from autograder.questions.answers import INVALID, grade_answers
from autograder.student_files.check import check_answers

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "fixtures" / "toy" / "grading.yml"
# sum_shape: one of A-C; float_types: all that apply
BANK = load_assignment("toy", Project.of_config(CONFIG)).bank

CORPUS: dict[str, tuple[str, bytes]] = {
    "plain": ("answers.yml", b"sum_shape: A\nfloat_types: [A, C]\n"),
    "lower_case": ("answers.yml", b"sum_shape: b\nfloat_types: [a, c]\n"),
    "alias": ("answers.yml", b"sum_shape: &x A\nfloat_types: [*x]\n"),
    "alias_key": ("answers.yml", b"sum_shape: &x A\nfloat_types: *x\n"),
    "python_tag": ("answers.yml", b"sum_shape: !!python/object/apply:os.system [ls]\n"),
    "date_tag": ("answers.yml", b"sum_shape: 2024-01-01\nfloat_types: [A]\n"),
    "binary_tag": ("answers.yml", b"sum_shape: !!binary aGVsbG8=\n"),
    "duplicate_key": ("answers.yml", b"sum_shape: A\nsum_shape: B\nfloat_types: [A]\n"),
    "bom": ("answers.yml", b"\xef\xbb\xbfsum_shape: A\nfloat_types: [C]\n"),
    "tabs": ("answers.yml", b"sum_shape:\tA\n\tfloat_types: [A]\n"),
    "list_as_text": ("answers.yml", b"sum_shape: A\nfloat_types: 'A, C'\n"),
    "one_letter_for_all": ("answers.yml", b"sum_shape: A\nfloat_types: C\n"),
    "list_for_one": ("answers.yml", b"sum_shape: [A, B]\nfloat_types: [A]\n"),
    "one_item_list_for_one": ("answers.yml", b"sum_shape: [B]\nfloat_types: [A]\n"),
    "letter_out_of_range": ("answers.yml", b"sum_shape: E\nfloat_types: [A, Z]\n"),
    "repeated_letter": ("answers.yml", b"sum_shape: A\nfloat_types: [A, A]\n"),
    "number": ("answers.yml", b"sum_shape: 1\nfloat_types: [1, 2]\n"),
    "boolean": ("answers.yml", b"sum_shape: yes\nfloat_types: [true]\n"),
    "huge_number": ("answers.yml", b"sum_shape: " + b"9" * 5000 + b"\n"),
    "unknown_id": ("answers.yml", b"sum_shap: A\nfloat_types: [A]\n"),
    "not_a_mapping": ("answers.yml", b"- A\n- B\n"),
    "empty": ("answers.yml", b""),
    "nulls": ("answers.yml", b"sum_shape: null\nfloat_types: []\n"),
    "not_utf8": ("answers.yml", b"sum_shape: \xff\n"),
    "bad_yaml": ("answers.yml", b"sum_shape: [A\nfloat_types: B\n"),
    "nested": ("answers.yml", b"sum_shape: {a: [B]}\nfloat_types: [[A]]\n"),
    "json": ("answers.json", json.dumps({"sum_shape": "C", "float_types": ["A"]}).encode()),
    "json_duplicate": ("answers.json", b'{"sum_shape": "A", "sum_shape": "B"}'),
    "json_bad": ("answers.json", b'{"sum_shape": "A",'),
    "deep_json": ("answers.json", b'{"sum_shape": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "many_ids": ("answers.yml", b"".join(b"q%d: A\n" % i for i in range(20000))),
}


def grader_verdict(path: Path) -> tuple[bool, set[str]]:
    """(the file refused as a whole, the questions found malformed)."""
    grade = grade_answers(BANK, path)
    invalid = {r.id for r in grade.results if r.status == INVALID}
    whole = invalid == set(BANK.by_id) and len({r.message for r in grade.results}) == 1
    return whole, set() if whole else invalid


def check_verdict(folder: Path, schema: Path) -> tuple[bool, set[str]]:
    section = check_answers(folder, schema)
    titles = {q.title: q.id for q in BANK.questions}
    per_question = {titles[p.split(":", 1)[0]] for p in section.problems
                    if p.split(":", 1)[0] in titles}
    other = [p for p in section.problems
             if p.split(":", 1)[0] not in titles and not p.startswith("unknown question id")]
    return bool(other), per_question


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_check_py_and_the_grader_agree(case: str, tmp_path: Path) -> None:
    name, content = CORPUS[case]
    schema = tmp_path / "answers.schema.json"
    schema.write_text(render_answers_schema(BANK))
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / name).write_bytes(content)
    assert check_verdict(folder, schema) == grader_verdict(folder / name), case


def test_the_corpus_is_tricky_enough() -> None:
    assert len(CORPUS) >= 20
