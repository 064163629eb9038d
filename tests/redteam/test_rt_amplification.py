"""Red team: replies that would grow on the trusted side.

A submission that patches the sandbox's reply writer (it runs in the sandbox, so it can) sends
90 MiB of `{},` (2.5 GB once parsed by json before the item check) and 60 MiB of uint8 declared
as complex128 (960 MiB once cast); it also returns a 64 MiB string and prints 64 MiB. Each test
concerned fails with a message for the student, never "grader error", with bounded messages and
output, well within the submission's time.
"""

from __future__ import annotations

import pytest
from red_team import ADD_NUMBERS, ANSWERS, DIVIDE, SCALE, assert_sound, legit_max

pytestmark = pytest.mark.slow

AMPLIFY = r'''
@@GOOD@@

import base64, json, sys

_worker = sys.modules["agsandbox.worker"]
_honest_reply = _worker._reply
_next = []


def _forged(message):
    ident = json.dumps(message.get("id")).encode()
    if _next and _next[0] == "flood":
        return b'{"id": ' + ident + b', "value": [' + b"{}," * (30 << 20) + b"{}]}"
    size = 60 << 20
    tensor = {"dtype": "torch.complex128", "wire_dtype": "torch.uint8", "shape": [size],
              "device": "cpu", "requires_grad": False, "identity": None,
              "data": base64.b64encode(bytes(size)).decode()}
    return json.dumps({"id": message.get("id"), "value": {"$tensor": tensor}}).encode()


def _reply(fd, message):
    if not _next or "value" not in message:
        return _honest_reply(fd, message)
    payload = _forged(message)
    _next.clear()
    _worker.wire.send(fd, payload)


_worker._reply = _reply
_good_add, _good_divide = add, divide


def add(a, b):
    _next[:] = ["flood"]
    return _good_add(a, b)


def divide(a, b):
    if b == 0:
        return _good_divide(a, b)
    _next[:] = ["cast"]
    return _good_divide(a, b)


def scale(x):
    print("y" * (64 << 20))
    return "z" * (64 << 20)
'''

SUBMISSIONS = {
    "amplifying_replies": dict(files={"toy.py": AMPLIFY, "answers.yml": ANSWERS}, slow=True),
}


@pytest.mark.submission("amplifying_replies")
def test_amplifying_replies_fail_their_tests_with_bounded_messages(graded, secrets):
    assert_sound(graded, legit_max(set(graded.passed())), secrets)
    for name in (ADD_NUMBERS, DIVIDE, SCALE):
        assert graded.status(name) == "failed", (name, graded.message(name)[:300])
    assert "more than 100000 values" in graded.message(ADD_NUMBERS)
    assert "cannot travel as" in graded.message(DIVIDE)
    for test in graded.report["tests"]:
        assert test["status"] != "grader_error", (test["name"], test["message"][:300])
        assert len(test["message"]) < 8000
        assert len(test["output"]) <= (1 << 20) + 100
    assert graded.wall < 60, f"grading took {graded.wall:.0f} s"
