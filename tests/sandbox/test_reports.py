"""autograder.sandbox.reports: a probe's report as a hidden test reads it.

A field, item or attribute the report lacks is the student's failure (a ReportError, which is
a SandboxFailure) with a message naming it; the containers behave as dicts and lists
otherwise, are read-only, and travel back into a sandbox (pickled) as plain ones; a TypeError
or AttributeError of a check is the report's only when the value it used came from a report
on that line (`Reads.blame`). End to end, through the runner: tests/grading/test_probe_reports.py.
"""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch

from autograder.sandbox.client import RankResults, SandboxFailure
from autograder.sandbox.reports import (
    MissingField,
    MissingItem,
    NoAttribute,
    Reads,
    Report,
    ReportError,
    ReportList,
    WrongKind,
    as_report,
    rank_reports,
)

SENT = {"after": [{"name": "", "type": "ManyNorms"},
                  {"name": "bn", "type": "SyncBatchNorm"}],
        "state": {"fc1.weight": torch.ones(2)}, "pair": (1, {"x": 2}), "n": 3, "none": None}


def test_it_reads_as_the_dicts_and_lists_it_was_sent_as():
    report = as_report(copy.deepcopy(SENT))
    assert isinstance(report, dict) and isinstance(report["after"], list)
    assert type(report) is Report and type(report["after"]) is ReportList
    assert report["after"] == SENT["after"] and report["n"] == 3
    assert report.get("missing") is None and report.get("missing", 7) == 7
    assert "after" in report and "missing" not in report
    assert sorted(report) == sorted(SENT) and len(report["after"]) == 2
    assert [row["type"] for row in report["after"]] == ["ManyNorms", "SyncBatchNorm"]
    assert report["after"][-1]["name"] == "bn" and report["after"][:1] == SENT["after"][:1]
    assert isinstance(report["pair"], tuple) and report["pair"][1]["x"] == 2
    assert repr(report["after"]) == repr(SENT["after"])
    assert json.loads(json.dumps({k: v for k, v in report.items() if k != "state"}))


def test_a_missing_field_is_the_students_failure_naming_it():
    report = as_report(copy.deepcopy(SENT))
    with pytest.raises(MissingField) as caught:
        report["after"][1]["process_group_is_sentinel"]
    error = caught.value
    assert isinstance(error, ReportError) and isinstance(error, SandboxFailure)
    assert isinstance(error, KeyError)  # `except KeyError` still catches it
    assert str(error).startswith("the scenario's report has no field "
                                 "'process_group_is_sentinel' (in after[1]): your code gave")
    with pytest.raises(MissingField, match=r"has no field 'fc2.bias' \(in state\)"):
        report["state"]["fc2.bias"]
    ranks = rank_reports(RankResults([{"a": 1}, {"b": 2}], ["store"]))
    assert ranks.stores == ["store"] and type(ranks) is RankResults  # the same list, wrapped
    with pytest.raises(MissingField, match=r"^rank 1's report has no field 'a': "):
        ranks[1]["a"]


def test_a_missing_item_a_list_read_by_name_and_a_missing_attribute_are_the_students():
    report = as_report(copy.deepcopy(SENT))
    with pytest.raises(MissingItem, match=r"has no item 2 in after \(it has 2\)"):
        report["after"][2]
    with pytest.raises(WrongKind, match="holds a list of 2 items at after where this check "
                                        "needs a mapping with field 'name'"):
        report["after"]["name"]
    with pytest.raises(NoAttribute, match=r"holds a list of 2 items at after where this check "
                                          r"needs a value with \.double"):
        report["after"].double()
    with pytest.raises(NoAttribute, match=r"holds a mapping at state where this check needs "
                                          r"a value with \.shape"):
        assert report["state"].shape
    # Library code that probes for an attribute goes on as with a plain container.
    assert not hasattr(report["after"], "dtype") and getattr(report, "shape", None) is None
    assert not hasattr(report, "__array__")


