"""What a probe sent back, as a hidden test reads it: a read-only view whose gaps are the
student's, not the grader's.

A probe builds its report in the sandbox, next to student code that may have changed what the
probe could describe (an object of another class than it claims to be, a patched function) or
rewritten the probe itself. So a field a check reads may be missing, or hold another kind of
value than the reference solution makes it hold. Before, the test then died of a KeyError or a
TypeError, and the student was told "grader error (tell your instructor)".

`as_report()` and `rank_reports()` wrap what `student.probe` and `student.run_ranks` return:
mappings become `Report` (a read-only dict), lists `ReportList` (a read-only list), tuples stay
tuples of wrapped items, every other value (numbers, strings, tensors, module snapshots) is
left as it is. Reading them as a check does raises a `ReportError`, which is a `SandboxFailure`
(the test fails as the student's, with its message) and also the built-in error Python would
have raised (KeyError, IndexError, TypeError, AttributeError), so `hasattr`, `getattr(x, n,
default)` and `except KeyError` behave as with plain containers:

- a missing field, `report["x"]`: "the scenario's report has no field 'x'";
- an item past the end of a list, `report["ranks"][3]` of two;
- a list read by a field name, or an attribute that a mapping or a list does not have
  (`report["output"].double()` where the output is a list).

A value (a number, None, a string, a tensor) has no such hook, so a value of the wrong type
shows only when the check uses it: `Reads.blame` decides whether a TypeError or AttributeError
that ended a test was the use of a value read from a report (see there).

Everything else stays the grader's error, as it should: a KeyError of the test's own dict, a
TypeError of its own arithmetic, a test that writes into a report (read-only: TypeError). A
test that reads a field no probe reports (a typo) fails on the reference solution too, which
the release self-check refuses before any student is graded.

`type(x) is dict` (or `list`) is False for a report's containers: tests check with
`isinstance` or compare with `==`. Pickled (sent back into the sandbox as an argument) or
deep-copied, they become plain dicts and lists.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from autograder.sandbox.client import SandboxFailure

_WHY = ("your code gave the scenario something it could not describe (an object that is not "
        "what it claims to be, say), so this check could not be made")


class ReportError(SandboxFailure):
    """A check read what a probe's report does not hold: the student's failure."""

    def __init__(self, message: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        self.message = message

    def __str__(self) -> str:
        return self.message


class MissingField(ReportError, KeyError):
    """A field the report does not have."""


class MissingItem(ReportError, IndexError):
    """An item past the end of a list of the report."""


class WrongKind(ReportError, TypeError):
    """A list of the report read by a field name."""


class NoAttribute(ReportError, AttributeError):
    """An attribute a report's mapping or list does not have (`.double()` of a tensor, say)."""


class Reads:
    """The values the checks of one test read from reports, by the line of code that read
    them (the last few of each line: a loop reads one line many times), so that a TypeError
    or AttributeError that ends the test can be traced to a value of a report (`blame`)."""

    KEPT = 8

    def __init__(self) -> None:
        self._by_line: dict[tuple[str, int], deque] = {}

    def note(self, what: str, path: str, value: Any) -> None:
        frame = sys._getframe(2)  # the caller of Report.__getitem__ or .get
        where = (frame.f_code.co_filename, frame.f_lineno)
        seen = self._by_line.get(where)
        if seen is None:
            seen = self._by_line[where] = deque(maxlen=self.KEPT)
        seen.append((what, path, value))

    def blame(self, exc: BaseException) -> str | None:
        """The student's message when `exc` (which ended a test) was a check using a value
        read from a report that is not of a type it can use; None when it was not.

        The line where the error arose (the innermost of the traceback) must have read the
        value: an AttributeError's object must be that very value, a TypeError's message must
        name its type (`'NoneType' object is not subscriptable`, `must be Tensor, not int`).
        On the lines that called it (a helper of the test's), only an AttributeError counts,
        of that very object, and not of None, a bool, a number or a string (which other
        values may be, too)."""
        if isinstance(exc, ReportError) or not isinstance(exc, (TypeError, AttributeError)):
            return None
        lines = []
        tb = exc.__traceback__
        while tb is not None:
            lines.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
            tb = tb.tb_next
        obj = getattr(exc, "obj", _NOTHING) if isinstance(exc, AttributeError) else _NOTHING
        text = str(exc)
        for depth, line in enumerate(reversed(lines)):
            for what, path, value in reversed(self._by_line.get(line, ())):
                if obj is not _NOTHING:
                    if value is obj and (depth == 0 or not isinstance(
                            value, (type(None), bool, int, float, str))):
                        return _unusable(what, path, value)
                elif depth == 0 and _names_type(text, value):
                    return _unusable(what, path, value)
        return None


