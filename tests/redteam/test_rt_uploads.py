"""Red team: hostile uploads and answers files, handled by the trusted parent itself.

Zip uploads are extracted by `autograder.inputs.archives` (no escaping paths, no links, bombs
stopped while extracting); answers files are parsed by a safe YAML loader (no tags that construct
objects) with a size cap.
"""

from __future__ import annotations

import zipfile

import pytest
from red_team import (
    ANSWERS,
    CODING_TESTS,
    GOOD,
    HONEST,
    MC_TESTS,
    assert_sound,
    legit_max,
)

pytestmark = pytest.mark.slow  # each grading takes 5-15 s (~2 minutes in all)


def _zip(folder, entries):
    archive = folder / "upload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return archive


def _traversal(folder):
    # Good files first (they are extracted), then a ../ path aimed at the host's markers folder.
    markers = str(folder / "markers").lstrip("/")
    return _zip(folder, [("toy.py", GOOD), ("answers.yml", ANSWERS),
                         ("../" * 16 + markers + "/dotdot.py", "pwned = True\n"),
                         ("/" + markers + "/absolute.py", "pwned = True\n")])


def _bomb(folder):
    # 60 MiB of zeros in ~60 KiB, after the real files: refused while extracting.
    archive = _zip(folder, [("toy.py", GOOD), ("answers.yml", ANSWERS)])
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as zf, \
            zf.open("padding.bin", "w", force_zip64=True) as out:
        for _ in range(60):
            out.write(bytes(1 << 20))
    assert archive.stat().st_size < 1 << 20
    return archive


def _alias_bomb(levels: int) -> str:
    """A 'billion laughs' answers file: each level repeats the previous one nine times."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nsum_shape: [*l{levels - 1}, *l{levels - 1}]\n" \
                              f"float_types: [*l{levels - 1}]\n"


YAML_TAGS = """
sum_shape: !!python/object/apply:os.mkdir ["@@MARKERS@@/yaml-apply"]
float_types: !!python/name:os.system
"""

SUBMISSIONS = {
    "zip_with_escaping_paths": dict(build=_traversal),
    "zip_bomb": dict(build=_bomb),
    "answers_with_python_tags": dict(files={"toy.py": GOOD, "answers.yml": YAML_TAGS}),
    # 6 levels: a 335-byte file that expands to 9**6 strings.
    "answers_alias_bomb": dict(files={"toy.py": GOOD, "answers.yml": _alias_bomb(6)}),
}


@pytest.mark.submission("zip_with_escaping_paths")
def test_a_zip_with_escaping_paths_is_refused(graded, grader, secrets):
    assert_sound(graded, 0.0, secrets)
    assert graded.score == 0
    assert any("points outside the submission" in w for w in graded.report["warnings"])
    for test in CODING_TESTS[:-1]:
        assert "points outside the submission" in graded.message(test)
    assert list((grader.base / "zip_with_escaping_paths" / "markers").iterdir()) == []


@pytest.mark.submission("zip_bomb")
def test_a_zip_bomb_is_stopped_while_extracting(graded, secrets):
    assert_sound(graded, 0.0, secrets)
    assert graded.score == 0
    assert any("zip bomb" in w for w in graded.report["warnings"])


@pytest.mark.submission("answers_with_python_tags")
def test_yaml_tags_that_construct_objects_are_refused(graded, grader, secrets):
    assert_sound(graded, legit_max(HONEST, mc=0), secrets)
    for test in MC_TESTS:
        assert graded.status(test) == "failed"
        assert "is not allowed" in graded.message(test)
    assert graded.passed() >= set(HONEST)  # the code is graded all the same
    assert list((grader.base / "answers_with_python_tags" / "markers").iterdir()) == []


@pytest.mark.submission("answers_alias_bomb")
def test_a_yaml_alias_bomb_scores_nothing(graded, secrets):
    assert_sound(graded, legit_max(HONEST, mc=0), secrets)
    for test in MC_TESTS:
        assert graded.status(test) == "failed"


@pytest.mark.submission("answers_alias_bomb")
def test_a_yaml_alias_bomb_cannot_blow_up_the_trusted_parent(graded):
    for test in MC_TESTS:
        assert len(graded.message(test)) <= 10_000, len(graded.message(test))
