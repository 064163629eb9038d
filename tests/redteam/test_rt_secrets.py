"""Red team: reading the hidden tests, the key or the solution, and smuggling them out.

Every hunter gets the exact absolute paths of the secrets (worst case) and tries to smuggle what
it reads through every channel to the report: a return value (add), an exception message
(divide by zero), printed output (scale, and at import). The channels are live: the reports must
show the hunter's "LOOT[0 found]" and never the canary planted in the secrets.
"""

from __future__ import annotations

import re

import pytest
from red_team import (
    ADD_NUMBERS,
    ANSWERS,
    CODING_TESTS,
    DIVIDE,
    DIVIDE_ZERO,
    SCALE,
    assert_sound,
    legit_max,
    observation,
)

pytestmark = pytest.mark.slow  # each grading takes 5-15 s (~2 minutes in all)

SMUGGLER = """
@@HUNT@@
import torch

KINDS = {kinds!r}
LOOT = hunt(KINDS, seconds=2.0, walk={walk!r})
for name in ("key.yml", "hidden_test.py", "solution.py", "answers.yml"):  # our symlinks
    extra = []
    _look(name, extra)
    if extra:
        LOOT += " | " + " | ".join(extra)
print("at import:", LOOT)


def add(a, b):
    return LOOT  # smuggled through a return value


def divide(a, b):
    if b == 0:
        raise RuntimeError(LOOT)  # smuggled through an exception message
    return a / b


def scale(x):
    print(hunt(KINDS, seconds=1.0))  # smuggled through printed output, hunted during a call
    return x
"""

# Symlinks in the submission to the secrets: never copied into the sandbox.
SYMLINKS = {"key.yml": "@@SECRET:1@@", "solution.py": "@@SECRET:3@@",
            "hidden_test.py": "@@SECRET:2@@"}

SUBMISSIONS = {
    "read_absolute_paths": dict(
        files={"toy.py": SMUGGLER.format(kinds=("absolute",), walk=False), "answers.yml": ANSWERS},
        symlinks=SYMLINKS, isolated=True),
    "read_proc": dict(
        files={"toy.py": SMUGGLER.format(kinds=("proc",), walk=False), "answers.yml": ANSWERS},
        isolated=True),
    "read_package_layout": dict(
        files={"toy.py": SMUGGLER.format(kinds=("layout",), walk=True), "answers.yml": ANSWERS},
        isolated=True),
    "read_without_isolation": dict(
        files={"toy.py": SMUGGLER.format(kinds=("absolute",), walk=False), "answers.yml": ANSWERS},
        unsafe_no_isolation=True),
    "toy_is_a_symlink_to_the_solution": dict(
        symlinks={"toy.py": "@@SECRET:3@@", "answers.yml": "@@SECRET:1@@"}),
    "import_the_grader": dict(isolated=True, files={"answers.yml": ANSWERS, "toy.py": """
@@GOOD@@
import importlib.util, os, sys

seen = {}
for name in ("autograder", "autograder.grading.grade", "autograder.runner.pytest_plugin"):
    try:
        __import__(name)
        seen[name] = "IMPORTED"
    except BaseException as exc:
        seen[name] = type(exc).__name__
# Install the editable install's finder by hand (site is off in the sandbox), then import.
for entry in sys.path:
    for file in (os.listdir(entry) if os.path.isdir(entry) else []):
        if file.startswith("__editable___autograder") and file.endswith(".py"):
            try:
                finder = {}
                exec(open(os.path.join(entry, file)).read(), finder)
                finder["install"]()
                __import__("autograder.grading.grade")
                seen["finder"] = "IMPORTED"
            except BaseException as exc:
                seen["finder"] = type(exc).__name__
try:
    spec = importlib.util.spec_from_file_location("g", "@@REPO@@/autograder/grading/grade.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    seen["by path"] = "IMPORTED"
except BaseException as exc:
    seen["by path"] = type(exc).__name__
# The sandbox's own runtime is there by design: it holds nothing trusted.
import agsandbox.codec
seen["agsandbox"] = "IMPORTED"


def scale(x):
    raise RuntimeError(f"GRADER{{{seen}}}GRADER")
"""}),
}


