"""Finding a class's submissions: Gradescope exports (folder or zip) and plain student folders."""

from __future__ import annotations

import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autograder.batch.records import Submitter
from autograder.batch.roster import METADATA, RosterError, discover, load_metadata

# The shape of a real export's metadata (Ruby symbols as keys, quoted SIDs, a group, a
# history entry, autograder results, a Ruby tag on one of them).
METADATA_TEXT = """\
---
submission_10:
  :submitters:
  - :name: Ada Lovelace
    :sid: '06758767'
    :email: ada@example.edu
  - :name: Alan Turing
    :sid: '06754968'
    :email: alan@example.edu
  :created_at: 2026-12-15 04:52:07.938335000 Z
  :score: 0.0
  :status: processed
  :results: !ruby/hash:ActiveSupport::HashWithIndifferentAccess
    score: 0.0
    tests: []
    output: This assignment does not have an autograder configured.
    extra_data:
  :history:
  - :submitters: []
    :created_at: 2026-12-14 07:30:05.262325000 Z
    :score: 0.0
    :id: 217383000
submission_9:
  :submitters:
  - :name: "Grace O'Hopper"
    :sid: 1234567
    :email: grace@example.edu
  :created_at: 2026-12-14 20:00:00.000000000 -05:00
  :score: !ruby/object:BigDecimal 18:0.7E2
  :history: []
"""


def write_export(root: Path, metadata: str = METADATA_TEXT,
                 folders: tuple[str, ...] = ("submission_10", "submission_9")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / METADATA).write_text(metadata)
    for name in folders:
        (root / name).mkdir()
        (root / name / "dp_basics.py").write_text("def f():\n    return 1\n")
    return root


def zip_folder(folder: Path, target: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, prefix + path.relative_to(folder).as_posix())
    return target


# --------------------------------------------------------------------------- Gradescope exports


def test_an_export_folder_gives_submitters_groups_and_times(tmp_path):
    roster = discover(write_export(tmp_path / "export"))
    assert roster.source == "gradescope" and roster.warnings == []
    assert [s.key for s in roster.submissions] == ["submission_9", "submission_10"]  # natural
    nine, ten = roster.submissions
    assert ten.submitters == [Submitter("Ada Lovelace", "06758767", "ada@example.edu"),
                              Submitter("Alan Turing", "06754968", "alan@example.edu")]
    assert ten.sid == "06758767" and ten.path == tmp_path / "export" / "submission_10"
    assert ten.created_at == datetime(2026, 12, 15, 4, 52, 7, 938335, tzinfo=timezone.utc)
    assert nine.submitters == [Submitter("Grace O'Hopper", "1234567", "grace@example.edu")]
    assert nine.created_at == datetime(2026, 12, 15, 1, 0, tzinfo=timezone.utc)
    assert nine.created_at.utcoffset() == timedelta(hours=-5)


def test_a_zipped_export_with_a_top_folder_is_extracted_into_the_workdir(tmp_path):
    folder = write_export(tmp_path / "src")
    archive = zip_folder(folder, tmp_path / "export.zip", prefix="assignment_123_export/")
    with zipfile.ZipFile(archive, "a") as zf:  # what a Mac adds when it zips a folder
        zf.writestr("__MACOSX/assignment_123_export/._submission_metadata.yml", b"\0")
    work = tmp_path / "work"
    roster = discover(archive, work)
    assert [s.key for s in roster.submissions] == ["submission_9", "submission_10"]
    assert roster.warnings == []
    for sub in roster.submissions:
        assert sub.path.is_relative_to(work) and (sub.path / "dp_basics.py").is_file()
    assert roster.root == work / "export" / "assignment_123_export"
    # Run again (a batch graded again): our own extraction is replaced, the same paths result.
    again = discover(archive, work)
    assert [s.path for s in again.submissions] == [s.path for s in roster.submissions]


def test_a_zip_is_never_extracted_over_someone_else_s_files(tmp_path):
    archive = zip_folder(write_export(tmp_path / "src"), tmp_path / "export.zip")
    (tmp_path / "work" / "export").mkdir(parents=True)
    (tmp_path / "work" / "export" / "mine.txt").write_text("keep")
    with pytest.raises(RosterError, match="export is not empty"):
        discover(archive, tmp_path / "work")
    assert (tmp_path / "work" / "export" / "mine.txt").read_text() == "keep"


def test_a_zip_needs_a_folder_to_extract_into(tmp_path):
    archive = zip_folder(write_export(tmp_path / "src"), tmp_path / "export.zip")
    with pytest.raises(RosterError, match="needs a folder to extract it into"):
        discover(archive)
    assert [s.key for s in discover(archive, tmp_path / "w")] == ["submission_9", "submission_10"]


