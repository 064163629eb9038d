"""What hidden tests import: the names a test needs to talk about student code.

See docs/ARCHITECTURE.md ("Writing hidden tests").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .sandbox import SandboxFailure, StudentError
from .sandbox_runtime.codec import ModuleSnapshot, remote_device, remote_identity

__all__ = [
    "ModuleSnapshot", "SandboxFailure", "StudentError", "raises_student", "remote_device",
    "remote_identity",
]


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
                f"{error.type_name}: {error.message}") from None
        raised.error = error
        return
    raise AssertionError(f"{why}: expected {type_name}, but nothing was raised")
