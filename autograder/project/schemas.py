"""The project's JSON Schemas: loading, validation with readable errors, and their defaults.

Every function takes the folder of schemas to read (`Project.schemas`): the caller's project
decides which, never the working folder at import.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema


class SchemaError(ValueError):
    """A document does not match its schema; the message names the path of each bad key."""


@cache
def load_schema(name: str, schemas: Path) -> dict:
    """Schema `name` of the folder `schemas`, read once per process."""
    return json.loads((schemas / name).read_text())


def validate(document: Any, schema_name: str, label: str, schemas: Path,
             concerns: Callable[[tuple], bool] = lambda path: True) -> None:
    """Raise SchemaError listing every problem as 'label: a.b.c: message'; `concerns(path)`:
    whether a problem at that path (a tuple of keys) counts (default: every one)."""
    schema = load_schema(schema_name, schemas)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted((e for e in validator.iter_errors(document) if concerns(tuple(e.path))),
                    key=lambda e: list(map(str, e.path)))
    if errors:
        lines = [f"{label}: {'.'.join(map(str, e.path)) or '(top level)'}: {_message(e)}"
                 for e in errors]
        raise SchemaError("\n".join(lines))


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, but for a date where text was wanted: YAML reads an unquoted
    date or time as one (not a string), and its Python repr helps nobody."""
    if error.validator == "type" and isinstance(error.instance, (datetime.date, datetime.time)):
        text = error.instance.isoformat()
        return (f"{text} must be written in quotes (\"{text}\"): unquoted, YAML reads it as a "
                f"date, not as text")
    return error.message


def with_defaults(document: Any, schema_name: str, schemas: Path, node: str = "#") -> Any:
    """A copy of `document` with every missing key that has a schema default filled in;
    `node` (a JSON pointer such as "#/$defs/assignment"): the part of the schema it follows."""
    schema = load_schema(schema_name, schemas)
    start = schema if node == "#" else _resolve(node, schema)
    return _fill(copy.deepcopy(document), start, schema)


def _fill(value: Any, node: dict, root: dict) -> Any:
    node = _deref(node, root)
    if not isinstance(value, dict):
        return value
    for key, sub in node.get("properties", {}).items():
        sub = _deref(sub, root)
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            value[key] = _fill(value[key], sub, root)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        for key in value:
            if key not in node.get("properties", {}):
                value[key] = _fill(value[key], extra, root)
    return value


def _deref(node: dict, root: dict) -> dict:
    # A node's own keywords (its "default") sit beside its "$ref" and win over the target's.
    return {**_resolve(node["$ref"], root), **node} if "$ref" in node else node


def _resolve(ref: str, root: dict) -> dict:
    node = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node
