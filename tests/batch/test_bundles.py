"""Packing for Ray workers (autograder.batch.bundles): what crosses is content, capped, and what
a worker recreates is the submission as graded here (no Ray needed)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from autograder.batch.bundles import (
    PackError,
    pack_assignment,
    pack_submission,
    read_outputs,
    unpack_assignment,
    unpack_submission,
    write_outputs,
)
from autograder.batch.fingerprints import tree_hash
from autograder.grading.grade import grade
from autograder.inputs import archives
from autograder.project.paths import Project

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
CONFIG = TOY / "grading.yml"
GOOD = TOY / "submissions" / "good"


def _plain(value) -> bool:
    """Only bytes, str, numbers, None, lists and dicts: nothing Ray would need code to rebuild."""
    if isinstance(value, (bytes, str, int, float, type(None))):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def test_a_folder_round_trips_with_its_names_links_and_nesting(tmp_path):
    source = tmp_path / "src" / "student one"
    (source / "my work" / "deep").mkdir(parents=True)
    (source / "my work" / "toy (1).py").write_text((GOOD / "toy.py").read_text())
    (source / "my work" / "answers.yml").write_bytes(b"sum_shape: A\n")
    (source / "my work" / "deep" / "x.bin").write_bytes(bytes(range(256)))
    (source / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name")  # not UTF-8
    (source / "link.py").symlink_to("/etc/passwd")
    (source / "empty").mkdir()
    packed = pack_submission(source)
    assert _plain(packed)
    assert b"root:" not in pickle.dumps(packed)  # a link's target is never read nor sent
    (tmp_path / "dst").mkdir()
    copy = unpack_submission(packed, tmp_path / "dst")
    assert copy.name == "student one"
    assert (copy / "link.py").is_symlink() and not (copy / "link.py").exists()
    assert (copy / "empty").is_dir()
    assert (copy / "my work" / "deep" / "x.bin").read_bytes() == bytes(range(256))
    # The same files, names and nesting: the content hash ignores link targets only.
    strip = {p.relative_to(source) for p in source.rglob("*")}
    assert {p.relative_to(copy) for p in copy.rglob("*")} == strip
    # Graded the same (a link named like the module would say the same thing, too).
    here = grade(source, "toy", tmp_path / "a", Project.of_config(CONFIG))
    there = grade(copy, "toy", tmp_path / "b", Project.of_config(CONFIG))
    assert (here.score, here.warnings, here.submission) == (there.score, there.warnings,
                                                            there.submission)


def test_an_upload_file_is_sent_as_it_is(tmp_path):
    upload = tmp_path / "alice.zip"
    upload.write_bytes(b"PK not really a zip")
    packed = pack_submission(upload)
    assert packed["kind"] == "file" and packed["data"] == upload.read_bytes()
    (tmp_path / "dst").mkdir()
    copy = unpack_submission(packed, tmp_path / "dst")
    assert copy.name == "alice.zip" and tree_hash(copy) == tree_hash(upload)


def test_submissions_over_the_limits_of_uploads_are_refused(tmp_path, monkeypatch):
    many = tmp_path / "many"
    many.mkdir()
    for i in range(12):
        (many / f"f{i}.txt").write_text("x")
    monkeypatch.setattr(archives, "MAX_ENTRIES", 10)
    with pytest.raises(PackError, match="more than 10 files"):
        pack_submission(many)
    monkeypatch.setattr(archives, "MAX_ENTRIES", 1000)
    monkeypatch.setattr(archives, "MAX_FILE_BYTES", 100)
    (many / "big.bin").write_bytes(b"x" * 101)
    with pytest.raises(PackError, match="over the 0.0 MiB limit"):
        pack_submission(many)
    monkeypatch.setattr(archives, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(archives, "MAX_TOTAL_BYTES", 110)
    with pytest.raises(PackError, match="add up to over"):
        pack_submission(many)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "toy.py").write_text("x")
    if os.geteuid() != 0:  # root reads anything
        (locked / "toy.py").chmod(0)
        with pytest.raises(PackError, match="could not be read"):
            pack_submission(locked)


@pytest.mark.parametrize("name", [b"../escape", b"/abs", b"a/../../b", b"", b"a//b", b"a\0b"])
def test_unpacking_refuses_names_that_leave_the_folder(tmp_path, name):
    packed = {"format": 1, "name": b"s", "kind": "folder", "entries": [[name, "file", b"x"]]}
    with pytest.raises(PackError):
        unpack_submission(packed, tmp_path)
    assert not (tmp_path.parent / "escape").exists()


def test_the_assignment_bundle_is_what_grading_needs_and_nothing_of_the_driver(tmp_path):
    bundle = pack_assignment("toy", Project.of_config(CONFIG))
    assert _plain(bundle)
    names = [name for name, _ in bundle["files"]]
    assert "grading.yml" in names and "assignments/toy/questions.yml" in names
    assert "assignments/toy/tests/hidden/test_toy.py" in names
    assert "schemas/grading.schema.json" in names
    assert not [n for n in names if "solution" in n or "__pycache__" in n]
    text = pickle.dumps(bundle)
    assert str(TOY).encode() not in text  # no path of this machine crosses
    config = unpack_assignment(bundle, tmp_path / "worker")
    from autograder.batch.fingerprints import assignment_version
    from autograder.project.assignment import load_assignment

    unpacked = load_assignment("toy", Project.of_config(config))
    assert assignment_version(unpacked) == bundle["assignment_version"]


def test_reports_come_back_checked(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"score": 1}))
    (out / "results.json").write_text("{}")
    files = read_outputs(out)
    assert sorted(files) == ["report.json", "results.json"]
    staging = tmp_path / "staging"
    write_outputs(files, staging)
    assert json.loads((staging / "report.json").read_text()) == {"score": 1}
    for bad in ({"../x": b""}, {"a/b": b""}, {".hidden": b""}, {"r.json": "not bytes"}, []):
        with pytest.raises(PackError):
            write_outputs(bad, tmp_path / "elsewhere")
    assert not (tmp_path / "x").exists()


def test_a_folder_nested_too_deep_is_refused_not_a_recursion_error(tmp_path, folder_chain):
    # A folder 999 deep made os.walk (recursive in Python 3.11) raise RecursionError, which
    # was no PackError: the batch would have stopped.
    with pytest.raises(PackError, match="nested more than 64 deep"):
        pack_submission(folder_chain(tmp_path / "deep", 999))
    pack_submission(folder_chain(tmp_path / "ok", 20))  # deep but within the limit


def test_a_huge_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    folder = tmp_path / "sparse"
    folder.mkdir()
    with open(folder / "big.bin", "wb") as handle:  # 8 GiB, sparse: reading it would not fit
        handle.truncate(8 << 30)
    with pytest.raises(PackError, match="8192.0 MiB, over the"):
        pack_submission(folder)