def test_it_is_read_only_and_travels_back_into_a_sandbox_as_plain_containers():
    report = as_report(copy.deepcopy(SENT))
    for change in (lambda: report.__setitem__("n", 4), lambda: report.pop("n"),
                   lambda: report.update(n=4), lambda: report["after"].append(1),
                   lambda: report["after"].sort(), lambda: report["after"].__setitem__(0, 1)):
        with pytest.raises(TypeError, match="read-only") as caught:
            change()
        assert not isinstance(caught.value, ReportError)  # a test that writes: its own bug
    assert report["n"] == 3 and len(report["after"]) == 2
    copied = dict(report)
    copied["n"] = 4  # a copy can change
    for again in (pickle.loads(pickle.dumps(report)), copy.deepcopy(report)):
        assert type(again) is dict and type(again["after"]) is list
        assert type(again["after"][0]) is dict and again["after"] == SENT["after"]
    assert b"autograder" not in pickle.dumps(report)  # a sandbox can unpickle it


def reads_of(sent):
    reads = Reads()
    return as_report(sent, reads=reads), reads


WHY = ("your code gave the scenario something it could not describe (an object that is not "
       "what it claims to be, say), so this check could not be made")


def test_a_check_that_cannot_use_a_value_it_read_blames_the_report():
    report, reads = reads_of({"output": 5, "rows": "SyncBatchNorm", "none": None})
    with pytest.raises(TypeError) as caught:
        torch.allclose(report["output"], torch.ones(1))
    assert reads.blame(caught.value) == (
        f"the scenario's report holds an int at output, which this check cannot use: {WHY}")
    with pytest.raises(AttributeError) as caught:
        report["output"].double()
    assert reads.blame(caught.value).startswith("the scenario's report holds an int at output,")
    with pytest.raises(TypeError) as caught:  # string indices must be integers, not 'str'
        [row["type"] for row in report["rows"]]
    assert reads.blame(caught.value).startswith("the scenario's report holds a str at rows,")
    with pytest.raises(TypeError) as caught:
        len(report["none"])
    assert reads.blame(caught.value).startswith("the scenario's report holds None at none,")
    with pytest.raises(TypeError) as caught:
        torch.equal(report.get("output"), torch.ones(1))
    assert reads.blame(caught.value).startswith("the scenario's report holds an int at output,")


def helper(value):
    return value.shape


def test_a_grader_bug_stays_the_graders():
    report, reads = reads_of({"flag": True, "n": 3, "tensors": [torch.ones(1)]})
    with pytest.raises(TypeError) as caught:  # its own arithmetic, on a line that read a report
        assert report["flag"] and (1 + "a")
    assert reads.blame(caught.value) is None
    with pytest.raises(KeyError) as caught:
        assert report["flag"] and {}["missing"]
    assert reads.blame(caught.value) is None
    with pytest.raises(AttributeError) as caught:  # another object's attribute
        assert report["flag"] and torch.zeros(1).nope
    assert reads.blame(caught.value) is None
    with pytest.raises(TypeError) as caught:  # nothing read from a report on this line
        torch.allclose(5, torch.ones(1))
    assert Reads().blame(caught.value) is None and reads.blame(caught.value) is None
    # In a helper the test called, an AttributeError counts only of the very object read,
    # and only when it is no value others may share (None, a bool, a number, a string).
    with pytest.raises(AttributeError) as caught:
        helper(report["n"])
    assert reads.blame(caught.value) is None
    with pytest.raises(AttributeError) as caught:
        helper(report["tensors"])
    assert isinstance(caught.value, NoAttribute)  # the list itself said so
    assert reads.blame(caught.value) is None  # already the student's: nothing to decide
    obj = torch.nn.Linear(1, 1)
    report, reads = reads_of({"model": obj})
    with pytest.raises(AttributeError) as caught:
        helper(report["model"])
    assert reads.blame(caught.value).startswith(
        "the scenario's report holds a Linear at model, which this check cannot use")
