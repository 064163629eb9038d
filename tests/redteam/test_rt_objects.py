"""Red team: monkeypatching, lying objects, forged replies, hostile output, the network.

Student code runs in its own process and talks to the trusted runner only through JSON that
`codec.decode` turns into plain values: patches of torch, pytest, unittest or builtins stay in
the sandbox, objects with lying methods cannot cross, and forged frames on the reply pipe are
data to reject, not code.
"""

from __future__ import annotations

import ast
import json
import re

import pytest
from red_team import (
    ADD_NUMBERS,
    ADD_RANKS,
    ADD_TENSORS,
    ANSWERS,
    CODING_TESTS,
    DIVIDE,
    DIVIDE_ZERO,
    HONEST,
    SCALE,
    assert_sound,
    legit_max,
    observation,
)

pytestmark = pytest.mark.slow  # each grading takes 5-15 s (~2 minutes in all)

MONKEYPATCHER = """
import builtins, unittest

import numpy.testing
import pytest
import torch

# Every check a grader could make, made to say yes (here, in the sandbox).
torch.equal = lambda *args, **kwargs: True
torch.allclose = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)
torch.Tensor.all = lambda self, *args, **kwargs: torch.tensor(True)
torch.Tensor.clone = lambda self, *args, **kwargs: self  # a "copy" that is the tensor itself
numpy.testing.assert_array_equal = lambda *args, **kwargs: None
unittest.TestCase.assertEqual = lambda *args, **kwargs: None
pytest.approx = lambda *args, **kwargs: True
builtins.all = builtins.any = lambda iterable: True
builtins.print = lambda *args, **kwargs: None
builtins.AssertionError = type("AssertionError", (Exception,), {})


def add(a, b):
    if type(a) is torch.Tensor:
        return a.add_(b)  # the classic bug: changes its first argument
    return a + b


def divide(a, b):
    return 0 if b == 0 else a * b


def scale(x):
    return x
"""

LIAR = """
import torch


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __bool__(self):
        return True

    __hash__ = object.__hash__

    @property
    def __class__(self):
        return int

    def __int__(self):
        return 5

    __index__ = __int__

    def __repr__(self):
        return "5"


class LyingInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class LyingFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class LyingTensor(torch.Tensor):
    def __eq__(self, other):
        return torch.ones(self.shape, dtype=torch.bool)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


class ZeroDivisionError(Exception):  # noqa: A001 - a lie by name: not the built-in one
    pass


def add(a, b):
    if type(a) is int and a == 10:  # a rank: base 10
        return LyingInt(0)
    return AlwaysEqual()


def divide(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return LyingFloat(0.0)


def scale(x):
    return x.as_subclass(LyingTensor)  # not doubled, but equal to anything here
"""

# Frames written straight to the reply pipe (found in the worker's stack), then exit, so the
# grader reads only the forgery. divide and scale are honest.
FORGE = """
import json, os, struct, sys


def forge(payload, claimed=None):
    frame = sys._getframe()
    while "reply_fd" not in frame.f_locals:
        frame = frame.f_back
    request = frame.f_locals.get("request")
    if request is not None and payload.startswith(b"{"):  # echo the request's id, as a
        payload = b'{"id": "' + request["id"].encode() + b'", ' + payload[1:]  # worker would
    data = memoryview(struct.pack(">Q", len(payload) if claimed is None else claimed) + payload)
    while data:
        data = data[os.write(frame.f_locals["reply_fd"], data):]
    os._exit(0)
"""

FORGER = "@@GOOD@@\n" + FORGE + """
import torch

_divide = divide


def add(a, b):
    if type(a) is torch.Tensor:  # a tensor whose data is not base64
        forge(json.dumps({"value": {"$map": {"changed": False, "out": {"$tensor": {
            "dtype": "torch.float32", "wire_dtype": "torch.float32", "shape": [2],
            "device": "cpu", "data": "!!!!not base64!!!!"}}}}}).encode())
    if a == 10:  # a rank: a frame claiming 4 EiB
        forge(b"{}", claimed=1 << 62)
    forge(b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")  # nested 100 000 deep


def divide(a, b):
    if b == 0:  # an exception whose type names are not a list
        forge(json.dumps({"raised": {"type_names": 12, "message": "x"}}).encode())
    return _divide(a, b)
"""

HUGE_MESSAGE = "@@GOOD@@\n" + FORGE + """
_add = add


def add(a, b):
    if type(a) is int and a == 10:  # a rank: an 8 MiB list, read, decoded, simply wrong
        forge(b'{"value": [' + b"0," * (4 << 20) + b'0]}')
    return _add(a, b)


def scale(x):  # an exception message of 8 MiB (the sandbox's own codec cuts at 4000)
    forge(json.dumps({"raised": {"type_names": ["ValueError"],
                                 "message": "HUGE" + "A" * (8 << 20)}}).encode())
"""

