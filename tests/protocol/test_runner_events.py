"""autograder.protocol.runner_events: the runner's events as typed records on one JSON line each.

Every kind goes through `to_json` and `parse` unchanged, on the wire as the runner always wrote
it (`{"event": KIND, ...fields}`); every malformed line is refused with a MalformedEvent that
says what is wrong. What the supervisor makes of a stream is tests/grading/test_supervisor.py's;
the runner's real stream is tests/runner/test_runner.py's.
"""

from __future__ import annotations

import json

import pytest

from autograder.protocol import runner_events
from autograder.protocol.job import TestSpec as Spec  # (not "Test...": pytest would collect it)
from autograder.protocol.runner_events import (
    EVENTS,
    Calibration,
    Collected,
    Crashed,
    Done,
    Environment,
    Error,
    Event,
    Hung,
    Imports,
    MalformedEvent,
    Result,
    SandboxStarted,
    Start,
    parse,
)
from autograder.protocol.statuses import RUNNER_EVENTS

SPEC = Spec("test_toy.py::test_add", "add: adds", "add", 1.5, "visible", False, 8.0,
                ["add", "scale"], True)

ONE_OF_EACH: list[Event] = [
    Environment(environment={"gpus": 0, "torch": "2.5.1", "isolation": "namespaces",
                             "protections": ["pid namespace", "seccomp"]}),
    Calibration(seconds=0.123, factor=1.25),
    Collected(tests=[SPEC, Spec("t.py::b", "scale: b", "scale", 0.0, "hidden", True, 3.0)]),
    Start(nodeid="test_toy.py::test_add"),
    SandboxStarted(pid=4242),
    Result(nodeid="test_toy.py::test_add", status="failed", cause="raised",
           message="add raised ValueError: x",
           output="printed\n", output_cut=True, duration=0.25),
    Hung(function="add", seconds=8.0, test="add: adds", nodeid="test_toy.py::test_add"),
    Crashed(function="add", crashes=2, test="add: adds", nodeid="test_toy.py::test_add",
            message="your code exited with status 3 during add"),
    Imports(seconds=12.5),
    Error(message="invalid hidden tests:\n  - t.py::b: needs a docstring"),
    Done(exit_code=1),
]


def test_one_record_per_kind_of_the_vocabulary():
    assert [e.kind for e in ONE_OF_EACH] == list(RUNNER_EVENTS) == list(EVENTS)


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.kind)
def test_every_kind_round_trips(event):
    line = event.to_json()
    assert "\n" not in line
    back = parse(line)
    assert type(back) is type(event) and back == event
    assert parse(line.encode()) == event  # the supervisor reads bytes


def test_the_wire_format_is_the_runners_of_old():
    # The keys the runner always wrote, in that order, "event" first (and a result's cause).
    assert json.loads(Result(nodeid="n", status="passed", cause="passed", message="",
                             output="", output_cut=False, duration=1.5).to_json()) == {
        "event": "result", "nodeid": "n", "status": "passed", "cause": "passed", "message": "",
        "blocked_by": "", "output": "", "output_cut": False, "duration": 1.5}
    assert list(json.loads(Hung("f", 2.0, "f: t", "n").to_json())) == \
        ["event", "function", "seconds", "test", "nodeid"]
    assert json.loads(Done(0).to_json()) == {"event": "done", "exit_code": 0}
    collected = json.loads(Collected(tests=[SPEC]).to_json())
    assert collected["tests"] == [{
        "nodeid": "test_toy.py::test_add", "name": "add: adds", "function": "add",
        "points": 1.5, "visibility": "visible", "gpu": False, "timeout": 8.0,
        "uses": ["add", "scale"], "tolerant": True}]


def test_an_integer_is_a_float_where_a_float_is_declared():
    # json writes 0.0 as 0.0, but a hand-made line (or another writer) may say 0.
    event = parse('{"event": "result", "nodeid": "n", "status": "passed", "cause": "passed", '
                  '"message": "", "blocked_by": "", "output": "", "output_cut": false, '
                  '"duration": 0}')
    assert event.duration == 0.0 and type(event.duration) is float
    assert type(parse('{"event": "calibration", "seconds": 1, "factor": 2}').factor) is float


def line_with(kind: str, **changes) -> str:
    fields = json.loads(next(e for e in ONE_OF_EACH if e.kind == kind).to_json())
    for name, value in changes.items():
        if value is DROP:
            del fields[name]
        else:
            fields[name] = value
    return json.dumps(fields)


