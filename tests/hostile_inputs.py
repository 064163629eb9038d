"""Builders of the hostile inputs of issue 18, shared by the input-layer, fuzzing and red-team
tests (and scripts/fuzz_inputs.py): each returns bytes or writes a file, nothing else."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

# A clear screen, a forged score line over the real one (\r), a window title, concealed text,
# a right-to-left override: what issue 18 got through to a TA's terminal.
ESCAPES = ("\x1b[2J\x1b[H", "\rtotal            100 / 100", "\x1b]0;owned\x07",
           "\x1b[8mhidden\x1b[0m", "\u202etxt.exe", "\x9b31m", "\u2066x\u2069")
INJECTION = "".join(ESCAPES)
# What must never reach a terminal or a report file raw.
RAW_CONTROLS = ("\x1b", "\r", "\x07", "\x9b", "\u202e", "\u2066", "\u2069")


def zip_bytes(entries: list[tuple[str, bytes | str]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buffer.getvalue()


def encrypted(data: bytes) -> bytes:
    """`data` (a zip) with every entry flagged as encrypted, as `zip -e` leaves it."""
    raw = bytearray(data)
    at = 0
    while (at := raw.find(b"PK\x03\x04", at)) >= 0:  # local headers: flags at +6
        struct.pack_into("<H", raw, at + 6, struct.unpack_from("<H", raw, at + 6)[0] | 1)
        at += 4
    at = 0
    while (at := raw.find(b"PK\x01\x02", at)) >= 0:  # central directory: flags at +8
        struct.pack_into("<H", raw, at + 8, struct.unpack_from("<H", raw, at + 8)[0] | 1)
        at += 4
    return bytes(raw)


def notebook_json(cells: list[dict]) -> str:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def solution_cell(source: str, grade_id: str = "add") -> dict:
    return {"cell_type": "code", "execution_count": None, "outputs": [], "source": source,
            "metadata": {"nbgrader": {"grade": False, "grade_id": grade_id, "locked": False,
                                      "schema_version": 3, "solution": True}}}


def huge_int_notebook(good: str) -> str:
    text = notebook_json([solution_cell(good)])
    return text.replace('"execution_count": null', '"execution_count": ' + "7" * 5000)


def nested_lambdas_notebook(depth: int = 5000) -> str:
    return notebook_json([solution_cell("f = " + "lambda: " * depth + "0\n")])


def magic_flood_notebook(lines: int = 100_000, label_chars: int = 2000) -> str:
    """Issue 18's 302 KB notebook: one cell, a long label, a magic line per line."""
    return notebook_json([solution_cell("%\n" * lines, grade_id="g" * label_chars)])


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path
