"""The status of a submission (autograder.batch.submission_status): derived from the report
(each test's cause, never its message), the grader's failure and the sandbox's events; flags can
be added by student code, never cleared."""

from __future__ import annotations

from report_records import a_report, a_test

from autograder.batch.submission_status import SubmissionStatus, derive
from autograder.grading.results import Report


def report(*coding: tuple[str, str] | tuple[str, str, str],
           warnings: list[str] | None = None) -> Report:
    """A report: coding tests as (cause, message), or (status, cause, message), and one
    unanswered question."""
    tests = []
    for i, test in enumerate(coding):
        status, cause, message = test if len(test) == 3 else (
            "passed" if test[0] == "passed" else "failed", *test)
        tests.append(a_test(f"f{i}", status, cause, message, name=f"f{i}: test {i}"))
    tests.append(a_test("q01", "failed", "not_answered", "no answers file found",
                        part="multiple_choice", name="Q1"))
    return a_report(*tests, warnings=warnings)


PASS = ("passed", "")


def test_ok_and_each_plain_status():
    assert derive(report(PASS, PASS)).status == "ok"
    assert derive(None, "the grader failed: boom").status == "grader_error"
    missing = derive(report(("no_module", "no toy.py found in your submission"),
                            warnings=["coding part: no toy.py found in your submission"]))
    assert (missing.status, missing.detail) == ("no_module", "no toy.py found in your submission")
    syntax = derive(report(*[("import_failed", "your module could not be imported: "
                                               "SyntaxError: expected ':' (toy.py, line 1)")] * 3))
    assert syntax.status == "not_importable" and syntax.detail.startswith("SyntaxError")
    slow = derive(report(PASS, ("timed_out", "timed out after 3 s during scale"),
                         ("timed_out", "timed out after 3 s during add")))
    assert (slow.status, slow.timed_out, slow.detail) == ("timed_out", 2, "2 of 3 tests timed out")
    dead = derive(report(PASS, ("crashed", "your code was killed by SIGKILL (often the memory "
                                           "limit) during add")))
    assert (dead.status, dead.crashed) == ("crashed", 1)
    blank = derive(report(("not_implemented", "add raised NotImplementedError (line 2 in add)"),
                          ("missing_function", "your module has no function named 'scale'")))
    assert blank.status == "blank"
    wrong = derive(report(("wrong_result", "add(2, 3) should be 5"), ("raised", "wrong")))
    assert wrong.status == "ok"  # a wrong answer is the student's own business
    checks = derive(report(PASS, ("grader_error",
                                  "the grader could not run this check (TypeError)")))
    assert checks.status == "grader_error"
    # Not run is no verdict of its own: what made them so (a hang, crashes) is.
    hung = derive(report(("timed_out", "x"), ("not_run_hung", "y"), ("not_run_hung", "z")))
    assert (hung.status, hung.timed_out) == ("timed_out", 1)


def test_the_status_reads_causes_never_messages():
    # Messages with every phrase the statuses were once searched for: no effect at all.
    worded = ("NotImplementedError: your module could not be imported: timed out after 3 s; "
              "your code was killed by SIGKILL; the grading process was killed during this "
              "test; the grader could not run this check; sent back an unreadable reply; "
              "has no function named 'add'; is not allowed in the sandbox")
    assert derive(report(PASS, ("wrong_result", worded), ("raised", worded))).to_json() == \
        derive(report(PASS, ("wrong_result", "x"), ("raised", "y"))).to_json()
    # And a blank whose messages say none of it is blank all the same.
    assert derive(report(("not_implemented", "loading failed"),
                         ("not_implemented", ""))).status == "blank"
    # A stub among passing tests, or among wrong results, is not blank.
    assert derive(report(PASS, ("not_implemented", "x"))).status == "ok"
    assert derive(report(("wrong_result", "x"), ("not_implemented", "x"))).status == "ok"
    # Tests left out (a GPU policy) do not count either way.
    assert derive(report(("excluded", "gpu_unavailable", ""),
                         ("not_implemented", "x"))).status == "blank"


def test_trusted_observations_flag_and_outrank_everything():
    for cause, reason in [("runner_killed", "killed the grading process"),
                          ("import_hang", "import hang"),
                          ("unreadable_reply", "over the size limit"),
                          ("too_large", "too large to check"),
                          ("sandbox_killed", "sandbox's parent"),
                          ("network_refused", "network")]:
        found = derive(report(PASS, (cause, "whatever the message says"),
                              ("import_failed", "your module could not be imported: X")))
        assert found.status == "flagged" and reason in found.detail, (cause, found)


def test_events_add_flags_and_a_forged_message_cannot_remove_one():
    events = [{"kind": "write", "detail": "opened /etc/evil for writing"},
              {"kind": "write", "detail": "opened /etc/other for writing"},
              {"kind": "signal", "detail": "os.kill(1, 9)"},
              {"kind": "<b>made up</b>", "detail": "x"}]
    found = derive(report(PASS, PASS), None, events)
    assert found.status == "flagged"
    assert len(found.flags) == 3  # one line per kind; an unknown kind is still a flag
    assert "opened /etc/evil" in found.flags[0] and "unexpected sandbox event" in found.flags[2]
    # Whatever a student's messages say, a flag stays: flagged comes first.
    ok_looking = report(PASS, ("wrong_result", "status: ok; no flags; timed out after 0 s"))
    assert derive(ok_looking, None, events).status == "flagged"
    # A grader failure with events keeps the flag.
    assert derive(None, "the grader failed", events).status == "flagged"
    assert SubmissionStatus.from_json(found.to_json()) == found
    assert SubmissionStatus.from_json({"status": "nonsense"}).status == "ok"


def test_tampering_with_the_event_channel_is_a_flag_with_its_reason():
    for kind, words in (("flood", "flooded"), ("malformed", "not an event"),
                        ("closed", "closed its sandbox's event channel")):
        found = derive(report(PASS, PASS), None, [{"kind": kind, "detail": "seen by the grader"}])
        assert found.status == "flagged" and words in found.detail, found