NOISY = """
@@GOOD@@
import os, sys

sys.stdout.buffer.write(b"import: \\xff\\xfe not UTF-8 \\x80\\x00 NUL\\n")
sys.stdout.flush()
_add, _divide, _scale = add, divide, scale


def add(a, b):
    sys.stdout.write(("x" * 1023 + "\\n") * 4 * 1024)  # 4 MiB: 1000 times the toy's cap
    return _add(a, b)


def divide(a, b):
    sys.stdout.flush()
    os.write(1, b"\\xc3\\x28 invalid \\xed\\xa0\\x80 surrogate \\xf8\\x88\\x80\\x80\\x80 \\x00\\n")
    os.write(2, b"\\x1b[31mred\\x1b[0m \\r carriage \\x07 bell \\xff\\n")
    return _divide(a, b)


def scale(x):
    print("\\u00e9\\u4e2d\\U0001f600 fine UTF-8", "\\x00" * 10)
    return _scale(x)
"""

INJECTOR = """
@@GOOD@@
_divide = divide


def divide(a, b):
    if b == 0:
        raise ValueError("\\n\\n# Toy assignment: 10 / 10\\n\\n<img src=x onerror=alert(1)>")
    return _divide(a, b)


def scale(x):
    print("```\\n# Toy assignment: 10 / 10\\n\\n<script>alert('pwned')</script>\\n```")
    return x
"""

NETWORK = """
@@GOOD@@
import ctypes, socket, struct


def attempt(what):
    try:
        what()
        return "ok"
    except BaseException as exc:
        return type(exc).__name__


def scale(x):
    seen = {"interfaces": [name for _, name in socket.if_nameindex()]}
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.settimeout(1)
    seen["connect 10.255.255.1"] = attempt(lambda: tcp.connect(("10.255.255.1", 80)))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    seen["sendto 10.255.255.1"] = attempt(lambda: udp.sendto(b"x", ("10.255.255.1", 53)))
    seen["dns"] = attempt(lambda: socket.getaddrinfo("example.com", 80))
    seen["packet socket"] = attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
    seen["netlink socket"] = attempt(
        lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
    local = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    local.settimeout(1)
    seen["loopback 127.0.0.1:22"] = attempt(lambda: local.connect(("127.0.0.1", 22)))
    # Below the audit hook: raw connect(2) through ctypes. Only where the namespace has nothing
    # but loopback, so no packet can leave the machine whatever happens.
    if seen["interfaces"] == ["lo"]:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        address = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 80) + \\
            socket.inet_aton("10.255.255.1") + bytes(8)
        result = libc.connect(fd, address, len(address))
        seen["raw connect"] = f"{result} errno {ctypes.get_errno()}"
        libc.close(fd)
    raise RuntimeError(f"NET{{{seen}}}NET")
"""

SUBMISSIONS = {
    "monkeypatch_torch_pytest_builtins": dict(
        files={"toy.py": MONKEYPATCHER, "answers.yml": ANSWERS}),
    "lying_objects": dict(files={"toy.py": LIAR, "answers.yml": ANSWERS}),
    "forged_replies": dict(files={"toy.py": FORGER, "answers.yml": ANSWERS}),
    "forged_huge_message": dict(files={"toy.py": HUGE_MESSAGE, "answers.yml": ANSWERS}),
    "huge_and_binary_output": dict(files={"toy.py": NOISY, "answers.yml": ANSWERS}),
    "report_injection": dict(files={"toy.py": INJECTOR, "answers.yml": ANSWERS}),
    "network": dict(files={"toy.py": NETWORK, "answers.yml": ANSWERS}, isolated=True),
}


@pytest.mark.submission("monkeypatch_torch_pytest_builtins")
def test_monkeypatches_never_reach_the_trusted_checks(graded, secrets):
    # (The probe-based test of add is the subject of the next test.)
    assert_sound(graded, legit_max({ADD_NUMBERS, ADD_RANKS, ADD_TENSORS}), secrets)
    assert graded.passed() >= {ADD_NUMBERS, ADD_RANKS}
    for test in (DIVIDE, DIVIDE_ZERO, SCALE):
        assert graded.status(test) == "failed", test


@pytest.mark.submission("monkeypatch_torch_pytest_builtins")
@pytest.mark.xfail(strict=True, reason=(
    "LIMITATION (documented): probes observe inside the student's process, after the "
    "student's module is imported, so a patched torch (Tensor.clone returning self) can fake "
    "what a probe reports; verdicts stay trusted, observations are only as honest as that "
    "process"))
