"""Zip uploads: extracted safely, or refused with a reason."""

import stat
import zipfile

import pytest

from autograder.inputs.archives import ArchiveError, extract_zip


def make_zip(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            if isinstance(data, zipfile.ZipInfo):
                zf.writestr(data, name)
            else:
                zf.writestr(name, data)
    return path


def test_plain_zip_is_extracted(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [("hw/dp_basics.py", "x = 1\n"), ("hw/a.yml", "")])
    extract_zip(archive, tmp_path / "out")
    assert (tmp_path / "out" / "hw" / "dp_basics.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("name", ["../evil.py", "/etc/evil.py", "a/../../evil.py", "C:/x.py",
                                  "..\\evil.py"])
def test_escaping_paths_are_refused(tmp_path, name):
    archive = make_zip(tmp_path / "s.zip", [(name, "x")])
    with pytest.raises(ArchiveError, match="outside the submission"):
        extract_zip(archive, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()


def test_symlinks_are_refused(tmp_path):
    info = zipfile.ZipInfo("dp_basics.py")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive = tmp_path / "s.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ArchiveError, match="symbolic link"):
        extract_zip(archive, tmp_path / "out")


def test_zip_bomb_is_stopped_while_extracting(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [("big.txt", b"\0" * (30 << 20))])
    assert archive.stat().st_size < 1 << 20  # compresses ~1000:1
    with pytest.raises(ArchiveError, match="zip bomb"):
        extract_zip(archive, tmp_path / "out", max_total=10 << 20)


def test_too_many_entries(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [(f"f{i}", "") for i in range(20)])
    with pytest.raises(ArchiveError, match="20 entries"):
        extract_zip(archive, tmp_path / "out", max_entries=10)


def test_not_a_zip(tmp_path):
    (tmp_path / "s.zip").write_text("hello")
    with pytest.raises(ArchiveError, match="could not be read"):
        extract_zip(tmp_path / "s.zip", tmp_path / "out")
