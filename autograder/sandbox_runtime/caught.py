"""Student exceptions a scenario caught: noted here, sent back with the reply.

A probe that turns a student's exception into data for the test (`{"error": ...}`) calls
`note(exc)`; the worker encodes what was noted during a request as raised exceptions are
encoded (codec.encode_exception: type names, whether each is the built-in class) and sends it
as the reply's `caught`. The trusted side reads it as StudentErrors, so a NotImplementedError
caught inside a scenario is told by its class (the template's stubs), whatever the test's
message says. Student code can add to it or clear it: that only changes how its own failures
are labelled, never a score.
"""

from __future__ import annotations

MAX_NOTED = 8  # per request (as the trusted side reads at most)

_noted: list[BaseException] = []


def note(exc: BaseException) -> None:
    """Remember `exc`, which student code raised and a scenario caught, for this reply."""
    if len(_noted) < MAX_NOTED:
        _noted.append(exc)


def take() -> list[BaseException]:
    """What was noted since the last call, and forget it."""
    taken = list(_noted)
    _noted.clear()
    return taken
