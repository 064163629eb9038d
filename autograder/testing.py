"""What hidden tests import: the names a test needs to talk about student code.

See docs/AUTHORING.md, section 4 ("Hidden tests: how they reach student code").
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from autograder.sandbox.client import SandboxFailure, StudentError
from autograder.sandbox_runtime.codec import ModuleSnapshot, remote_device, remote_identity

__all__ = [
    "ModuleSnapshot", "SandboxFailure", "StudentError", "assert_ranks_met", "drawn",
    "error_text", "excerpt", "raises_student",
    "remote_device", "remote_identity",
]

_SOURCE = random.SystemRandom()


def drawn() -> random.Random:
    """A generator seeded afresh for each grading, here on the trusted side.

    Draw a test's inputs (seeds, sizes, device ids, per-rank values) from it, so that no
    answer can be known before the grading: a result a student's code did not compute, be it
    forged by a rewritten probe or returned as a constant, matches only by chance.
    """
    return random.Random(_SOURCE.getrandbits(64))


def excerpt(text: object, limit: int = 200) -> str:
    """At most `limit` characters of `text` for an assertion message, cut at a word boundary
    with an ellipsis (use it instead of `message[:200]`, which cuts mid-word)."""
    from autograder.project.inert import clip

    return clip(str(text), limit)


def error_text(error: Mapping | None, limit: int = 300, none: str = "no error") -> str:
    """A scenario's report of a student exception (`{"type": ..., "message": ...}`, as the
    probes' `_error` makes it) for an assertion message: "ValueError: bad size", the type
    alone when the message is empty (a bare `raise NotImplementedError`), `none` for None.
    (Whether it was a NotImplementedError is the grader's to tell, not this text's.)"""
    if error is None:
        return none
    kind, message = str(error.get("type", "an exception")), str(error.get("message", ""))
    return f"{kind}: {excerpt(message, limit)}" if message.strip() else kind


class _Raised:
    error: StudentError | None = None


@contextmanager
def raises_student(type_name: str, why: str) -> Iterator[_Raised]:
    """Expect the student's code to raise `type_name` (or a subclass); `why` explains the rule.

    Another exception type (say NotImplementedError) fails the test with a message naming both.
    """
    raised = _Raised()
    try:
        yield raised
    except StudentError as error:
        if not error.is_a(type_name):
            raise AssertionError(
                f"{why}: expected {type_name}, but {error.function} raised "
                f"{error.described}") from None
        raised.error = error
        return
    raise AssertionError(f"{why}: expected {type_name}, but nothing was raised")


def assert_ranks_met(results: list, world_size: int, why: str, store: int = 0) -> None:
    """Fail unless all `world_size` ranks of a `student.run_ranks` scenario registered in a
    real process group at the grader's rendezvous store (the `store`-th of the scenario).

    Ranks' reports that they met (an all_reduce that adds up, a backend, a rank) come from the
    student's processes and can be forged through any channel the ranks share; the store is
    the grader's own, and only `init_process_group` at the port the ranks were given leaves
    every rank's registration there."""
    view = results.stores[store]  # type: ignore[attr-defined]
    met = view.ranks_met()
    assert met == list(range(world_size)), (
        f"{why}: {view.describe()}, expected all {world_size} ranks to make a process group "
        "there")
