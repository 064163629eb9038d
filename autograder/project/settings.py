"""Records of grading.yml, each field declared once with the key it reads.

The schema (schemas/grading.schema.json) declares every key: its type, default and meaning. A
record's field names the key it is read from (`setting("timeouts.call")`), and `read` builds the
record from a validated, defaults-filled object; no mapping is written by hand between the two.
`keys_read` lists what a record reads, so a test holds the records and the schema to each other.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

Record = TypeVar("Record")

WHOLE = ""  # the key of a record read from the same object as its parent


def setting(key: str, *, unit: int = 1) -> Any:
    """A field read from `key`, a dotted path in the record's object (WHOLE: that object itself,
    for a nested record); a number is multiplied by `unit` (1 << 20: MiB to bytes). No default:
    the schema holds every default."""
    return dataclasses.field(metadata={"key": key, "unit": unit})


def read(record: type[Record], values: dict) -> Record:
    """`record` from `values`, each field from its key; nested records are read recursively."""
    hints = typing.get_type_hints(record)
    kwargs = {}
    for field in dataclasses.fields(record):  # type: ignore[arg-type]
        key, unit = field.metadata["key"], field.metadata["unit"]
        value = _at(values, key)
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            value = read(kind, value)
        elif value is not None and float in _alternatives(kind):
            value = float(value * unit)  # YAML's 10 where the record says float
        elif value is not None and unit != 1:
            value = value * unit
        elif isinstance(value, dict):
            value = dict(value)
        kwargs[field.name] = value
    return record(**kwargs)


def keys_read(record: type, prefix: str = "") -> set[str]:
    """The dotted keys `record` reads, nested records included (for the test against the
    schema)."""
    hints = typing.get_type_hints(record)
    keys: set[str] = set()
    for field in dataclasses.fields(record):
        key = ".".join(part for part in (prefix, field.metadata["key"]) if part)
        kind = hints[field.name]
        keys |= keys_read(kind, key) if dataclasses.is_dataclass(kind) else {key}
    return keys


def _at(values: dict, key: str) -> Any:
    for part in key.split(".") if key else []:
        values = values.get(part) if isinstance(values, dict) else None
    return values


def _alternatives(kind: Any) -> tuple:
    return typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
