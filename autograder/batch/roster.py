"""Find the submissions of a class: `discover(SUBMISSIONS, workdir)` -> `Roster`.

SUBMISSIONS is one of:

- a Gradescope "Export Submissions" folder or zip: `submission_metadata.yml` maps each
  `submission_<id>` folder to its submitters (`:name:`, `:sid:`, `:email:`; several for a group
  submission) and its `:created_at:` time. The file is Ruby-flavoured YAML; it is read with a
  safe loader that turns any Ruby tag (`!ruby/object:...`) into plain data and never builds
  objects. The zip may hold everything inside one top folder (`assignment_123_export/`);
- a plain folder of per-student folders or per-student `.zip` files: the key is the folder
  (or zip) name, with one submitter whose sid and name are that key.

A zip given as SUBMISSIONS is extracted safely (autograder.inputs.archives) into `workdir/export`
(replaced on the next call, so a batch run again re-extracts); per-student zips are left as
they are (grading extracts them), and a student folder holding nothing but one .zip is graded
as that zip. A folder listed in the metadata but missing, or present but not listed, is a
warning, never an error: the TA sees which students will have no grade. A metadata file that
cannot be read is a RosterError saying what is wrong and where.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from autograder.batch.records import ClassSubmission, Submitter
from autograder.inputs.archives import ArchiveError, extract_zip
from autograder.inputs.submission import upload_path
from autograder.project.late_policy import parse_timestamp
from autograder.project.yaml_errors import not_valid_yaml

METADATA = "submission_metadata.yml"
MAX_METADATA_BYTES = 64 << 20  # a real export's metadata, results included, is a few MiB
# A class export: many folders, each small; larger than a single upload's limits.
EXPORT_MAX_ENTRIES = 100_000
EXPORT_MAX_TOTAL = 4 << 30
EXPORT_MAX_FILE = 256 << 20
_MARKER = ".extracted-by-autograder"  # in `workdir/export`: ours to replace on the next run
_IGNORED = ("__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini")
_UNSAFE_NAME = re.compile(r"[/\\\x00]")


class RosterError(ValueError):
    """SUBMISSIONS cannot be read as a class; the message says what and where."""


@dataclass
class Roster:
    """The submissions found, sorted by key, and what a TA should know about them."""

    submissions: list[ClassSubmission]
    warnings: list[str] = field(default_factory=list)
    source: str = "folders"  # "gradescope" (an export with metadata) or "folders"
    root: Path | None = None  # the folder the submissions are in (inside workdir for a zip)

    def __len__(self) -> int:
        return len(self.submissions)

    def __iter__(self) -> Iterator[ClassSubmission]:
        return iter(self.submissions)


def discover(path: Path, workdir: Path | None = None) -> Roster:
    """The submissions under `path` (a folder, or a zip extracted into `workdir`)."""
    path = Path(path)
    if not path.exists():
        raise RosterError(f"{path} does not exist")
    if path.is_file():
        if path.suffix.lower() != ".zip":
            raise RosterError(f"{path} is neither a folder nor a .zip file")
        if workdir is None:
            raise RosterError(f"{path} is a zip: discover() needs a folder to extract it into")
        dest = Path(workdir) / "export"
        if (dest / _MARKER).is_file():
            shutil.rmtree(dest)  # our own extraction of an earlier run: extract afresh
        elif dest.exists() and any(dest.iterdir()):
            raise RosterError(f"{dest} is not empty: extract the export into a fresh folder")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / _MARKER).write_text(f"{path}\n")
        try:
            extract_zip(path, dest, max_entries=EXPORT_MAX_ENTRIES, max_total=EXPORT_MAX_TOTAL,
                        max_file=EXPORT_MAX_FILE)
        except ArchiveError as exc:
            raise RosterError(f"{path.name}: {exc}") from None
        root = _top_folder(dest, plain=True)
    elif path.is_dir():
        root = _top_folder(path, plain=False)
    else:
        raise RosterError(f"{path} is neither a folder nor a .zip file")
    if (root / METADATA).is_file():
        return _gradescope(root)
    return _folders(root)


# ----------------------------------------------------------------------------- Gradescope


class _MetadataLoader(yaml.SafeLoader):
    """SafeLoader for Gradescope's Ruby-flavoured YAML: any tag (`!ruby/object:Foo`,
    `!ruby/hash:ActiveSupport::HashWithIndifferentAccess`, `!ruby/sym`) gives the plain
    mapping, list or string under it; no Python or Ruby object is ever built."""


def _untagged(loader: _MetadataLoader, _suffix: str, node: yaml.Node | None = None) -> Any:
    node = _suffix if node is None else node  # add_constructor(None) passes no suffix
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_MetadataLoader.add_multi_constructor("!", _untagged)
_MetadataLoader.add_multi_constructor("tag:ruby.yaml.org,2002:", _untagged)
_MetadataLoader.add_constructor(None, _untagged)


def load_metadata(file: Path) -> dict[str, Any]:
    """submission_metadata.yml as plain data: {folder name: {':submitters': [...], ...}}."""
    try:
        size = file.stat().st_size
        if size > MAX_METADATA_BYTES:
            raise RosterError(f"{file.name} is {size >> 20} MiB, larger than the "
                              f"{MAX_METADATA_BYTES >> 20} MiB a class export's metadata can be")
        text = file.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise RosterError(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RosterError(f"{file.name} is not UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=_MetadataLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise RosterError(not_valid_yaml(file.name, exc)) from None
    except RecursionError:
        raise RosterError(f"{file.name} is nested too deeply to be submission metadata") \
            from None
    if data is None:
        raise RosterError(f"{file.name} is empty: it lists no submissions")
    if not isinstance(data, dict):
        raise RosterError(f"{file.name} should map each submission folder to its metadata, but "
                          f"it holds a {_kind(data)}")
    return data


def _gradescope(root: Path) -> Roster:
    metadata = load_metadata(root / METADATA)
    warnings: list[str] = []
    submissions: list[ClassSubmission] = []
    listed: set[str] = set()
    for key, entry in metadata.items():
        if not isinstance(key, str) or not _safe_name(key):
            raise RosterError(f"{METADATA}: {key!r} is not a submission folder name (expected "
                              f"a name like submission_123456)")
        listed.add(key)
        where = f"{METADATA}: {key}"
        if not isinstance(entry, dict):
            raise RosterError(f"{where}: expected a mapping with :submitters:, found a "
                              f"{_kind(entry)}")
        submitters = _submitters(key, entry, where, warnings)
        created_at = _created_at(entry, where, warnings)
        folder = root / key
        if folder.is_symlink():
            warnings.append(f"{key} is a symbolic link in the export: not graded")
            continue
        if not folder.is_dir():
            who = ", ".join(s.name or s.sid for s in submitters) or "no submitter"
            warnings.append(f"{key} ({who}) is listed in {METADATA} but its folder is missing "
                            f"from the export: not graded")
            continue
        submissions.append(ClassSubmission(key, _upload(folder), submitters, created_at))
    for entry in sorted(root.iterdir(), key=lambda p: _natural(p.name)):
        name = entry.name
        if name == METADATA or name.startswith(".") or name in _IGNORED or name in listed:
            continue
        if entry.is_dir() and not entry.is_symlink():
            warnings.append(f"{name} is in the export but not in {METADATA}: not graded "
                            f"(no submitter is known for it)")
        else:
            warnings.append(f"{name} at the top of the export is not a submission folder: "
                            f"ignored")
    _check_sids(submissions, warnings)
    submissions.sort(key=lambda s: _natural(s.key))
    return Roster(submissions, warnings, "gradescope", root)


def _field(entry: dict, name: str) -> Any:
    # Gradescope writes Ruby symbols (":sid"); accept plain keys too (a re-saved file).
    return entry.get(f":{name}", entry.get(name))


def _submitters(key: str, entry: dict, where: str, warnings: list[str]) -> list[Submitter]:
    raw = _field(entry, "submitters")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise RosterError(f"{where}: :submitters: should be a list, found a {_kind(raw)}")
    if not raw:
        warnings.append(f"{key} has no submitters in {METADATA}: graded under its folder name")
    submitters = []
    for index, person in enumerate(raw):
        if not isinstance(person, dict):
            raise RosterError(f"{where}: :submitters: item {index + 1} should be a mapping "
                              f"with :name:, :sid: and :email:, found a {_kind(person)}")
        name, sid, email = (_text(_field(person, f), f"{where}: :submitters: item {index + 1}",
                                  f) for f in ("name", "sid", "email"))
        if not sid or not _safe_name(sid):
            stand_in = key if index == 0 else f"{key}-{index + 1}"
            reason = "no SID" if not sid else f"the SID {sid!r}, unusable as a folder name,"
            warnings.append(f"{key}: submitter {name or email or index + 1!s} has {reason} in "
                            f"{METADATA}; {stand_in!r} is used in its place")
            sid = stand_in
        submitters.append(Submitter(name=name or sid, sid=sid, email=email))
    return submitters


def _text(value: Any, where: str, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RosterError(f"{where}: :{name}: should be text, found a {_kind(value)}")
    return str(value).strip()


def _created_at(entry: dict, where: str, warnings: list[str]) -> datetime | None:
    value = _field(entry, "created_at")
    if value is None:
        return None
    if isinstance(value, datetime) and value.tzinfo is None:
        # YAML timestamps without a zone are UTC (YAML 1.1 timestamp type); Gradescope writes Z.
        return value.replace(tzinfo=timezone.utc)
    if isinstance(value, str) and re.search(r"\d\d:\d\d(:\d\d)?(\.\d+)?\s*$", value):
        warnings.append(f"{where}: :created_at: {value!r} has no time zone: read as UTC")
        value = value.strip() + "Z"
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise RosterError(f"{where}: :created_at: {exc}") from None


# ----------------------------------------------------------------------------- plain folders


def _folders(root: Path) -> Roster:
    warnings: list[str] = []
    found: dict[str, Path] = {}
    loose: list[str] = []
    for entry in sorted(root.iterdir(), key=lambda p: _natural(p.name)):
        name = entry.name
        if name.startswith(".") or name in _IGNORED:
            continue
        if entry.is_symlink():
            warnings.append(f"{name} is a symbolic link: skipped (copy the submission instead)")
            continue
        if entry.is_dir():
            key = name
        elif entry.is_file() and entry.suffix.lower() == ".zip":
            key = entry.stem
        else:
            loose.append(name)
            continue
        if key in found:
            raise RosterError(f"two submissions for {key!r} in {root}: {found[key].name} and "
                              f"{name}; keep one")
        found[key] = entry
    if not found:
        if any(Path(n).suffix in (".py", ".ipynb", ".yml", ".yaml", ".json") for n in loose):
            raise RosterError(f"{root} holds files but no student folders: it looks like one "
                              f"submission (grade it with `autograder grade`); a class is a "
                              f"folder of student folders or .zip files, or a Gradescope export "
                              f"with {METADATA}")
        raise RosterError(f"{root} holds no submissions: expected a Gradescope export with "
                          f"{METADATA}, or a folder of student folders or .zip files")
    lowered: dict[str, str] = {}
    for key in found:
        if key.lower() in lowered:
            warnings.append(f"{lowered[key.lower()]!r} and {key!r} differ only in case: their "
                            f"reports collide on a case-insensitive file system")
        lowered.setdefault(key.lower(), key)
    for name in loose:
        warnings.append(f"{name} is neither a student folder nor a .zip file: ignored")
    submissions = [ClassSubmission(key, _upload(entry), [Submitter(name=key, sid=key)], None)
                   for key, entry in found.items()]
    submissions.sort(key=lambda s: _natural(s.key))
    return Roster(submissions, warnings, "folders", root)


# ----------------------------------------------------------------------------- helpers


def _top_folder(root: Path, plain: bool) -> Path:
    """The folder holding the export: `root`, or its one top folder (a zipped export; with
    `plain`, also a zipped folder of student folders)."""
    if (root / METADATA).is_file():
        return root
    entries = [p for p in root.iterdir() if not p.name.startswith(".") and p.name
               not in _IGNORED]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        inner = entries[0]
        if (inner / METADATA).is_file():
            return inner
        # A zip of a folder of student folders: the folders are inside it.
        children = [p for p in inner.iterdir() if not p.name.startswith(".")]
        if plain and children and all(p.is_dir() or p.suffix.lower() == ".zip"
                                      for p in children):
            return inner
    return root


def _upload(path: Path) -> Path:
    return upload_path(path, ignored=_IGNORED)


def _check_sids(submissions: list[ClassSubmission], warnings: list[str]) -> None:
    seen: dict[str, str] = {}
    for sub in submissions:
        for person in sub.submitters:
            if person.sid in seen and seen[person.sid] != sub.key:
                warnings.append(f"SID {person.sid} is a submitter of both {seen[person.sid]} and "
                                f"{sub.key}: check which submission counts")
            seen.setdefault(person.sid, sub.key)


def _safe_name(name: str) -> bool:
    """Usable as one folder name: no separators, not '.', '..' or hidden, not too long."""
    return bool(name) and name == name.strip() and not _UNSAFE_NAME.search(name) \
        and not name.startswith(".") and len(name) <= 200


def _natural(text: str) -> tuple:
    """Sort key: 'submission_9' before 'submission_10', ties broken by the exact text."""
    parts = re.split(r"(\d+)", text)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p), text


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "text", int: "number", float: "number",
            bool: "boolean", type(None): "null"}.get(type(value), type(value).__name__)
