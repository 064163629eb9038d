"""docs/grading.md, generated from schemas/grading.schema.json: one source of truth."""

from __future__ import annotations

import json
from pathlib import Path

from autograder.project.paths import PACKAGE_ROOT
from autograder.project.schemas import load_schema

RELATIVE = Path("docs") / "grading.md"  # in the engine's tree, and in a project that keeps one
DOCS = PACKAGE_ROOT / RELATIVE


def render(schemas: Path) -> str:
    """docs/grading.md from the grading schema of the folder `schemas` (the project's)."""
    schema = load_schema("grading.schema.json", schemas)
    rows: list[tuple[str, str, str, str]] = []
    _walk(schema, schema, "", rows)
    lines = [
        "# grading.yml reference",
        "",
        "Generated from `schemas/grading.schema.json` by `autograder generate`; edit the",
        "schema, not this file. `ASSIGNMENT` stands for an assignment's folder name.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{k}` | {t} | {d} | {m} |" for k, t, d, m in rows]
    return "\n".join(lines) + "\n"


def _walk(node: dict, root: dict, path: str, rows: list) -> None:
    if "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if path:
        kind = node.get("type") or ("one of " + ", ".join(f"`{v}`" for v in node["enum"])
                                    if "enum" in node else "")
        default = f"`{json.dumps(node['default'])}`" if "default" in node \
            and node["default"] != {} else ""
        rows.append((path, kind, default, node.get("description", "").replace("|", "\\|")))
    for key, child in node.get("properties", {}).items():
        _walk(child, root, f"{path}.{key}" if path else key, rows)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and path == "assignments":
        _walk(extra, root, f"{path}.ASSIGNMENT", rows)