def test_an_unsafe_zip_is_refused(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(METADATA, "submission_1:\n  :submitters: []\n")
        zf.writestr("../outside.txt", "x")
    with pytest.raises(RosterError, match="export.zip: the zip entry '../outside.txt' points "
                                          "outside"):
        discover(archive, tmp_path / "work")
    assert not (tmp_path / "outside.txt").exists()


def test_missing_and_extra_folders_are_warnings_not_errors(tmp_path):
    root = write_export(tmp_path / "export", folders=("submission_9", "submission_77"))
    (root / "notes.txt").write_text("hi")
    (root / ".DS_Store").write_text("")
    roster = discover(root)
    assert [s.key for s in roster.submissions] == ["submission_9"]
    assert roster.warnings == [
        "submission_10 (Ada Lovelace, Alan Turing) is listed in submission_metadata.yml but its "
        "folder is missing from the export: not graded",
        "notes.txt at the top of the export is not a submission folder: ignored",
        "submission_77 is in the export but not in submission_metadata.yml: not graded (no "
        "submitter is known for it)",
    ]


def test_a_folder_holding_only_a_zip_upload_is_graded_as_that_zip(tmp_path):
    root = write_export(tmp_path / "export", folders=("submission_9",))
    (root / "submission_10").mkdir()
    zip_folder(root / "submission_9", root / "submission_10" / "my work.zip")
    roster = discover(root)
    assert [s.path for s in roster.submissions] == [root / "submission_9",
                                                    root / "submission_10" / "my work.zip"]


def test_a_group_submission_is_one_submission_with_several_submitters(tmp_path):
    roster = discover(write_export(tmp_path / "export"))
    groups = [s for s in roster.submissions if len(s.submitters) > 1]
    assert [s.key for s in groups] == ["submission_10"]


def test_ruby_and_python_tags_give_plain_data_and_never_run_anything(tmp_path):
    marker = tmp_path / "pwned"
    metadata = METADATA_TEXT + f"""\
submission_11:
  :submitters:
  - !ruby/object:User
    :name: Mallory
    :sid: '666'
  :created_at: 2026-12-01 00:00:00.000000000 Z
  :results: !!python/object/apply:os.system ["touch {marker}"]
  :other: !!python/name:os.system
"""
    root = write_export(tmp_path / "export", metadata,
                        folders=("submission_9", "submission_10", "submission_11"))
    data = load_metadata(root / METADATA)
    assert data["submission_11"][":results"] == [f"touch {marker}"]
    assert data["submission_10"][":results"]["tests"] == []
    assert data["submission_9"][":score"] == "18:0.7E2"
    roster = discover(root)
    assert roster.submissions[-1].submitters == [Submitter("Mallory", "666", "")]
    assert not marker.exists()


def test_submitters_without_usable_sids_get_a_stand_in_with_a_warning(tmp_path):
    metadata = """\
submission_1:
  :submitters:
  - :name: No Sid
    :email: nosid@example.edu
  - :name: Bad Sid
    :sid: ../../etc
"""
    roster = discover(write_export(tmp_path / "export", metadata, folders=("submission_1",)))
    (sub,) = roster.submissions
    assert [p.sid for p in sub.submitters] == ["submission_1", "submission_1-2"]
    assert sub.created_at is None
    assert roster.warnings == [
        "submission_1: submitter No Sid has no SID in submission_metadata.yml; 'submission_1' "
        "is used in its place",
        "submission_1: submitter Bad Sid has the SID '../../etc', unusable as a folder name, in "
        "submission_metadata.yml; 'submission_1-2' is used in its place",
    ]


def test_a_student_in_two_submissions_is_a_warning(tmp_path):
    metadata = """\
submission_1:
  :submitters:
  - {":name": Ada, ":sid": "42"}
submission_2:
  :submitters:
  - {":name": Ada, ":sid": "42"}
  - {":name": Bob, ":sid": "43"}
"""
    roster = discover(write_export(tmp_path / "e", metadata,
                                   folders=("submission_1", "submission_2")))
    assert len(roster) == 2
    assert roster.warnings == ["SID 42 is a submitter of both submission_1 and submission_2: "
                               "check which submission counts"]


@pytest.mark.parametrize("metadata, message", [
    ("submission_1: [\n", r"submission_metadata.yml is not valid YAML at line 2, column 1"),
    ("", "submission_metadata.yml is empty: it lists no submissions"),
    ("- submission_1\n- submission_2\n",
     "submission_metadata.yml should map each submission folder to its metadata, but it "
     "holds a list"),
    ("submission_1: processed\n",
     "submission_metadata.yml: submission_1: expected a mapping with :submitters:, found a "
     "text"),
    ("submission_1:\n  :submitters: Ada\n",
     "submission_metadata.yml: submission_1: :submitters: should be a list, found a text"),
    ("submission_1:\n  :submitters:\n  - Ada\n",
     "submission_metadata.yml: submission_1: :submitters: item 1 should be a mapping with "
     ":name:, :sid: and :email:, found a text"),
    ("submission_1:\n  :submitters:\n  - {':name': [A, B]}\n",
     "submission_metadata.yml: submission_1: :submitters: item 1: :name: should be text, found "
     "a list"),
    ("submission_1:\n  :submitters: []\n  :created_at: last tuesday\n",
     "submission_metadata.yml: submission_1: :created_at: 'last tuesday' is not a date and time"),
    ("../escape:\n  :submitters: []\n",
     "submission_metadata.yml: '../escape' is not a submission folder name"),
    ("123:\n  :submitters: []\n", "submission_metadata.yml: 123 is not a submission folder name"),
])
def test_malformed_metadata_says_what_and_where(tmp_path, metadata, message):
    root = write_export(tmp_path / "export", metadata, folders=("submission_1",))
    with pytest.raises(RosterError, match=message):
        discover(root)


def test_times_without_a_zone_are_read_as_utc_with_a_warning(tmp_path):
    metadata = "submission_1:\n  :submitters: []\n  :created_at: '2026-12-15 04:00:00'\n"
    roster = discover(write_export(tmp_path / "export", metadata, folders=("submission_1",)))
    assert roster.submissions[0].created_at == datetime(2026, 12, 15, 4, tzinfo=timezone.utc)
    assert roster.submissions[0].sid == "submission_1"  # no submitters: the key stands in
    assert roster.warnings == [
        "submission_1 has no submitters in submission_metadata.yml: graded under its folder name",
        "submission_metadata.yml: submission_1: :created_at: '2026-12-15 04:00:00' has no time "
        "zone: read as UTC",
    ]


# --------------------------------------------------------------------------- plain folders


def test_a_folder_of_student_folders_and_zips(tmp_path):
    root = tmp_path / "class"
    for name in ("bob", "alice", "student10", "student9"):
        (root / name).mkdir(parents=True)
        (root / name / "dp_basics.py").write_text("x = 1\n")
    zip_folder(root / "bob", root / "carol.zip")
    (root / "grades.csv").write_text("")
    (root / ".hidden").mkdir()
    roster = discover(root)
    assert roster.source == "folders"
    assert [s.key for s in roster.submissions] == ["alice", "bob", "carol", "student9",
                                                   "student10"]
    carol = roster.submissions[2]
    assert carol.path == root / "carol.zip" and carol.created_at is None
    assert carol.submitters == [Submitter(name="carol", sid="carol")] and carol.sid == "carol"
    assert roster.warnings == ["grades.csv is neither a student folder nor a .zip file: ignored"]


def test_a_zip_of_student_folders(tmp_path):
    root = tmp_path / "class"
    for name in ("alice", "bob"):
        (root / name).mkdir(parents=True)
        (root / name / "dp_basics.py").write_text("x = 1\n")
    archive = zip_folder(root, tmp_path / "class.zip", prefix="class/")
    roster = discover(archive, tmp_path / "work")
    assert [s.key for s in roster.submissions] == ["alice", "bob"]
    assert roster.source == "folders"


def test_a_student_with_a_folder_and_a_zip_is_an_error(tmp_path):
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / "dp_basics.py").write_text("x = 1\n")
    zip_folder(root / "alice", root / "alice.zip")
    with pytest.raises(RosterError, match="two submissions for 'alice'.*alice and alice.zip"):
        discover(root)


def test_symbolic_links_are_skipped(tmp_path):
    root = tmp_path / "class"
    (root / "alice").mkdir(parents=True)
    (root / "mallory").symlink_to(tmp_path)
    roster = discover(root)
    assert [s.key for s in roster.submissions] == ["alice"]
    assert roster.warnings == ["mallory is a symbolic link: skipped (copy the submission "
                               "instead)"]


def test_one_submission_is_not_a_class(tmp_path):
    (tmp_path / "dp_basics.py").write_text("x = 1\n")
    (tmp_path / "answers.yml").write_text("q: A\n")
    with pytest.raises(RosterError, match="looks like one submission"):
        discover(tmp_path)


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nothing", "does not exist"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "holds no submissions"),
    (lambda p: (p / "a.txt").write_text("x") and p / "a.txt", "neither a folder nor a .zip"),
])
def test_what_is_not_a_class_says_why(tmp_path, make, message):
    with pytest.raises(RosterError, match=message):
        discover(make(tmp_path), tmp_path / "work")
