"""scripts/make_class_export.py: a Gradescope-style export that reads back as a class, with
expected scores. Nothing is graded here (one grading takes ~8 s): the expectations are checked
for consistency, and the export through autograder.batch.roster."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from autograder.batch.roster import METADATA, discover
from autograder.protocol.statuses import SUBMISSION_STATES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_class_export.py"
COUNT = 20
CATEGORIES = {"correct", "partial", "blank", "broken", "hostile"}


def make(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("class") / "export"
    run = make(out, "--count", str(COUNT), "--seed", "7", "--zip")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"({COUNT} submissions, and assignment_" in run.stdout
    return out, json.loads((out / "expected.json").read_text())


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(path.relative_to(folder).as_posix().encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_the_export_reads_back_as_the_class_expected_json_describes(export, tmp_path):
    out, expected = export
    folder = out / expected["export"]
    roster = discover(folder)
    assert roster.source == "gradescope" and roster.warnings == []
    assert [s.key for s in roster.submissions] == list(expected["submissions"])
    for sub in roster.submissions:
        record = expected["submissions"][sub.key]
        assert [(p.name, p.sid, p.email) for p in sub.submitters] == [
            (p["name"], p["sid"], p["email"]) for p in record["submitters"]]
        assert sub.created_at == datetime.fromisoformat(record["created_at"])
        assert sub.created_at.tzinfo is not None
    # The zip (one top folder, as Gradescope's) gives the same class.
    zipped = discover(out / expected["zip"], tmp_path / "work")
    assert [(s.key, s.submitters, s.created_at) for s in zipped.submissions] == \
        [(s.key, s.submitters, s.created_at) for s in roster.submissions]


def test_the_metadata_looks_like_gradescope_s(export):
    out, expected = export
    text = (out / expected["export"] / METADATA).read_text()
    assert text.startswith("---\nsubmission_")
    for needle in ("  :submitters:\n  - :name: ", "    :sid: '0", "  :created_at: 20",
                   " Z\n  :score: 0.0\n", "  :history:", "!ruby/hash:"):
        assert needle in text
    assert all(key.startswith("submission_") and key[11:].isdigit()
               for key in expected["submissions"])


def test_every_category_and_special_case_is_there(export):
    _out, expected = export
    records = list(expected["submissions"].values())
    assert {r["category"] for r in records} == CATEGORIES
    assert sum(expected["categories"].values()) == COUNT == expected["count"]
    variants = {r["variant"] for r in records}
    for name in ("reference", "template", "partial_example", "syntax_error", "missing_function",
                 "misnamed_case", "misnamed_other", "malformed_answers", "notebook",
                 "import_loop", "sleep_forever", "reads_secrets", "memory_hog", "fork_bomb"):
        assert name in variants, name
    assert any(v.startswith("mutant:") for v in variants)
    assert any(r["group"] and len(r["submitters"]) in (2, 3) for r in records)
    late = [r for r in records if r["late"] and r["late"]["penalty"] > 0]
    assert late and any(r["lateness"] == "grace" and r["late"]["penalty"] == 0 for r in records)
    assert any(r["late"]["penalty"] == 1.0 for r in late)  # beyond max_days


def test_expectations_are_consistent(export):
    out, expected = export
    policy = expected["late_policy"]
    assert policy == {"policy": "per_day", "percent_per_day": 10.0, "max_days": 3,
                      "grace_minutes": 15.0}
    for key, r in expected["submissions"].items():
        factor = 1 - (r["late"]["penalty"] if r["late"] else 0)
        low, high = r["total_range"]
        assert 0 <= low <= high <= expected["max_score"], key
        c_low, c_high = r["coding_range"]
        assert 0 <= c_low <= c_high <= 70, key
        assert low == pytest.approx((r["multiple_choice"] + c_low) * factor, abs=1e-3)
        if r["total"] is not None:
            assert r["coding"] is not None and low - 1e-3 <= r["total"] <= high + 1e-3
            assert r["total"] == pytest.approx((r["multiple_choice"] + r["coding"]) * factor,
                                               abs=1e-3)
        folder = out / expected["export"] / key
        if r["answers"] == "key":
            assert r["multiple_choice"] == 30
        if r["answers"] in ("template", "none", "malformed"):
            assert r["multiple_choice"] == 0
        if r["variant"] in ("reference", "alt_arithmetic", "alt_handrolled", "notebook",
                            "misnamed_case"):
            assert r["coding"] == 70, key
        if r["variant"] in ("template", "syntax_error", "misnamed_other", "no_files",
                            "import_loop"):
            assert r["coding"] == 0, key
        if r["variant"].startswith("mutant:"):
            assert r["coding"] is None and c_high < 70, key
            assert (folder / "dp_basics.py").read_text().startswith("# MUTANT: ")
        if r["variant"] == "misnamed_case":
            assert (folder / "DP_basics.py").is_file() and r["upload_warnings"]
        if r["variant"] == "notebook":
            assert not (folder / "dp_basics.py").exists() and (folder / "dp_basics.ipynb").is_file()
        # The statuses check_class_batch.py holds a batch to (seen on a real batch of every
        # variant: scripts/check_class_batch.py).
        assert r["statuses"] and set(r["statuses"]) <= set(SUBMISSION_STATES), key
        if r["category"] in ("correct", "partial"):
            assert r["statuses"] == ["ok"], key
    statuses = {r["variant"]: r["statuses"] for r in expected["submissions"].values()}
    assert (statuses["template"], statuses["syntax_error"], statuses["reads_secrets"],
            statuses["import_loop"], statuses["no_files"], statuses["sleep_forever"]) == \
        (["blank"], ["not_importable"], ["flagged"], ["flagged"], ["no_module"], ["timed_out"])


def test_hostile_submissions_are_bounded(export):
    out, expected = export
    texts = {r["variant"]: (out / expected["export"] / key / "dp_basics.py").read_text()
             for key, r in expected["submissions"].items() if r["category"] == "hostile"}
    assert "monotonic() + 120" in texts["import_loop"]
    assert "sleep(600)" in texts["sleep_forever"]
    assert "range(100)" in texts["fork_bomb"] and "sleep(5)" in texts["fork_bomb"]
    assert "bytearray(1 << 30)" in texts["memory_hog"]
    assert "questions.yml" in texts["reads_secrets"]
    for text in texts.values():
        compile(text, "dp_basics.py", "exec")  # hostile, not broken


def test_the_same_seed_gives_the_same_export(export, tmp_path):
    out, expected = export
    again = make(tmp_path / "again", "--count", str(COUNT), "--seed", "7", "--zip")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "expected.json").read_text() == \
        (out / "expected.json").read_text()
    assert tree_digest(tmp_path / "again") == tree_digest(out)  # the zip too, byte for byte
    other = make(tmp_path / "other", "--count", str(COUNT), "--seed", "8")
    assert other.returncode == 0, other.stderr
    assert json.loads((tmp_path / "other" / "expected.json").read_text())["submissions"] \
        != expected["submissions"]


def test_answers_files_are_what_students_write(export):
    out, expected = export
    for key, r in expected["submissions"].items():
        folder = out / expected["export"] / key
        if r["answers"] in ("key", "mostly", "random"):
            answers = yaml.safe_load((folder / "answers.yml").read_text())
            assert isinstance(answers, dict) and len(answers) == 20
        if r["answers"] == "json":
            assert len(json.loads((folder / "answers.json").read_text())) == 20


def test_an_occupied_out_folder_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    run = make(tmp_path, "--count", "2")
    assert run.returncode == 2 and "is not empty (use --force" in run.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"
