"""Property-based fuzzing of the input layer (issue 18): random and mutated answers files, zips,
folders and notebooks, each read by the real code (the limited child included), and the
property that every one ends in a result or a specific problem for the student, never an
exception; folders go on to a written, schema-valid report free of raw control characters.

Bounded for `make test` (660 cases, about a minute of CPU; each property a unit of its own in
parallel runs); scripts/fuzz_inputs.py runs eighty times as many (FUZZ_SCALE=80).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml
from hostile_inputs import ESCAPES, RAW_CONTROLS, encrypted, notebook_json, solution_cell
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_project import REPO
from report_records import AN_ENVIRONMENT

from autograder.grading.grade import _question_result, _submission_files
from autograder.grading.report import MAX_FILE_BYTES, write_outputs
from autograder.grading.results import build_report
from autograder.inputs.notebook import NotebookError, extract_module
from autograder.project.assignment import load_assignment
from autograder.project.paths import Project
from autograder.project.schemas import validate
from autograder.questions.answers import grade_answers

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
TOY_CONFIG = ROOT / "tests" / "fixtures" / "toy" / "grading.yml"
GOOD = (ROOT / "tests" / "fixtures" / "toy" / "submissions" / "good" / "toy.py").read_text()
TOY = load_assignment("toy", Project.of_config(TOY_CONFIG))
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def fuzz(examples: int):
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


# ----------------------------------------------------------------------------- strategies

# Pieces that broke, or could break, a parser: huge numbers, tags, aliases, deep nesting,
# escapes, NULs, odd encodings.
HOSTILE = st.sampled_from([
    "1" * 5000, "-" + "9" * 4400, "0x" + "f" * 6000, "1e999999", "!!python/object:os.system",
    "!!binary aGk=", "!!set {a, b}", "2024-01-01", "&a [1]", "*a", "[" * 3000, "{" * 3000,
    "\x00", "\ufeff", "\ud800", *ESCAPES, "\n  - ", ": ", "? ", "%YAML 1.1\n---\n", "'" * 5,
])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.text(max_size=20), st.sampled_from(["A", "B", "c", " d ", "", "AB"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
KEYS = st.one_of(st.sampled_from([q.id for q in TOY.bank.questions]), st.text(max_size=12))


@st.composite
def mutated(draw, base: bytes) -> bytes:
    """`base` with a few random edits: hostile pieces inserted, bytes flipped, cut short."""
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "flip", "cut", "delete"]))
        if kind == "insert":
            data[at:at] = draw(HOSTILE).encode("utf-8", "surrogatepass")
        elif kind == "flip" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:]
        else:
            del data[at:at + draw(st.integers(1, 64))]
    return bytes(data)


@st.composite
def answers_files(draw) -> tuple[str, bytes]:
    name = draw(st.sampled_from(["answers.yml", "answers.yaml", "answers.json"]))
    answers = draw(st.dictionaries(KEYS, VALUES, max_size=6))
    if name.endswith(".json"):
        text = json.dumps(answers)
    else:
        text = yaml.safe_dump(answers, allow_unicode=True)
    base = draw(st.one_of(st.just(text.encode()), st.binary(max_size=300),
                          st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
    return name, draw(mutated(base))


NAME_PART = st.one_of(
    st.sampled_from(["toy.py", "toy.ipynb", "answers.yml", "answers.json", "toy (1).py",
                     "notes", "sub", "..", ".", "__MACOSX", ".hidden", "a" * 300, "x" * 255,
                     *ESCAPES]),
    # No lone surrogates: a name is written to disk or a zip as UTF-8 (bytes names cover the
    # undecodable ones).
    st.text(st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]), min_size=1,
            max_size=12))


@st.composite
def zips(draw) -> bytes:
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        parts = draw(st.lists(NAME_PART, min_size=1, max_size=3))
        name = "/".join(parts) + draw(st.sampled_from(["", "", "/"]))
        if draw(st.booleans()):
            name = draw(st.sampled_from(["/", "../", "C:/", "\\", ""])) + name
        data = draw(st.one_of(st.just(GOOD.encode()), st.binary(max_size=200)))
        entries.append((name, data))
    buffer = tempfile.SpooledTemporaryFile()
    method = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                   zipfile.ZIP_LZMA]))
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name)
            if draw(st.integers(0, 9)) == 0:  # a symbolic link, sometimes
                info.external_attr = 0o120777 << 16
            zf.writestr(info, data)
    buffer.seek(0)
    data = buffer.read()
    if draw(st.integers(0, 5)) == 0:
        data = encrypted(data)
    return draw(mutated(data)) if draw(st.booleans()) else data


@st.composite
def folders(draw) -> list[tuple[bytes, bytes | None]]:
    """Relative paths (bytes: names need not be UTF-8) and contents (None: a folder)."""
    names = st.one_of(
        NAME_PART.map(lambda n: os.fsencode(n[:200]) if n not in (".", "..") else b"dot"),
        st.binary(min_size=1, max_size=20).map(
            lambda b: b.replace(b"/", b"_").replace(b"\0", b"_") if b not in (b".", b"..")
            else b"dots"))
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        path = b"/".join(draw(st.lists(names, min_size=1, max_size=3)))
        content = draw(st.one_of(st.none(), st.just(GOOD.encode()), st.binary(max_size=100)))
        entries.append((path, content))
    return entries


@st.composite
def notebooks(draw) -> bytes:
    cells = []
    for _ in range(draw(st.integers(0, 4))):
        source = draw(st.one_of(
            st.just(GOOD), st.text(max_size=200),
            st.lists(st.sampled_from(["%time x", "!ls", "%%bash", "%%time", "def f():",
                                      "    %magic", "x = 1", "lambda: " * 50 + "0", *ESCAPES]),
                     max_size=8).map("\n".join)))
        cell = solution_cell(source, grade_id=draw(st.one_of(st.text(max_size=30), NAME_PART)))
        meta = cell["metadata"]["nbgrader"]
        if draw(st.booleans()):
            meta["solution"] = draw(VALUES)
        if draw(st.booleans()):
            meta["locked"], meta["grade"] = draw(st.booleans()), draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            cell["source"] = draw(VALUES)
        if draw(st.integers(0, 4)) == 0:
            cell = draw(VALUES)
        cells.append(cell)
    text = notebook_json(cells)
    if draw(st.integers(0, 6)) == 0:
        text = json.dumps(draw(VALUES))
    return draw(mutated(text.encode("utf-8", "surrogatepass")))


# ----------------------------------------------------------------------------- properties


def _check_mc(graded) -> None:
    assert [r.id for r in graded.results] == [q.id for q in TOY.bank.questions]
    for r in graded.results:
        assert r.status in ("correct", "incorrect", "unanswered", "invalid")
        assert isinstance(r.message, str) and r.message
        assert len(r.message) < 5000


@fuzz(250)
@given(answers_files())
def test_any_answers_file_is_graded(case):
    name, data = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        _check_mc(grade_answers(TOY.bank, path))


@fuzz(150)
@pytest.mark.filterwarnings("ignore:Duplicate name")  # duplicates are part of the fuzzing
@given(zips())
def test_any_zip_gives_files_or_a_problem(data):
    with tempfile.TemporaryDirectory() as folder:
        archive = Path(folder) / "upload.zip"
        archive.write_bytes(data)
        files = _submission_files(archive, Path(folder) / "upload", "toy")
        assert files.module is not None or files.notebook is not None or files.module_problem
        if files.module_problem:
            assert isinstance(files.module_problem, str)
        if files.answers is not None:
            _check_mc(grade_answers(TOY.bank, files.answers))


@fuzz(200)
@given(notebooks())
def test_any_notebook_gives_a_module_or_a_problem(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "toy.ipynb"
        path.write_bytes(data)
        try:
            extracted = extract_module(path, "toy")
        except NotebookError as exc:
            assert str(exc).strip()
            return
        assert isinstance(extracted.source, str) and len(extracted.warnings) <= 11


@fuzz(60)
@given(folders())
def test_any_folder_ends_in_a_report(entries):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "submission"
        root.mkdir()
        for rel, content in entries:
            path = os.path.join(os.fsencode(root), rel)
            try:
                if content is None:
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as out:
                        out.write(content)
            except OSError:
                pass  # a file where a folder goes, say: the tree is what it is
        files = _submission_files(root, Path(folder) / "upload", "toy")
        mc = grade_answers(TOY.bank, files.answers)
        _check_mc(mc)
        warnings = files.warnings + mc.warnings + ([files.module_problem]
                                                   if files.module_problem else [])
        tests = [_question_result(r, TOY) for r in mc.results]
        report = build_report(TOY.config, root.name, tests, warnings, AN_ENVIRONMENT, 0.1)
        out = Path(folder) / "out"
        write_outputs(report, out, REPO.schemas)
        for name in ("results.json", "report.json", "report.md", "report.html"):
            text = (out / name).read_text(encoding="utf-8")
            assert len(text.encode()) <= MAX_FILE_BYTES
            assert not any(c in text for c in RAW_CONTROLS), (name, text[:500])
        results = json.loads((out / "results.json").read_text())
        validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
        assert not any(c in json.dumps(results, ensure_ascii=False) for c in RAW_CONTROLS)


@pytest.mark.parametrize("seed_name", ["answers.yml", "answers.json"])
def test_the_fuzzer_reaches_real_answers(seed_name, tmp_path):
    # A sanity check of the harness: a correct file written the way the fuzzer writes one
    # scores full marks, so the properties above are about the real grader.
    key = {q.id: list(q.answer) if q.multiple else q.answer[0] for q in TOY.bank.questions}
    text = json.dumps(key) if seed_name.endswith(".json") else yaml.safe_dump(key)
    path = tmp_path / seed_name
    path.write_text(text)
    assert grade_answers(TOY.bank, path).score == TOY.bank.total_points
