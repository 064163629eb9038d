"""Run every dp_basics snippet on this machine and check it does what the bank says it does.

Each snippet runs in its own fresh `python -I` process (two at a time) and is compared with its
expectation for this machine: no_gpu, one_gpu or multi_gpu. A CPU-only run checks the no_gpu
column; GPU graders check theirs. Then the key is checked against those recorded outcomes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from repo_project import REPO

from autograder.project.question_bank import Outcome, Question, bank_path, load_bank
from autograder.questions.snippets import (
    SnippetOutcome,
    check_snippet,
    compare_outcome,
    current_environment,
    run_snippet,
)

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

BANK = load_bank(bank_path(REPO, "dp_basics"), REPO.schemas)
SNIPPET_QUESTIONS = [q for q in BANK.questions if q.snippet is not None]


@pytest.fixture(scope="module")
def snippet_problems() -> dict[str, list[str]]:
    env = current_environment()
    with ThreadPoolExecutor(2) as pool:  # each snippet is a process importing torch: ~2 s
        problems = list(pool.map(lambda q: check_snippet(q, env, timeout=120), SNIPPET_QUESTIONS))
    return {q.id: p for q, p in zip(SNIPPET_QUESTIONS, problems, strict=True)}


@pytest.mark.parametrize("qid", [q.id for q in SNIPPET_QUESTIONS])
def test_snippet_does_what_the_bank_says(qid: str, snippet_problems: dict[str, list[str]]) -> None:
    assert snippet_problems[qid] == []


def _stdout(q: Question, env: str) -> str:
    assert q.snippet is not None
    outcome = q.snippet.expect[env]
    assert outcome.stdout is not None, f"{q.id}: expected a printed result on {env}"
    return outcome.stdout


# The machine each stem names, and how the keyed option reads the recorded outcome there.
# Ties the key to the snippets: if an expectation changes, the key has to be revisited.
def test_key_agrees_with_the_recorded_outcomes() -> None:
    q = BANK.by_id
    assert q["q02"].answer == ("D",)
    assert q["q02"].options["D"] == _stdout(q["q02"], "no_gpu")

    not_on_device0 = q["q04"]
    assert not_on_device0.answer == ("A",)
    assert not_on_device0.snippet and not_on_device0.snippet.expect["multi_gpu"].raises == (
        "RuntimeError",)
    assert not_on_device0.options["A"].startswith("A RuntimeError")

    wrapper_attribute = q["q06"]
    (letter,) = wrapper_attribute.answer
    outcome = wrapper_attribute.snippet.expect["no_gpu"]
    assert outcome.raises == ("AttributeError",)
    assert wrapper_attribute.options[letter] == (
        "It prints 3, then raises AttributeError: "
        + outcome.match.strip("^$").replace("\\", ""))

    no_group = q["q08"]
    (letter,) = no_group.answer
    assert no_group.snippet.expect["no_gpu"].raises == ("ValueError",)
    assert no_group.options[letter] == (
        "ValueError: " + no_group.snippet.expect["no_gpu"].match.replace("\\", ""))

    running_stats = q["q16"]  # the snippet's second line: the first chunk's update, the batch's
    assert running_stats.answer == ("A",)
    for env in ("no_gpu", "one_gpu", "multi_gpu"):
        first_chunk, whole_batch = _stdout(running_stats, env).splitlines()[1].split()
        assert running_stats.options["A"] == first_chunk
        assert running_stats.options["B"] == whole_batch

    sync_bn = q["q10"]  # converted = per chunk (True), != the whole batch (False)
    assert sync_bn.answer == ("D",)
    assert _stdout(sync_bn, "no_gpu").splitlines()[1] == "True False"
    assert sync_bn.options["D"].startswith("Nothing changes")

    checkpoint = q["q13"]
    (letter,) = checkpoint.answer
    assert _stdout(checkpoint, "no_gpu").startswith("net2 RuntimeError opt2 ok")
    assert checkpoint.options[letter].startswith("Only net2's")

    for qid in ("q17", "q18", "q20"):
        (letter,) = q[qid].answer
        for env in ("no_gpu", "one_gpu", "multi_gpu"):
            assert q[qid].options[letter] == _stdout(q[qid], env), qid

    grads = q["q19"]
    assert grads.options[grads.answer[0]] == _stdout(grads, "no_gpu").replace("\n", " / ")

    epoch = q["q11"]  # the first line ends with the epoch's number of replica forwards
    first_line = _stdout(epoch, "no_gpu").splitlines()[0]
    assert epoch.options[epoch.answer[0]] == first_line.split()[-1]
    one_row = q["q12"]
    printed = _stdout(one_row, "no_gpu")
    assert printed.startswith("13 [4, 4, 4, 1]") and "\nreplica 3: ValueError: " in printed
    assert one_row.options[one_row.answer[0]].startswith("The last batch raises ValueError")

    fix = q["q14"]
    words = _stdout(fix, "no_gpu").split()
    assert set(fix.answer) == {words[i] for i in range(0, len(words), 2) if words[i + 1] == "True"}
    numpy_fix = q["q15"]  # the stem names the machine: no GPU
    words = _stdout(numpy_fix, "no_gpu").split()
    assert set(numpy_fix.answer) == {words[i] for i in range(0, len(words), 2)
                                     if words[i + 1] == "ok"}
    for env in ("one_gpu", "multi_gpu"):  # the same options fail on GPU machines too
        words = _stdout(numpy_fix, env).split()
        assert set(numpy_fix.answer) == {words[i] for i in range(0, len(words), 2)
                                         if words[i + 1] == "ok"}


def test_every_snippet_of_a_shown_program_is_that_program() -> None:
    # What students read is what was run: a question with code has a snippet that runs exactly
    # that code (select-all questions run each option as written on the stem's code).
    for question in SNIPPET_QUESTIONS:
        if question.code and not question.multiple:
            assert question.snippet.code == question.code, question.id
    numpy_fix = BANK.by_id["q15"]
    for line in numpy_fix.code.splitlines()[:-1]:  # all but the failing call
        assert line in numpy_fix.snippet.code, line
    for option in numpy_fix.options.values():
        assert option in numpy_fix.snippet.code, option


# ------------------------------------------------------------------ the runner itself


def test_runner_records_the_exception_type_and_message() -> None:
    outcome = run_snippet("print('before')\nraise KeyError('no such key')\n", timeout=30)
    assert outcome.stdout == "before"
    assert (outcome.exc_type, outcome.exc_message) == ("KeyError", "'no such key'")


def test_runner_runs_the_snippet_as_main_in_isolated_mode() -> None:
    outcome = run_snippet("import os, sys\nprint(__name__, sys.flags.isolated, "
                          "os.environ['OMP_NUM_THREADS'])\n", timeout=30)
    assert outcome.stdout == "__main__ 1 1"


def test_runner_times_out() -> None:
    outcome = run_snippet("import time\ntime.sleep(30)\n", timeout=1)
    assert outcome.timed_out


def test_mismatches_are_reported() -> None:
    printed = SnippetOutcome(stdout="torch.Size([2, 1])", stderr="", returncode=0)
    raised = SnippetOutcome(stdout="", stderr="", returncode=1, exc_type="RuntimeError",
                            exc_message="module must have its parameters")
    assert compare_outcome(Outcome(stdout="torch.Size([2, 1])"), printed) == []
    assert compare_outcome(Outcome(stdout="torch.Size([1, 2])"), printed)
    assert compare_outcome(Outcome(raises=("RuntimeError",)), printed)
    assert compare_outcome(Outcome(raises=("AssertionError", "RuntimeError"),
                                   match="parameters"), raised) == []
    assert compare_outcome(Outcome(raises=("RuntimeError",), match="buffers$"), raised)
    assert compare_outcome(Outcome(raises=("ValueError",)), raised)
    assert compare_outcome(Outcome(stdout=""), raised)