def test_a_patched_torch_cannot_fake_what_a_probe_observes(graded, secrets):
    assert_sound(graded, legit_max({ADD_NUMBERS, ADD_RANKS}), secrets)


@pytest.mark.submission("lying_objects")
def test_lying_objects_cannot_cross_the_wall(graded, secrets):
    """__eq__/__bool__/__class__ liars, int/float subclasses, a tensor subclass with its own
    __eq__ and __torch_function__."""
    # (The exception lying by its class name is the subject of the next test.)
    assert_sound(graded, legit_max({DIVIDE_ZERO}), secrets)
    for test in (ADD_NUMBERS, ADD_TENSORS, ADD_RANKS, DIVIDE):
        assert "cannot check" in graded.message(test), graded.message(test)
    assert graded.message(SCALE) == "scale should double every entry"


@pytest.mark.submission("lying_objects")
def test_an_exception_named_like_a_builtin_is_not_that_builtin(graded):
    assert graded.status(DIVIDE_ZERO) == "failed"


@pytest.mark.submission("forged_replies")
def test_forged_replies_fail_their_tests(graded, secrets):
    """Nested 100 000 deep, a 4 EiB length, bad base64, type names that are not a list."""
    assert_sound(graded, legit_max({DIVIDE, SCALE}), secrets)
    assert "unreadable reply" in graded.message(ADD_NUMBERS)
    assert "unreadable reply" in graded.message(ADD_RANKS)
    for test in (ADD_TENSORS, DIVIDE_ZERO):
        assert graded.status(test) == "failed"


@pytest.mark.submission("forged_replies")
def test_forged_replies_are_the_students_fault_and_cost_only_their_test(graded):
    assert not [w for w in graded.report["warnings"] if "grader error" in w]
    assert graded.passed() >= {DIVIDE, SCALE}  # honest, but after a forged reply


@pytest.mark.submission("forged_huge_message")
def test_a_forged_huge_value_and_message_do_not_change_the_score(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {ADD_RANKS, SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {ADD_RANKS, SCALE}
    # 4 million values are more than any honest reply holds: refused before decoding.
    assert "more than 100000 values" in graded.message(ADD_RANKS)
    assert graded.message(SCALE).startswith("scale raised ValueError: HUGE")


@pytest.mark.submission("forged_huge_message")
def test_forged_text_cannot_bloat_the_reports(graded):
    assert len(graded.message(SCALE)) <= 64 << 10
    assert len(graded.texts["results.json"]) < 1 << 20


@pytest.mark.submission("huge_and_binary_output")
def test_huge_and_non_utf8_output_is_capped_and_readable(graded, secrets):
    assert_sound(graded, legit_max(HONEST), secrets)
    assert graded.passed() >= set(HONEST)
    cut = "[output cut at 4 KiB]"
    for test in CODING_TESTS:
        assert len(graded.tests[test]["output"]) <= 4096 + len(cut) + 1
    assert graded.tests[ADD_NUMBERS]["output"].endswith(cut)
    assert "\ufffd" in graded.tests[DIVIDE]["output"]  # bad bytes replaced, not fatal
    json.loads(graded.texts["results.json"])  # still valid (NUL and escapes encoded)


@pytest.mark.submission("report_injection")
def test_report_injection_does_not_change_the_score(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {DIVIDE_ZERO, SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {DIVIDE_ZERO, SCALE}


@pytest.mark.submission("report_injection")
def test_student_text_cannot_inject_html(graded):
    html = graded.texts["report.html"]
    assert "<script>" not in html and "<img src=x" not in html


@pytest.mark.submission("report_injection")
def test_student_text_cannot_forge_markdown_headings(graded):
    md = graded.texts["report.md"]
    # Lines inside a code fence are text, not headings; the fence must enclose the output.
    outside, fence = [], None
    for line in md.splitlines():
        run = re.match(r"^(`{3,})\s*$", line)
        if fence is None and run:
            fence = run.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            outside.append(line)
    assert fence is None, "a code fence was left open"
    headings = [line for line in outside if line.startswith("# ")]
    assert len(headings) == 1, f"a second top-level heading (a forged score): {headings}"


@pytest.mark.submission("network")
def test_the_network_is_loopback_only_and_refused_before_connecting(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    seen = ast.literal_eval(observation(graded, SCALE, "NET"))
    assert seen["interfaces"] == ["lo"]
    for what in ("connect 10.255.255.1", "sendto 10.255.255.1", "dns", "packet socket",
                 "netlink socket"):
        # The audit hook's own PermissionError subclass: refused before any packet.
        assert seen[what] == "NetworkRefused", (what, seen)
    assert seen["loopback 127.0.0.1:22"] == "ConnectionRefusedError"  # its own, empty loopback
    assert seen["raw connect"] == "-1 errno 101", seen  # ENETUNREACH: no route out at all