_NOTHING = object()


def _names_type(text: str, value: Any) -> bool:
    import re

    name = type(value).__name__
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def _unusable(what: str, path: str, value: Any) -> str:
    at = f" at {path}" if path else ""
    return f"{what} holds {describe(value)}{at}, which this check cannot use: {_WHY}"


def describe(value: Any) -> str:
    """A value's kind, in words, for a message."""
    if value is None:
        return "None"
    if isinstance(value, Report):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        kind = "a list" if isinstance(value, list) else "a tuple"
        return f"{kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    name = type(value).__name__
    if name == "Tensor":
        return f"a tensor of shape {list(value.shape)}"
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _child(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _read_only(self: Any, *args: Any, **kwargs: Any) -> None:
    raise TypeError("a probe's report is read-only (dict(report) or list(report) is a copy "
                    "that can be changed)")


class Report(dict):
    """A mapping of a probe's report: a read-only dict whose missing fields are the
    student's failure (MissingField)."""

    __slots__ = ("_what", "_path", "_reads")

    def __init__(self, items: dict, what: str, path: str, reads: Reads | None) -> None:
        dict.__init__(self, items)
        self._what, self._path, self._reads = what, path, reads

    def __getitem__(self, key: Any) -> Any:
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            at = f" (in {self._path})" if self._path else ""
            raise MissingField(f"{self._what} has no field {key!r}{at}: {_WHY}") from None
        if self._reads is not None:
            self._reads.note(self._what, _child(self._path, key), value)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            return default
        value = dict.__getitem__(self, key)
        if self._reads is not None:
            self._reads.note(self._what, _child(self._path, key), value)
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        at = f" at {self._path}" if self._path else ""
        raise NoAttribute(f"{self._what} holds a mapping{at} where this check needs a value "
                          f"with .{name}: {_WHY}", name=name, obj=self)

    def __reduce__(self) -> tuple:
        return (dict, (dict(self),))

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only


class ReportList(list):
    """A list of a probe's report: read-only; an item past its end, or a field name, is the
    student's failure (MissingItem, WrongKind)."""

    __slots__ = ("_what", "_path", "_reads")

    def __init__(self, items: list, what: str, path: str, reads: Reads | None) -> None:
        list.__init__(self, items)
        self._what, self._path, self._reads = what, path, reads

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return ReportList(list.__getitem__(self, index), self._what,
                              f"{self._path}[{index.start or ''}:{index.stop or ''}]",
                              self._reads)
        where = self._path or "it"
        if isinstance(index, str):
            raise WrongKind(f"{self._what} holds a list of {len(self)} items at {where} where "
                            f"this check needs a mapping with field {index!r}: {_WHY}")
        try:
            value = list.__getitem__(self, index)
        except IndexError:
            raise MissingItem(f"{self._what} has no item {index} in {where} (it has "
                              f"{len(self)}): {_WHY}") from None
        if self._reads is not None:
            self._reads.note(self._what, _child(self._path, index), value)
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        at = f" at {self._path}" if self._path else ""
        raise NoAttribute(f"{self._what} holds a list of {len(self)} items{at} where this "
                          f"check needs a value with .{name}: {_WHY}", name=name, obj=self)

    def __reduce__(self) -> tuple:
        return (list, (list(self),))

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = _read_only
    sort = reverse = __iadd__ = __imul__ = _read_only


def as_report(value: Any, what: str = "the scenario's report", reads: Reads | None = None,
              path: str = "") -> Any:
    """`value` (a decoded reply) with its dicts and lists made Report and ReportList."""
    kind = type(value)
    if kind is dict:
        return Report({k: as_report(v, what, reads, _child(path, k)) for k, v in value.items()},
                      what, path, reads)
    if kind is list:
        return ReportList([as_report(v, what, reads, _child(path, i))
                           for i, v in enumerate(value)], what, path, reads)
    if kind is tuple:
        return tuple(as_report(v, what, reads, _child(path, i)) for i, v in enumerate(value))
    return value


def rank_reports(results: list, reads: Reads | None = None) -> list:
    """Each rank's result of a `run_ranks` scenario made a report ("rank 1's report"), in
    place: the list itself (and what else it carries) is the one `Sandbox.run_ranks` made."""
    ranks = getattr(results, "ranks", range(len(results)))
    results[:] = [as_report(r, f"rank {rank}'s report", reads)
                  for rank, r in zip(ranks, results, strict=True)]
    return results