DROP = object()

MALFORMED = [
    # (the line, what the message must say)
    ("", "not JSON"),
    ("{\"event\": \"done\", ", "not JSON"),
    ("NaN-ish nonsense", "not JSON"),
    ('["result"]', "not a JSON object"),
    ('"done"', "not a JSON object"),
    ('{"exit_code": 0}', "unknown event None"),
    ('{"event": "surprise"}', "the runner sent an unknown event 'surprise'"),
    ('{"event": 7}', "unknown event 7"),
    ('{"event": ["done"], "exit_code": 0}', "unknown event ['done']"),
    (line_with("done", exit_code=DROP), "'done' event lacks the fields ['exit_code']"),
    (line_with("done", extra=1), "'done' event has unknown fields ['extra']"),
    (line_with("done", exit_code="0"), "'done' event: exit_code is '0', not int"),
    (line_with("done", exit_code=1.0), "exit_code is 1.0, not int"),
    (line_with("done", exit_code=True), "exit_code is True, not int"),
    (line_with("sandbox", pid=None), "'sandbox' event: pid is None, not int"),
    (line_with("start", nodeid=3), "'start' event: nodeid is 3, not str"),
    (line_with("error", message=["x"]), "'error' event: message is ['x'], not str"),
    (line_with("environment", environment=[]), "environment is [], not an object"),
    (line_with("calibration", seconds="fast"), "'calibration' event: seconds is 'fast', not "
                                               "float"),
    (line_with("calibration", factor=False), "factor is False, not float"),
    (line_with("result", status="excellent"),
     "'result' event: status is 'excellent', not one of ['passed', 'failed'"),
    (line_with("result", status=1), "status is 1, not one of"),
    (line_with("result", cause="bad luck"),
     "'result' event: cause is 'bad luck', not one of ['passed', 'wrong_result'"),
    (line_with("result", cause=DROP), "'result' event lacks the fields ['cause']"),
    (line_with("result", status="passed"),
     "status 'passed' does not follow from its cause 'raised'"),
    (line_with("result", output_cut=0), "output_cut is 0, not bool"),
    (line_with("result", duration=DROP), "'result' event lacks the fields ['duration']"),
    (line_with("result", output=DROP, message=DROP), "lacks the fields ['message', 'output']"),
    (line_with("hung", seconds=None), "'hung' event: seconds is None, not float"),
    (line_with("hung", test=DROP), "'hung' event lacks the fields ['test']"),
    (line_with("collected", tests={}), "'collected' event: tests is {}, not a list"),
    (line_with("collected", tests=["x"]), "tests[0] is 'x', not an object"),
    (line_with("collected", tests=[{"nodeid": "n"}]),
     "tests[0] lacks the fields ['name', 'function'"),
    (line_with("collected", tests=[{**json.loads(Collected([SPEC]).to_json())["tests"][0],
                                    "gpu": "yes"}]), "tests[0].gpu is 'yes', not bool"),
    (line_with("collected", tests=[{**json.loads(Collected([SPEC]).to_json())["tests"][0],
                                    "uses": ["add", 2]}]), "tests[0].uses[1] is 2, not str"),
    (line_with("collected", tests=[{**json.loads(Collected([SPEC]).to_json())["tests"][0],
                                    "secret": 1}]), "tests[0] has unknown fields ['secret']"),
]


@pytest.mark.parametrize(("line", "says"), MALFORMED, ids=range(len(MALFORMED)))
def test_every_malformed_line_is_refused_saying_why(line, says):
    with pytest.raises(MalformedEvent) as raised:
        parse(line)
    assert says in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_a_huge_malformed_line_is_shown_in_part():
    with pytest.raises(MalformedEvent) as raised:
        parse("[" + "1," * 100_000 + "1]")
    assert len(str(raised.value)) < 400 and "more)" in str(raised.value)


def test_json_nested_too_deep_is_malformed_not_a_crash():
    with pytest.raises(MalformedEvent, match="not JSON"):
        parse("[" * 100_000 + "]" * 100_000)


def test_the_records_module_is_standard_library_only():
    # The trusted parent reads events: no pytest, no torch (an import contract holds it too).
    source = open(runner_events.__file__).read()
    imports = {line.split()[1] for line in source.splitlines()
               if line.startswith(("import ", "from "))}
    assert {m.split(".")[0] for m in imports} <= {
        "__future__", "dataclasses", "functools", "json", "types", "typing", "autograder"}
