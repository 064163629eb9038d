"""Content, not paths, for grading on other machines: submissions, assignments and reports packed
as plain data (bytes, lists, dicts) and unpacked into a worker's own folders.

A Ray worker node shares no file system with the batch: the driver packs each submission
(`pack_submission`) and, once per assignment version, the assignment (`pack_assignment`: the
grading.yml entry, hidden tests, bank, probes, timings and the schemas that validate them); the
worker unpacks both into temporary folders of its own, grades, and sends back the files it wrote
(`read_outputs`), which the driver checks and writes into its staging folder (`write_outputs`).

Nothing here runs or imports what it carries. Names are checked on both sides (relative, no
`..`, no links followed) and everything that grows with the input is capped, with the limits of
zip uploads for submissions.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograder.project.paths import Project

FORMAT = 1  # of the dicts below; a worker refuses another
# An assignment is a few hundred KiB of tests and YAML; far more is a mistake (a dataset copied
# into the assignment folder), better refused than sent to every worker.
MAX_ASSIGNMENT_FILES = 2000
MAX_ASSIGNMENT_BYTES = 64 << 20
# What grading writes: results.json, the reports (each under report.MAX_FILE_BYTES) and the
# sandbox events; the same bound as a local worker's answer.
MAX_OUTPUT_FILES = 16
MAX_OUTPUT_BYTES = 16 << 20
_OUTPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
# Folders of an assignment that grading never reads: the reference solution stays on the driver.
_NOT_SHIPPED = ("solution", "examples", "tests/public")
# A link in a submission is recreated pointing here (nowhere): grading never follows one (it says
# "submit the file itself"), so its target on the TA's machine is neither read nor sent.
LINK_TARGET = ".link-not-followed"


class PackError(ValueError):
    """Something cannot be packed or unpacked; the message says what and why."""


# ----------------------------------------------------------------------------- submissions


# Folders nested deeper than this are refused (a zip export caps each name, not the depth).
MAX_DEPTH = 64

def pack_submission(path: Path) -> dict:
    """A submission (folder, or a file such as a .zip upload) as plain data, within the limits
    of zip uploads: {"format", "name", "kind": "file"|"folder", "data" | "entries"}.

    Entries are [name (bytes, relative, POSIX), kind ("file"|"dir"|"link"), data (bytes)];
    links keep only their name, other special files (sockets, pipes) are left out.
    Raises PackError (too large, unreadable)."""
    from autograder.inputs.archives import (
        MAX_ENTRIES,
        MAX_FILE_BYTES,
        MAX_NAME_BYTES,
        MAX_TOTAL_BYTES,
    )

    _check_name(os.fsencode(path.name), MAX_NAME_BYTES)
    try:
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            if info.st_size > MAX_TOTAL_BYTES:
                raise PackError(f"the upload is {_mib(info.st_size)}, over the "
                                f"{_mib(MAX_TOTAL_BYTES)} limit of uploads")
            return {"format": FORMAT, "name": os.fsencode(path.name), "kind": "file",
                    "data": path.read_bytes()}
        if not stat.S_ISDIR(info.st_mode):
            raise PackError("the submission is neither a folder nor a file")
        entries: list[list] = []
        total = 0
        for folder, dirs, files in os.walk(path, onerror=_raise):
            dirs.sort()
            # os.walk recurses (Python 3.11): a folder 1,000 deep would be a RecursionError
            if len(Path(folder).relative_to(path).parts) >= MAX_DEPTH:
                raise PackError(f"the submission's folders are nested more than {MAX_DEPTH} "
                                "deep")
            for name in sorted(dirs) + sorted(files):
                full = Path(folder, name)
                relative = os.fsencode(full.relative_to(path).as_posix())
                info = full.lstat()
                mode = info.st_mode
                if len(entries) >= MAX_ENTRIES:
                    raise PackError(f"the submission has more than {MAX_ENTRIES} files and "
                                    "folders, the limit of uploads")
                if stat.S_ISLNK(mode):
                    entries.append([relative, "link", b""])
                elif stat.S_ISDIR(mode):
                    entries.append([relative, "dir", b""])
                elif stat.S_ISREG(mode):
                    # Sized before it is read: a sparse 8 GiB file must not be read at all.
                    if info.st_size > MAX_FILE_BYTES:
                        raise PackError(f"a file of the submission is {_mib(info.st_size)}, "
                                        f"over the {_mib(MAX_FILE_BYTES)} limit of uploads")
                    with open(full, "rb") as handle:
                        data = handle.read(MAX_FILE_BYTES + 1)  # it may grow meanwhile
                    if len(data) > MAX_FILE_BYTES:
                        raise PackError(f"a file of the submission is over the "
                                        f"{_mib(MAX_FILE_BYTES)} limit of uploads")
                    total += len(data)
                    if total > MAX_TOTAL_BYTES:
                        raise PackError(f"the submission's files add up to over "
                                        f"{_mib(MAX_TOTAL_BYTES)}, the limit of uploads")
                    entries.append([relative, "file", data])
            # os.walk lists links to folders among `dirs` but does not enter them: as wanted.
    except OSError as exc:
        raise PackError(f"the submission could not be read ({exc.strerror or exc})") from None
    return {"format": FORMAT, "name": os.fsencode(path.name), "kind": "folder",
            "entries": entries}


def unpack_submission(packed: dict, into: Path) -> Path:
    """Recreate a packed submission under `into` (which must exist) with its own name; the
    path of the folder or file, to grade as the original."""
    from autograder.inputs.archives import (
        MAX_ENTRIES,
        MAX_FILE_BYTES,
        MAX_NAME_BYTES,
        MAX_TOTAL_BYTES,
    )

    if not isinstance(packed, dict) or packed.get("format") != FORMAT:
        raise PackError("a submission packed by another version of the grader")
    name = _check_name(packed.get("name"), MAX_NAME_BYTES)
    target = into / os.fsdecode(name)
    if packed.get("kind") == "file":
        data = packed.get("data")
        if not isinstance(data, bytes) or len(data) > MAX_TOTAL_BYTES:
            raise PackError("a packed upload that is not bytes within the limits")
        _write_new(target, data)
        return target
    entries = packed.get("entries")
    if packed.get("kind") != "folder" or not isinstance(entries, list) or \
            len(entries) > MAX_ENTRIES:
        raise PackError("a packed submission of an unknown kind or with too many entries")
    target.mkdir()
    total = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], bytes)):
            raise PackError("a malformed entry in a packed submission")
        relative, kind, data = entry
        where = target / _relative(relative, MAX_NAME_BYTES)
        total += len(data)
        if len(data) > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
            raise PackError("a packed submission over the limits of uploads")
        if kind == "dir":
            where.mkdir()
        elif kind == "file":
            _write_new(where, data)
        elif kind == "link":
            where.symlink_to(LINK_TARGET)
        else:
            raise PackError(f"an entry of unknown kind {kind!r} in a packed submission")
    return target


# ----------------------------------------------------------------------------- assignments


def pack_assignment(name: str, project: Project) -> dict:
    """One immutable bundle of an assignment version, as plain data: what a worker needs to
    load and grade it, with the versions the driver's gradebook records (the worker checks
    that it computes the same ones). Raises PackError when it is over the limits."""
    import yaml

    from autograder.batch.fingerprints import assignment_version, grader_version
    from autograder.project.assignment import load_assignment

    spec = load_assignment(name, project)
    raw = yaml.safe_load(project.config.read_text())
    # Only this assignment's entry: the others' configuration is none of a worker's business.
    config = {**raw, "assignments": {name: raw["assignments"][name]}}
    files: list[list] = [["grading.yml", yaml.safe_dump(config, sort_keys=False).encode()]]
    for schema in sorted(project.schemas.glob("*.json")):
        files.append([f"schemas/{schema.name}", schema.read_bytes()])
    for path in sorted(spec.root.rglob("*")):
        relative = path.relative_to(spec.root).as_posix()
        if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts or \
                any(relative == skip or relative.startswith(f"{skip}/") for skip in _NOT_SHIPPED):
            continue
        files.append([f"assignments/{name}/{relative}", path.read_bytes()])
    size = sum(len(data) for _, data in files)
    if len(files) > MAX_ASSIGNMENT_FILES or size > MAX_ASSIGNMENT_BYTES:
        raise PackError(f"the assignment {name} is {len(files)} files, {_mib(size)}: over the "
                        f"{MAX_ASSIGNMENT_FILES} files or {_mib(MAX_ASSIGNMENT_BYTES)} sent to "
                        "each Ray worker")
    return {"format": FORMAT, "assignment": name, "assignment_version": assignment_version(spec),
            "grader_version": grader_version(), "files": files}


def unpack_assignment(bundle: dict, root: Path) -> Path:
    """Write a bundle's files under `root` (an empty folder of the worker's): a project root
    with grading.yml, schemas/ and assignments/NAME/. Returns the grading.yml path."""
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        raise PackError("an assignment bundle made by another version of the grader")
    files = bundle.get("files")
    if not isinstance(files, list) or len(files) > MAX_ASSIGNMENT_FILES:
        raise PackError("an assignment bundle with too many files")
    total = 0
    for entry in files:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], bytes)):
            raise PackError("a malformed file in an assignment bundle")
        relative, data = entry
        total += len(data)
        if total > MAX_ASSIGNMENT_BYTES:
            raise PackError("an assignment bundle over the limits")
        where = root / _relative(os.fsencode(relative), 255)
        where.parent.mkdir(parents=True, exist_ok=True)
        _write_new(where, data)
    return root / "grading.yml"


# ----------------------------------------------------------------------------- reports


def read_outputs(folder: Path) -> dict[str, bytes]:
    """The files grading wrote into `folder` (results.json, the reports, sandbox events)."""
    files: dict[str, bytes] = {}
    if not folder.is_dir():
        return files
    total = 0
    for path in sorted(folder.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        if not _OUTPUT_NAME.fullmatch(path.name) or len(files) >= MAX_OUTPUT_FILES:
            raise PackError(f"grading wrote an unexpected file {path.name!r}")
        data = path.read_bytes()
        total += len(data)
        if total > MAX_OUTPUT_BYTES:
            raise PackError(f"grading wrote over {_mib(MAX_OUTPUT_BYTES)} of reports")
        files[path.name] = data
    return files


def write_outputs(files: object, folder: Path) -> None:
    """Check what a worker sent back and write it into `folder` (the driver's staging folder,
    emptied first). Raises PackError for names or sizes that grading never produces."""
    if not isinstance(files, dict) or len(files) > MAX_OUTPUT_FILES:
        raise PackError("the worker sent back something other than report files")
    total = 0
    for name, data in files.items():
        if not (isinstance(name, str) and _OUTPUT_NAME.fullmatch(name) and
                isinstance(data, bytes)):
            raise PackError("the worker sent back a file with an unexpected name")
        total += len(data)
        if total > MAX_OUTPUT_BYTES:
            raise PackError(f"the worker sent back over {_mib(MAX_OUTPUT_BYTES)} of reports")
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        _write_new(folder / name, data)


# ----------------------------------------------------------------------------- helpers


def _check_name(name: object, limit: int) -> bytes:
    if not isinstance(name, bytes) or not name or len(name) > limit or b"/" in name or \
            b"\0" in name or name in (b".", b".."):
        raise PackError("a packed name that is not a plain file or folder name")
    return name


def _relative(name: object, limit: int) -> Path:
    """A relative path from packed bytes: plain components only (never absolute, `..`)."""
    if not isinstance(name, bytes):
        raise PackError("a packed name that is not bytes")
    parts = name.split(b"/")
    for part in parts:
        _check_name(part, limit)
    return Path(*(os.fsdecode(part) for part in parts))


def _write_new(path: Path, data: bytes) -> None:
    # O_EXCL | O_NOFOLLOW: a name given twice, or a link made by an earlier entry, is refused
    # rather than written through.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as file:
        file.write(data)


def _raise(exc: OSError) -> None:
    raise exc


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
