"""Red team, issue 18: malformed inputs, unbounded warnings and terminal injection, graded end to
end. Each submission here made `autograder grade` crash with a traceback and no results.json,
write 211 MB reports, or put escapes on the TA's terminal; each must now end with a valid
results.json, a specific message, files under their cap and no raw control character anywhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from red_team import (
    ANSWERS,
    GOOD,
    HONEST,
    MC_POINTS,
    ROOT,
    TOY,
    Spec,
    assert_sound,
    legit_max,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared builders
from hostile_inputs import (  # noqa: E402
    INJECTION,
    RAW_CONTROLS,
    encrypted,
    huge_int_notebook,
    magic_flood_notebook,
    nested_lambdas_notebook,
    notebook_json,
    solution_cell,
    zip_bytes,
)

from autograder.grading.report import MAX_FILE_BYTES  # noqa: E402

pytestmark = pytest.mark.slow

# In a file or folder name "/" is a separator: the forged line uses a look-alike slash.
NAME = "x" + INJECTION.replace("/", "\u2215")


def _zip_of(entries, lock: bool = False):
    def build(folder: Path) -> Path:
        archive = folder / "upload.zip"
        data = zip_bytes(entries)
        archive.write_bytes(encrypted(data) if lock else data)
        return archive
    return build


def _labelled_notebook() -> str:
    return notebook_json([solution_cell("%matplotlib inline\n" + GOOD, grade_id=INJECTION)])


SUBMISSIONS = {
    "answers_huge_integer": dict(files={"toy.py": GOOD, "answers.yml":
                                        "sum_shape: " + "1" * 5000 + "\nfloat_types: [A, C]\n"}),
    "zip_encrypted": dict(build=_zip_of([("toy.py", GOOD), ("answers.yml", ANSWERS)], lock=True)),
    "zip_file_and_folder": dict(build=_zip_of([("toy.py", GOOD), ("answers.yml", ANSWERS),
                                               ("notes/a.txt", "x"), ("notes", "y")])),
    "zip_long_name": dict(build=_zip_of([("toy.py", GOOD), ("answers.yml", ANSWERS),
                                         ("a" * 300 + ".py", "x")])),
    "notebook_huge_integer": dict(files={"toy.ipynb": huge_int_notebook(GOOD),
                                         "answers.yml": ANSWERS}),
    "notebook_nested_lambdas": dict(files={"toy.ipynb": nested_lambdas_notebook(),
                                           "answers.yml": ANSWERS}),
    "notebook_magic_flood": dict(files={"toy.ipynb": magic_flood_notebook(),
                                        "answers.yml": ANSWERS}, slow=True),
    "names_with_escapes": dict(files={f"{NAME}/{NAME}.py": GOOD,
                                      f"{NAME}/answers.yml": ANSWERS}),
    "notebook_label_with_escapes": dict(files={"toy.ipynb": _labelled_notebook(),
                                               "answers.yml": ANSWERS}),
}


def _notes(graded) -> str:
    return "\n".join(graded.report["warnings"])


def _no_raw_controls(graded) -> None:
    for name, text in graded.texts.items():
        assert not any(c in text for c in RAW_CONTROLS), name
    for text in [*graded.report["warnings"], graded.results["output"],
                 *(t["output"] for t in graded.results["tests"])]:
        assert not any(c in text for c in RAW_CONTROLS), text[:300]


@pytest.mark.submission("answers_huge_integer")
def test_an_answers_file_with_a_huge_number_is_graded(graded, secrets):
    assert_sound(graded, legit_max(HONEST), secrets)
    assert graded.status("Q1 sum_shape") == "failed"
    assert "too long" in graded.message("Q1 sum_shape")
    assert graded.part("coding") > 0  # the code is graded as usual


@pytest.mark.parametrize("name,expected", [
    ("zip_encrypted", "is encrypted"),
    ("zip_file_and_folder", "a file and a folder of the same name"),
    ("zip_long_name", "over 255 bytes"),
])
def test_a_broken_zip_gets_a_report_saying_why(grader, secrets, name, expected):
    graded = grader.start(Spec(name=name, **SUBMISSIONS[name])).result()
    assert_sound(graded, 0.0, secrets)
    assert expected in _notes(graded), _notes(graded)


@pytest.mark.submission("notebook_huge_integer")
def test_a_notebook_with_a_huge_number_is_graded(graded, secrets):
    assert_sound(graded, MC_POINTS, secrets)
    assert "number too long" in _notes(graded)


@pytest.mark.submission("notebook_nested_lambdas")
def test_a_notebook_of_nested_lambdas_is_graded(graded, secrets):
    # The parent no longer compiles it: the sandbox's import fails, and says so per test.
    assert_sound(graded, MC_POINTS, secrets)
    assert graded.part("multiple_choice") == MC_POINTS


@pytest.mark.submission("notebook_magic_flood")
def test_a_flood_of_warnings_keeps_reports_small_and_grading_quick(graded, secrets):
    assert_sound(graded, legit_max(HONEST), secrets)
    for name in ("results.json", "report.json", "report.md", "report.html"):
        size = (graded.out / name).stat().st_size
        assert size <= MAX_FILE_BYTES, (name, size)  # 211 MB each before
    assert len(graded.report["warnings"]) <= 41
    assert any(w.startswith("... and ") for w in graded.report["warnings"])
    assert graded.wall < 60, graded.wall


@pytest.mark.submission("names_with_escapes")
def test_escapes_in_file_and_folder_names_are_inert(graded, secrets):
    assert_sound(graded, MC_POINTS, secrets)
    _no_raw_controls(graded)
    notes = _notes(graded)
    assert "inside the folder" in notes and "\\x1b[2J" in notes and "\\r" in notes


@pytest.mark.submission("notebook_label_with_escapes")
def test_escapes_in_a_notebook_label_are_inert(graded, secrets):
    assert_sound(graded, legit_max(HONEST), secrets)
    _no_raw_controls(graded)
    assert "\\x1b]0;owned\\x07" in _notes(graded)


@pytest.mark.parametrize("files", [
    {f"{NAME}/{NAME}.py": GOOD, f"{NAME}/answers.yml": ANSWERS},
    {"toy.ipynb": _labelled_notebook(), "answers.yml": ANSWERS},
], ids=["names", "notebook_label"])
def test_the_cli_prints_no_raw_escapes(tmp_path, files):
    submission = tmp_path / "submission"
    for rel, text in files.items():
        (submission / rel).parent.mkdir(parents=True, exist_ok=True)
        (submission / rel).write_text(text)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "autograder.cli", "grade", str(submission), "--assignment", "toy",
         "--out", str(out), "--config", str(TOY / "grading.yml")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "note: " in proc.stdout and "\\x1b" in proc.stdout  # shown, escaped
    for text in (proc.stdout, proc.stderr):
        assert not any(c in text for c in RAW_CONTROLS), text[-2000:]
    for path in out.iterdir():
        assert not any(c in path.read_text(encoding="utf-8") for c in RAW_CONTROLS), path.name
