"""Safe extraction of uploaded zip files: no escaping paths, no links, no zip bombs."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath

MAX_ENTRIES = 1000
MAX_TOTAL_BYTES = 50 << 20
MAX_FILE_BYTES = 20 << 20


class ArchiveError(ValueError):
    """The archive is unsafe or unreadable; the message says why, for the student."""


def extract_zip(archive: Path, dest: Path, max_entries: int = MAX_ENTRIES,
                max_total: int = MAX_TOTAL_BYTES, max_file: int = MAX_FILE_BYTES) -> None:
    """Extract `archive` into `dest`, refusing anything that could escape or explode."""
    try:
        with zipfile.ZipFile(archive) as zf:
            entries = zf.infolist()
            if len(entries) > max_entries:
                raise ArchiveError(f"the zip has {len(entries)} entries (at most {max_entries})")
            total = 0
            for info in entries:
                target = _safe_target(dest, info)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                # Count bytes as they come out: header sizes are written by the uploader.
                written = 0
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 16):
                        written += len(chunk)
                        total += len(chunk)
                        if written > max_file or total > max_total:
                            raise ArchiveError(
                                f"the zip unpacks to more than {max_total >> 20} MiB "
                                f"(or a file over {max_file >> 20} MiB): is it a zip bomb?")
                        out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise ArchiveError(f"the zip could not be read: {exc}") from None


def _safe_target(dest: Path, info: zipfile.ZipInfo) -> Path:
    name = info.filename.replace("\\", "/")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ArchiveError(f"the zip entry {info.filename!r} points outside the submission")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"the zip entry {info.filename!r} is a symbolic link")
    return dest.joinpath(*path.parts)