def hunted(graded, test: str, at_least: int) -> str:
    """What a hunter reported in a test; it must have found nothing after trying enough."""
    text = graded.tests[test]["message"] + graded.tests[test]["output"]
    tried = re.search(r"LOOT\[0 found\] \((\d+) paths tried\)", text)
    assert tried, text[:2000]
    assert int(tried.group(1)) >= at_least, text[:2000]
    return text


@pytest.mark.submission("read_absolute_paths")
def test_secrets_at_their_absolute_paths_are_out_of_reach(graded, secrets):
    """Absolute paths of hidden tests, key, solution, grading.yml (copy and repo), symlinks."""
    assert_sound(graded, legit_max({DIVIDE}), secrets)
    assert graded.status(DIVIDE) == "passed"  # the honest part still earns its points
    # The channels work (the hunter's words reach the report) and carry nothing.
    hunted(graded, DIVIDE_ZERO, at_least=10)
    hunted(graded, SCALE, at_least=10)
    assert "at import: LOOT[0 found]" in graded.tests[ADD_NUMBERS]["output"]


@pytest.mark.submission("read_proc")
def test_proc_of_self_parent_and_fds_holds_no_secret(graded, secrets):
    """/proc/self, /proc/<ppid> environ/cmdline/fds, every visible pid's cwd and root."""
    assert_sound(graded, legit_max({DIVIDE}), secrets)
    hunted(graded, DIVIDE_ZERO, at_least=100)
    hunted(graded, SCALE, at_least=100)


@pytest.mark.submission("read_package_layout")
def test_paths_guessed_from_the_layout_and_a_crawl_find_nothing(graded, secrets):
    """sys.path, cwd, HOME, probes/worker files and ancestors, the editable finder, a crawl."""
    assert_sound(graded, legit_max({DIVIDE}), secrets)
    hunted(graded, DIVIDE_ZERO, at_least=300)
    hunted(graded, SCALE, at_least=300)


@pytest.mark.submission("read_without_isolation")
def test_calibration_without_isolation_the_same_hunter_does_leak(graded, secrets):
    """The hunters above are real: with the unsafe opt-in AUTOGRADER_UNSAFE_NO_ISOLATION=1
    (documented as never for grading, and said so in the report) the same code reads the canary
    and the reports show it."""
    assert graded.isolation == "none"
    assert any("NOT isolated, by the unsafe opt-in" in p
               for p in graded.report["environment"]["protections"])
    assert secrets.canary in graded.message(DIVIDE_ZERO)
    assert secrets.canary in graded.tests[SCALE]["output"]
    # Even then the score is only what the honest part earns.
    assert graded.score <= round(legit_max({DIVIDE}), 2) + 0.01


@pytest.mark.submission("toy_is_a_symlink_to_the_solution")
def test_a_module_symlinked_to_the_solution_is_refused(graded, secrets):
    """toy.py -> the solution (correct code!), answers.yml -> the key: neither is followed."""
    assert_sound(graded, 0.0, secrets)
    assert graded.score == 0
    for test in CODING_TESTS[:-1]:
        assert "toy.py is a symbolic link; submit the file itself" in graded.message(test)


@pytest.mark.submission("import_the_grader")
def test_the_grader_cannot_be_imported_in_the_sandbox(graded, secrets):
    assert_sound(graded, legit_max(set(CODING_TESTS) - {SCALE}), secrets)
    seen = observation(graded, SCALE, "GRADER")
    for name in ("'autograder'", "'autograder.grading.grade'", "'finder'", "'by path'"):
        assert f"{name}: 'ModuleNotFoundError'" in seen or \
            f"{name}: 'FileNotFoundError'" in seen, seen
    assert "IMPORTED" not in seen.replace("'agsandbox': 'IMPORTED'", "")

