"""autograder.batch.fingerprints: what makes a batch re-run regrade a submission, and what not.

A fingerprint must change with every byte that can change a grade (the files, their names, the
grader's code, the assignment's tests, probes, questions and configuration) and with nothing
else (times, the order files were written, caches), or re-runs would regrade everything or,
worse, keep stale grades. The batch driver's use of them is tests/batch/test_batch.py's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from autograder import __version__
from autograder.batch import fingerprints
from autograder.batch.fingerprints import assignment_version, grader_version, tree_hash
from autograder.project.assignment import load_assignment
from autograder.project.paths import Project

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_same_content_same_hash_whatever_the_order_or_times(tmp_path):
    files = {"a.py": b"x = 1\n", "sub/b.txt": b"hello", "sub/deeper/c": b"\x00\xff"}
    first = tree(tmp_path / "one", files)
    second = tree(tmp_path / "two", dict(reversed(list(files.items()))))
    old = time.time() - 86400
    for path in second.rglob("*"):
        os.utime(path, (old, old))
    assert tree_hash(first) == tree_hash(second)
    assert re.fullmatch(r"[0-9a-f]{64}", tree_hash(first))


def test_any_byte_or_name_change_changes_the_hash(tmp_path):
    base = {"a.py": b"x = 1\n", "sub/b.txt": b"hello"}
    reference = tree_hash(tree(tmp_path / "ref", base))
    variants = {
        "content": {"a.py": b"x = 2\n", "sub/b.txt": b"hello"},
        "renamed": {"a2.py": b"x = 1\n", "sub/b.txt": b"hello"},
        "moved": {"a.py": b"x = 1\n", "b.txt": b"hello"},
        "added": {**base, "c": b""},
        "removed": {"a.py": b"x = 1\n"},
    }
    seen = {reference}
    for name, files in variants.items():
        digest = tree_hash(tree(tmp_path / name, files))
        assert digest not in seen, name
        seen.add(digest)


def test_one_file_cannot_pose_as_two(tmp_path):
    # A file whose bytes spell the next file's record: lengths are part of the hash.
    two = tree_hash(tree(tmp_path / "two", {"a": b"x", "b": b"y"}))
    one = tree_hash(tree(tmp_path / "one", {"a": b"xFb\0y"}))
    assert one != two


def test_caches_are_ignored_and_suffixes_select_files(tmp_path):
    root = tree(tmp_path / "t", {"a.py": b"x = 1\n", "notes.txt": b"one"})
    plain, only_py = tree_hash(root), tree_hash(root, (".py",))
    tree(root, {"__pycache__/a.cpython-311.pyc": b"compiled", "sub/__pycache__/x.pyc": b"y"})
    assert tree_hash(root) == plain
    (root / "notes.txt").write_bytes(b"two")
    assert tree_hash(root) != plain
    assert tree_hash(root, (".py",)) == only_py  # a .txt is not part of a .py-only hash
    (root / "a.py").write_bytes(b"x = 2\n")
    assert tree_hash(root, (".py",)) != only_py


def test_a_single_file_is_hashed_by_its_bytes(tmp_path):
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_bytes(b"same")
    two.write_bytes(b"same")
    assert tree_hash(one) == tree_hash(two)
    two.write_bytes(b"other")
    assert tree_hash(one) != tree_hash(two)


def test_symlinks_are_hashed_as_their_target_text_never_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret v1")
    root = tree(tmp_path / "sub", {"a.py": b"x"})
    (root / "link").symlink_to(outside)
    before = tree_hash(root)
    outside.write_text("secret v2")  # what the link points at is not read
    assert tree_hash(root) == before
    (root / "link").unlink()
    (root / "link").symlink_to(tmp_path / "elsewhere.txt")  # where it points is hashed
    assert tree_hash(root) != before
    (root / "link").unlink()
    (root / "link").write_text(str(outside))  # a file holding the target text is not a link
    assert tree_hash(root) != before


def copy_course(tmp_path: Path) -> Path:
    shutil.copytree(TOY, tmp_path / "course")
    return tmp_path / "course" / "grading.yml"


def version(config: Path) -> str:
    return assignment_version(load_assignment("toy", Project.of_config(config)))


def test_the_assignment_version_follows_tests_probes_questions_and_config(tmp_path):
    config = copy_course(tmp_path)
    folder = config.parent / "assignments" / "toy"
    seen = {version(config)}
    assert re.fullmatch(r"[0-9a-f]{16}", next(iter(seen)))

    def changed(path: Path, old: str, new: str) -> None:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
        now = version(config)
        assert now not in seen, f"{path.name}: {old!r} -> {new!r}"
        seen.add(now)

    changed(folder / "tests" / "hidden" / "test_toy.py", "should be 5", "must be 5")
    changed(folder / "probes.py", "a.clone()", "a.detach().clone()")
    changed(folder / "questions.yml", "\n", "\n# a comment is a change of the file\n")
    changed(config, "test: 8", "test: 9")
    changed(config, "show_student_output: true", "show_student_output: false")
    (folder / "tests" / "hidden" / "conftest.py").write_text("# new helper\n")
    assert version(config) not in seen


def test_the_assignment_version_ignores_what_cannot_change_a_grade(tmp_path):
    config = copy_course(tmp_path)
    folder = config.parent / "assignments" / "toy"
    before = version(config)
    hidden = folder / "tests" / "hidden"
    (hidden / "__pycache__").mkdir(exist_ok=True)
    (hidden / "__pycache__" / "test_toy.cpython-311.pyc").write_bytes(b"compiled")
    (hidden / "README.txt").write_text("notes for TAs")  # neither .py nor .yml
    (folder / "solution").mkdir()
    (folder / "solution" / "toy.py").write_text("def add(a, b): return a + b\n")
    (config.parent / "submissions" / "good" / "toy.py").write_text("# a student's edit\n")
    old = time.time() - 3600
    for path in folder.rglob("*"):
        os.utime(path, (old, old))
    # Another assignment in the same grading.yml: not this one's configuration.
    text = config.read_text()
    config.write_text(text + "  other:\n    title: x\n    module: other\n    total: 1\n"
                      "    parts:\n      multiple_choice: {points: 0}\n"
                      "      coding: {points: 1, functions: {f: 1}}\n")
    assert version(config) == before


def test_the_grader_version_is_the_package_version_and_a_hash_of_its_code():
    value = grader_version()
    assert value.startswith(f"{__version__}+")
    code = tree_hash(fingerprints._PACKAGE, (".py", ".j2", ".json"))
    assert value == f"{__version__}+{code[:16]}"
    assert fingerprints._PACKAGE == Path(fingerprints.__file__).resolve().parents[1]
    assert (fingerprints._PACKAGE / "batch" / "fingerprints.py").is_file()
    # The same in another interpreter (no hash seed, no process state in it).
    other = subprocess.run(
        [sys.executable, "-c", "from autograder.batch.fingerprints import grader_version; "
                               "print(grader_version())"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONHASHSEED": "123"})
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == value


def test_the_grader_hash_covers_code_templates_and_schemas_only(tmp_path):
    package = tree(tmp_path / "pkg", {"a.py": b"x", "templates/r.md.j2": b"{{ x }}",
                                      "schemas/s.json": b"{}"})
    suffixes = (".py", ".j2", ".json")
    before = tree_hash(package, suffixes)
    tree(package, {"notes.md": b"docs", "__pycache__/a.pyc": b"c", "data.bin": b"\x00"})
    assert tree_hash(package, suffixes) == before
    for name in ("a.py", "templates/r.md.j2", "schemas/s.json"):
        path = package / name
        data = path.read_bytes()
        path.write_bytes(data + b" ")
        assert tree_hash(package, suffixes) != before, name
        path.write_bytes(data)
    assert tree_hash(package, suffixes) == before


def test_a_submission_nested_a_thousand_deep_or_with_a_huge_file_is_hashed_all_the_same(
        tmp_path, folder_chain):
    # The batch fingerprints each submission before anything checks it: a folder 999 deep
    # (rglob recursed into a RecursionError) or a sparse 8 GiB file (read whole) stopped it.
    deep = folder_chain(tmp_path / "deep", 999)
    assert len(tree_hash(deep)) == 64
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    with open(sparse / "big.bin", "wb") as handle:
        handle.truncate(8 << 30)
    first = tree_hash(sparse)
    with open(sparse / "big.bin", "r+b") as handle:  # a change within the hashed part shows
        handle.write(b"x")
    assert tree_hash(sparse) != first
