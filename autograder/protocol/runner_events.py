"""What a runner tells the trusted parent: one typed record per event, one JSON line each.

The runner (autograder.runner.suite and its pytest plugin) builds these records and writes
`event.to_json()` lines to its results pipe; the supervisor reads each line back with `parse`,
which checks the kind and every field's type against the record's declaration and raises
`MalformedEvent` on anything else. The runner is ours, not student code, so a malformed line is a
grader bug: the supervisor turns it into a GradingError that says what was wrong.

On the wire an event is `{"event": KIND, FIELD: VALUE, ...}`, the fields in declaration order.
Their kinds are statuses.RunnerEvent (the one vocabulary); each kind has exactly one record here,
which this module checks when it is imported.

Only the standard library (and grading's plain data): the trusted parent reads these.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

from autograder.protocol.job import TestSpec
from autograder.protocol.statuses import (
    RUNNER_EVENTS,
    RunnerEvent,
    TestCause,
    TestOutcome,
    outcome_of,
)


class MalformedEvent(ValueError):
    """A line from the runner that is not one of its events (a grader bug, never a student's)."""


@dataclass
class Event:
    """One event of the runner's stream; each kind below is a subclass."""

    kind: ClassVar[RunnerEvent]

    def to_json(self) -> str:
        """The event as one line of JSON (no line end)."""
        return json.dumps({"event": self.kind, **dataclasses.asdict(self)})


@dataclass
class Environment(Event):
    """Where grading runs (GPUs, versions, isolation), for the report; sent first."""

    kind: ClassVar[RunnerEvent] = "environment"
    environment: dict[str, Any]


@dataclass
class Calibration(Event):
    """This machine's calibration workload took `seconds`: budgets scale by `factor`."""

    kind: ClassVar[RunnerEvent] = "calibration"
    seconds: float
    factor: float


@dataclass
class Collected(Event):
    """Every hidden test as collected and validated, in collection order, points split."""

    kind: ClassVar[RunnerEvent] = "collected"
    tests: list[TestSpec]


@dataclass
class Start(Event):
    """The test `nodeid` starts (a runner that dies now takes this test with it)."""

    kind: ClassVar[RunnerEvent] = "start"
    nodeid: str


@dataclass
class SandboxStarted(Event):
    """A sandbox process started (its host pid): the parent kills what is left of it."""

    kind: ClassVar[RunnerEvent] = "sandbox"
    pid: int


@dataclass
class Result(Event):
    """How the test `nodeid` went: its outcome and why (`cause`, decided where it was seen:
    statuses.TestCause; for a test not run because a function hung or kept crashing, that
    function: `blocked_by`), the student's message and output, its time."""

    kind: ClassVar[RunnerEvent] = "result"
    nodeid: str
    status: TestOutcome
    cause: TestCause
    message: str
    blocked_by: str = ""
    output: str = ""
    output_cut: bool = False
    duration: float = 0.0


@dataclass
class Hung(Event):
    """`function` did not finish within `seconds` in the test `test` (`nodeid`), the first to
    hang: later tests that need it are not run."""

    kind: ClassVar[RunnerEvent] = "hung"
    function: str
    seconds: float
    test: str
    nodeid: str


@dataclass
class Crashed(Event):
    """A call or scenario of `function` crashed (its process ended), the `crashes`-th time in
    this grading; `test`, `nodeid` and `message` are those of its first crash. At the
    assignment's crash_limit, later tests that need it are not run."""

    kind: ClassVar[RunnerEvent] = "crashed"
    function: str
    crashes: int
    test: str
    nodeid: str
    message: str


@dataclass
class Imports(Event):
    """Imports of the student's module (and failed multi-process attempts) have taken
    `seconds` in all so far in this grading, against timeouts.imports."""

    kind: ClassVar[RunnerEvent] = "imports"
    seconds: float


@dataclass
class Error(Event):
    """Grading cannot go on, through no fault of the student: the hidden tests are broken (not
    collected, or invalid), or the sandbox cannot be isolated or started. The instructor's."""

    kind: ClassVar[RunnerEvent] = "error"
    message: str


@dataclass
class Done(Event):
    """The suite finished; pytest's exit code."""

    kind: ClassVar[RunnerEvent] = "done"
    exit_code: int


EVENTS: dict[str, type[Event]] = {cls.kind: cls for cls in (
    Environment, Calibration, Collected, Start, SandboxStarted, Result, Hung, Crashed, Imports,
    Error, Done)}
if tuple(EVENTS) != RUNNER_EVENTS:  # one record per kind of the vocabulary, in its order
    raise ImportError(f"runner events {tuple(EVENTS)} differ from statuses' {RUNNER_EVENTS}")


def parse(line: str | bytes) -> Event:
    """The event a runner's line holds; MalformedEvent saying what is wrong otherwise."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise MalformedEvent(f"the runner sent a line that is not JSON ({exc}): "
                             f"{_shown(line)}") from None
    if not isinstance(message, dict):
        raise MalformedEvent(f"the runner sent a line that is not a JSON object: {_shown(line)}")
    kind = message.pop("event", None)
    cls = EVENTS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MalformedEvent(f"the runner sent an unknown event {kind!r}")
    event = _build(cls, message, f"the runner's {kind!r} event", ": ")
    if isinstance(event, Result) and event.status != outcome_of(event.cause):
        raise MalformedEvent(f"the runner's 'result' event: status {event.status!r} does not "
                             f"follow from its cause {event.cause!r}")
    return event


def _build(cls: type, values: dict, where: str, joint: str = ".") -> Any:
    """An instance of the dataclass `cls` from `values`, each checked against its field (named
    in messages as `where`, `joint` and the field's name)."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise MalformedEvent(f"{where} has unknown fields {unknown}")
    missing = [name for name in names if name not in values]  # defaults are for our side only
    if missing:
        raise MalformedEvent(f"{where} lacks the fields {missing}")
    return cls(**{name: _checked(value, hints[name], f"{where}{joint}{name}")
                  for name, value in values.items()})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _checked(value: Any, hint: Any, where: str) -> Any:
    """`value` as the type `hint` declares (an int where a float is declared becomes a float);
    MalformedEvent if it is not one."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin is Literal:
        if value not in args or not isinstance(value, str):
            raise MalformedEvent(f"{where} is {_shown(value)}, not one of {list(args)}")
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _checked(value, option, where)
            except MalformedEvent:
                pass
        raise MalformedEvent(f"{where} is {_shown(value)}, not {_name(hint)}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise MalformedEvent(f"{where} is {_shown(value)}, not an object")
        return _build(hint, dict(value), where)
    if origin is list:
        if not isinstance(value, list):
            raise MalformedEvent(f"{where} is {_shown(value)}, not a list")
        return [_checked(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise MalformedEvent(f"{where} is {_shown(value)}, not an object")
        return {key: _checked(item, args[1], f"{where}[{key!r}]") if args else item
                for key, item in value.items()}
    if hint is float and type(value) in (int, float):
        return float(value)
    if hint is type(None) and value is None:
        return value
    if hint in (str, int, bool) and type(value) is hint:  # True is no int here, 1 no bool
        return value
    raise MalformedEvent(f"{where} is {_shown(value)}, not {_name(hint)}")


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _shown(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more)"
