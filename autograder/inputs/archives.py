"""Safe extraction of uploaded zip files: no escaping paths, no links, no zip bombs.

Extraction runs in a limited child process (`autograder.sandbox.untrusted_parse`): the central
directory,
the decompressors and the file system all see the uploader's bytes, and whatever they raise or
exhaust becomes an `ArchiveError` with a message for the student.
"""

from __future__ import annotations

import errno
import stat
import zipfile
from pathlib import Path, PurePosixPath

from autograder.project.inert import label
from autograder.sandbox.untrusted_parse import ChildFailed, Limits, run_limited

MAX_ENTRIES = 1000
MAX_TOTAL_BYTES = 50 << 20
MAX_FILE_BYTES = 20 << 20
MAX_NAME_BYTES = 255  # one file or folder name (Linux's limit)


class ArchiveError(ValueError):
    """The archive is unsafe or unreadable; the message says why, for the student."""


def extract_zip(archive: Path, dest: Path, max_entries: int = MAX_ENTRIES,
                max_total: int = MAX_TOTAL_BYTES, max_file: int = MAX_FILE_BYTES) -> None:
    """Extract `archive` into `dest`, refusing anything that could escape or explode."""
    limits = Limits(file_bytes=max_file + 1, timeout_s=60.0)
    try:
        problem = run_limited(_extract_here, str(archive), str(dest), max_entries, max_total,
                              max_file, limits=limits)
    except ChildFailed as exc:
        why = {"memory": "reading it needed more memory than the grader allows",
               "time": "extracting it took longer than the grader allows",
               "size": "a file in it is too large"}.get(exc.reason, str(exc))
        raise ArchiveError(f"the zip could not be extracted: {why}") from None
    if problem is not None:
        raise ArchiveError(problem)


def _extract_here(archive: str, dest: str, max_entries: int, max_total: int,
                  max_file: int) -> str | None:
    """In the child: extract, returning None, or the problem for the student."""
    try:
        _extract(Path(archive), Path(dest), max_entries, max_total, max_file)
    except ArchiveError as exc:
        return str(exc)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        return f"the zip could not be read: {label(str(exc), 200)}"
    except Exception as exc:  # noqa: BLE001 - zlib.error, lzma.LZMAError, a bad header...
        return f"the zip could not be read ({type(exc).__name__}: {label(str(exc), 200)})"
    return None


def _extract(archive: Path, dest: Path, max_entries: int, max_total: int, max_file: int) -> None:
    with zipfile.ZipFile(archive) as zf:
        entries = zf.infolist()
        if len(entries) > max_entries:
            raise ArchiveError(f"the zip has {len(entries)} entries (at most {max_entries})")
        total = 0
        for info in entries:
            target = _safe_target(dest, info)
            if info.flag_bits & 0x1:
                raise ArchiveError(f"the zip entry {_shown(info)} is encrypted: zip your files "
                                   "again without a password")
            try:
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
            except OSError as exc:
                raise ArchiveError(_os_problem(info, exc)) from None


def _shown(info: zipfile.ZipInfo) -> str:
    return repr(label(info.filename))


def _os_problem(info: zipfile.ZipInfo, exc: OSError) -> str:
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST):
        return (f"the zip entry {_shown(info)} could not be extracted: the zip holds a file "
                "and a folder of the same name; keep only one")
    if exc.errno == errno.ENAMETOOLONG:
        return (f"the zip entry {_shown(info)} has a name too long for a file system (at "
                f"most {MAX_NAME_BYTES} bytes per name); rename it")
    return f"the zip entry {_shown(info)} could not be extracted: {exc.strerror or exc}"


def _safe_target(dest: Path, info: zipfile.ZipInfo) -> Path:
    name = info.filename.replace("\\", "/")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ArchiveError(f"the zip entry {_shown(info)} points outside the submission")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"the zip entry {_shown(info)} is a symbolic link")
    if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in path.parts):
        raise ArchiveError(f"the zip entry {_shown(info)} has a name over {MAX_NAME_BYTES} "
                           "bytes; rename it")
    if not path.parts and not info.is_dir():
        raise ArchiveError(f"the zip entry {_shown(info)} has no name")
    return dest.joinpath(*path.parts)
