"""Make text from submissions inert, and keep lists of it bounded: the one source for both.

Anything a student controls (file and folder names, notebook labels, answers, messages and output
of their code) may carry terminal escapes (clear screen, cursor moves, window titles, concealed
text), carriage returns that overwrite a printed line, or bidirectional overrides that reorder
what a reader sees. `inert` escapes all of them into visible text (`\\x1b`, `\\r`, `\\u202e`),
so the same string is safe in a terminal, results.json, Markdown and HTML, and still says what
was there. It is applied where submission-derived text enters a `Report` (results.build_report)
and again at every print to a terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Which characters are unsafe, and their escapes: check.py's, which students run alone.
from autograder.student_files.check import UNSAFE, UNSAFE_IN_A_LINE, escape

MAX_WARNINGS = 40  # notes in one report; then one "... and N more" line
MAX_WARNING_CHARS = 600  # one note
MAX_LABEL_CHARS = 80  # a file name, a notebook label, quoted inside a message

_MORE = re.compile(r"\.\.\. and (\d+) more\Z")


def inert(text: str, single_line: bool = False) -> str:
    """`text` with every control character and bidi control written out as a visible escape.

    New lines and tabs stay unless `single_line` (names and labels, which must not start a
    line a reader would take for the grader's own). Idempotent: an escape is plain text.
    """
    if not isinstance(text, str):
        text = str(text)
    return (UNSAFE_IN_A_LINE if single_line else UNSAFE).sub(escape, text)


def label(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A student-chosen name (file, folder, cell label) fit to quote: one line, inert, short."""
    text = inert(text, single_line=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int) -> str:
    """At most `limit` characters of `text`; when cut, cut at a word boundary (unless the last
    word is very long) and end with an ellipsis. Idempotent: a clipped text fits its limit."""
    if len(text) <= limit:
        return text
    kept = text[:max(limit - 1, 0)]
    boundary = max(kept.rfind(" "), kept.rfind("\n"))
    if boundary >= limit * 0.6:  # a word boundary not too far back; else cut inside the word
        kept = kept[:boundary]
    return kept.rstrip(" \n,;:") + ELLIPSIS


ELLIPSIS = "\u2026"
MAX_MESSAGE = 4000  # characters of one message, whatever produced it (a forged reply, say)


def bounded(lines: Iterable[str], count: int = MAX_WARNINGS,
            length: int = MAX_WARNING_CHARS) -> list[str]:
    """The first `count` lines, each inert and clipped to `length`, then one line saying how
    many more there were. Consumes `lines` lazily, so a generator of millions costs little."""
    kept: list[str] = []
    more = 0
    for line in lines:
        earlier = _MORE.match(line)
        if earlier:  # bounded once already: add up, so applying it twice changes nothing
            more += int(earlier.group(1))
        elif len(kept) < count:
            kept.append(clip(inert(line), length))
        else:
            more += 1
    if more:
        kept.append(f"... and {more} more")
    return kept
