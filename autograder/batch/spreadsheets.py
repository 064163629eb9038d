"""Tables written so that spreadsheet programs open them right: names intact, ids kept as text.

A `Table` holds text cells (`str`) and number cells (`Decimal`, already rounded; `None` for a
number that is blank). It is written two ways:

- `write_csv`: UTF-8 with a byte-order mark (Excel reads a CSV without one in the system's
  ANSI code page, so "Björn" became "BjÃ¶rn"), every text cell quoted and numbers bare. A text
  cell that would start a formula (`=`, `+`, `-`, `@`, a tab or a carriage return) gets a
  leading `'`, since names, folder names and reasons can come from students.
  Excel still reads a quoted "03078615" as the number 3078615 when it opens a CSV; LibreOffice
  keeps it as text with "Format quoted field as text" ticked in its import dialog. That is why
  the same table is also written as
- `write_xlsx`: a workbook (openpyxl) whose text cells are strings formatted as Text (`@`), so
  ids keep their leading zeros, nothing is a formula, and an edit stays text; numbers are numbers.

Either way control and bidirectional characters become visible escapes, on one line
(autograder.project.inert), and both files are replaced atomically.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from autograder.project.inert import inert

Cell = str | Decimal | None
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
TEXT_FORMAT = "@"  # a spreadsheet's Text number format
MAX_COLUMN_WIDTH = 40  # characters, for the widths the workbook starts with


@dataclass
class Table:
    header: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    sheet: str = "grades"  # the worksheet's title in the workbook


def decimal(value: float, digits: int = 2) -> Decimal:
    """A number rounded as the sheets show it: at most `digits` decimals, no trailing zeros."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return Decimal("0" if text in ("", "-0") else text)


def plain_text(value: object) -> str:
    """A text cell's content: one line, control characters shown as escapes."""
    return inert(str(value), single_line=True)


def csv_text(value: object) -> str:
    """A text cell for a CSV, which a spreadsheet will not run as a formula."""
    value = str(value)
    return plain_text("'" + value if value.startswith(FORMULA_START) else value)


def write_csv(table: Table, path: Path) -> None:
    rows = [[csv_text(c) for c in table.header]]
    rows += [[c if isinstance(c, Decimal) or c is None else csv_text(c) for c in row]
             for row in table.rows]
    tmp = _temporary(path)
    # QUOTE_NONNUMERIC quotes every cell but numbers (Decimal included); None is a blank "".
    with tmp.open("w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle, quoting=csv.QUOTE_NONNUMERIC).writerows(rows)
    os.replace(tmp, path)


def write_xlsx(table: Table, path: Path) -> None:
    from openpyxl import Workbook
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    book = Workbook()
    sheet = book.active
    sheet.title = table.sheet[:31]  # Excel's limit
    widths = [len(h) for h in table.header]
    for r, row in enumerate([table.header, *table.rows], 1):
        for c, value in enumerate(row, 1):
            if value is None or value == "":
                continue
            cell = sheet.cell(r, c)
            if isinstance(value, Decimal):
                cell.value = int(value) if value == value.to_integral_value() else float(value)
            else:
                text = plain_text(value)
                cell.value = text
                # A string, never a formula ("=HYPERLINK(...)" as a name stays text).
                cell.data_type = "s"
                cell.number_format = TEXT_FORMAT
                widths[c - 1] = max(widths[c - 1], len(text))
    for c in range(1, len(table.header) + 1):
        sheet.cell(1, c).font = Font(bold=True)
        sheet.column_dimensions[get_column_letter(c)].width = min(widths[c - 1] + 2,
                                                                  MAX_COLUMN_WIDTH)
    sheet.freeze_panes = "B2"  # the header row and the first column stay in view
    tmp = _temporary(path)
    book.save(tmp)
    os.replace(tmp, path)


def _temporary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp")
