"""Red team: writing results or reports, planting files the grader might load, pickles.

Results and reports are written by the trusted parent, last; the sandbox sees neither the out
folder nor the grader's temporary folder. Files planted in a submission (pytest configuration,
Python start-up hooks, modules shadowing the grader's) are never on a trusted path and are not
even copied into the sandbox: only the student's module is. Code that ran where it must not
leaves a folder in the host's markers folder, which must stay empty.
"""

from __future__ import annotations

import ast
import pickle

import pytest
from red_team import (
    ADD_NUMBERS,
    ANSWERS,
    HONEST,
    MC_TESTS,
    OUTPUT_NAMES,
    SCALE,
    assert_sound,
    legit_max,
    observation,
)

pytestmark = pytest.mark.slow  # each grading takes 5-15 s (~2 minutes in all)

WRITER = """
@@GOOD@@
import glob, json, os

OUT = "@@OUT@@"
FORGED = json.dumps({"score": 1000, "output": "FORGED BY THE STUDENT", "tests": []})
WORKDIR = os.path.dirname(os.getcwd())  # the sandbox folder lives in the grader's temp folder


def attempt(path, text, mode="w"):
    try:
        with open(path, mode) as f:
            f.write(text)
        return "written"
    except BaseException as exc:
        return type(exc).__name__


def write_everything():
    # Only this grading's own folders: without isolation this runs as the grader's user, and
    # other gradings' folders on the machine must not be touched by a test.
    done = {}
    try:  # where there is no isolation, the grader makes it later
        os.makedirs(OUT, exist_ok=True)
    except BaseException as exc:
        done["out/"] = type(exc).__name__
    for name in ("results.json", "report.json", "report.md", "report.html", "pwned.txt"):
        done[f"out/{name}"] = attempt(os.path.join(OUT, name), FORGED)
    targets = ["results.json", "pytest.ini", "conftest.py", "pwned.txt", "runner.log"]
    targets += [os.path.basename(p) for p in glob.glob(os.path.join(WORKDIR, "sandbox-*.log"))]
    for name in targets:
        done[f"workdir/{name}"] = attempt(os.path.join(WORKDIR, name), FORGED, "a")
    return done


AT_IMPORT = write_everything()


def scale(x):
    seen = {"at import": AT_IMPORT, "in a call": write_everything()}
    raise RuntimeError(f"WRITES{{{seen}}}WRITES")
"""

# Without isolation the sandbox runs as the grader's user (root here): it can write the grader's
# temporary folder, which is the runner's working directory. Were that folder on the runner's
# sys.path (`python -m` without -I puts it first), a planted `autograder/runner/suite.py` would
# be the next runner.
SHADOW_RUNNER = r'''
import json, os, re, sys

job = json.load(sys.stdin)
fd = int(sys.argv[1])
source = open(os.path.join(job["tests_dir"], "test_toy.py")).read()
for name in re.findall(r"^def (test_\w+)", source, re.M):
    event = {"event": "result", "nodeid": f"test_toy.py::{name}", "status": "passed",
             "message": "", "output": "", "output_cut": False, "duration": 0}
    os.write(fd, (json.dumps(event) + "\n").encode())
os.write(fd, b'{"event": "done", "exit_code": 0}\n')
'''

SHADOWER = f"""
import os, signal

RUNNER = {SHADOW_RUNNER!r}


def add(a, b):
    workdir = os.path.dirname(os.getcwd())
    os.makedirs(os.path.join(workdir, "autograder", "runner"), exist_ok=True)
    for package in ("autograder", os.path.join("autograder", "runner")):
        open(os.path.join(workdir, package, "__init__.py"), "w").close()
    with open(os.path.join(workdir, "autograder", "runner", "suite.py"), "w") as f:
        f.write(RUNNER)
    # Our parent is the zygote, its parent the trusted runner: kill it so a new one starts.
    zygote = os.getppid()
    runner = int(open(f"/proc/{{zygote}}/stat").read().rsplit(")", 1)[1].split()[1])
    if runner > 1:  # in a PID namespace the zygote is PID 1 and this is 0
        os.kill(runner, signal.SIGKILL)
    return a - b


def divide(a, b):
    return a * b


def scale(x):
    return x
"""

# Each planted file, if it ever ran (anywhere it can reach the host's markers folder), leaves a
# marker; the pytest ones would also make every test pass. The module itself is all wrong.
WRONG = """
def add(a, b):
    return a - b


def divide(a, b):
    return a * b


def scale(x):
    return x
"""


def marker(name: str) -> str:
    return f"import os\nos.makedirs('@@MARKERS@@/{name}', exist_ok=True)\n"


PASS_EVERYTHING = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""

FORGED_PROBES = marker("probes") + """
import torch


def add_in_place_check(mod, a, b):
    return {"changed": False, "out": torch.full((2,), 2.0)}


def rank_add(mod, rank, world_size, port, base):
    return base + rank
"""

PLANTED_PYTEST = {
    "toy.py": WRONG, "answers.yml": ANSWERS,
    "conftest.py": marker("conftest") + PASS_EVERYTHING,
    "tests/conftest.py": marker("tests-conftest") + PASS_EVERYTHING,
    "pytest.ini": "[pytest]\naddopts = -p evil_plugin --collect-only\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p evil_plugin --collect-only"\n',
    "setup.cfg": "[tool:pytest]\naddopts = -p evil_plugin --collect-only\n",
    "tox.ini": "[pytest]\naddopts = -p evil_plugin --collect-only\n",
    "evil_plugin.py": marker("evil_plugin") + PASS_EVERYTHING,
}

PLANTED_STARTUP = [
    ("toy.py", WRONG), ("answers.yml", ANSWERS),
    ("sitecustomize.py", marker("sitecustomize")),
    ("usercustomize.py", marker("usercustomize")),
    ("zzz_evil.pth", "import os; os.makedirs('@@MARKERS@@/pth', exist_ok=True)\n"),
    ("probes.py", FORGED_PROBES),
    ("torch.py", marker("torch")), ("pytest.py", marker("pytest")),
    ("json.py", marker("json")), ("yaml.py", marker("yaml")),
    ("autograder/__init__.py", marker("autograder")),
    ("autograder/runner/suite.py", marker("autograder-runner")),
    ("agsandbox/__init__.py", marker("agsandbox")),
    ("agsandbox/worker.py", marker("agsandbox-worker")),
    ("__init__.py", marker("package")),
]


class _Payload:
    """Unpickling this runs os.makedirs(path): a stand-in for any code a pickle can run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        import os

        return os.makedirs, (self.path, 0o777, True)


def pickled(path: str) -> bytes:
    return pickle.dumps(_Payload(path))


PICKLER = """
@@GOOD@@
import pickle

seen = {}
try:
    with open("payload.pkl", "rb") as f:  # in the submission, but not in the sandbox
        seen["payload.pkl"] = repr(pickle.load(f))
except BaseException as exc:
    seen["payload.pkl"] = type(exc).__name__
# The same kind of payload, carried in the code: it runs, inside the sandbox only.
PAYLOAD = PAYLOAD_BYTES
try:
    pickle.loads(PAYLOAD)
    seen["embedded"] = "ran in the sandbox"
except BaseException as exc:
    seen["embedded"] = type(exc).__name__
print(f"PICKLE{{{seen}}}PICKLE")


def scale(x):
    return PAYLOAD  # bytes cannot cross the wall (and the trusted side never unpickles)
"""


def _pickle_submission(folder):
    submission = folder / "submission"
    markers = folder / "markers"
    (submission / "payload.pkl").write_bytes(pickled(str(markers / "pickle-file")))
    source = (submission / "toy.py").read_text()
    (submission / "toy.py").write_text(source.replace(
        "PAYLOAD_BYTES", repr(pickled(str(markers / "pickle-embedded")))))
    return submission


def _zip_of(entries):
    def build(folder):
        import zipfile

        archive = folder / "upload.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in entries:
                zf.writestr(name, text.replace("@@MARKERS@@", str(folder / "markers")))
        return archive
    return build


SUBMISSIONS = {
    "write_results_and_reports": dict(files={"toy.py": WRITER, "answers.yml": ANSWERS},
                                      isolated=True),
    "write_results_without_isolation": dict(files={"toy.py": WRITER, "answers.yml": ANSWERS},
                                            unsafe_no_isolation=True),
    "shadow_the_runner_without_isolation": dict(
        files={"toy.py": SHADOWER, "answers.yml": ANSWERS}, unsafe_no_isolation=True),
    "planted_pytest_configuration": dict(files=PLANTED_PYTEST),
    "planted_startup_files_in_a_zip": dict(build=_zip_of(PLANTED_STARTUP)),
    "pickle_payload": dict(files={"toy.py": PICKLER, "answers.yml": ANSWERS},
                           build=_pickle_submission, isolated=True),
}


def only_trusted_outputs(graded) -> None:
    # (What the student appends to its own output log is its output, shown as such.)
    assert graded.results["output"].startswith("Multiple choice: ")
    assert graded.results["score"] == graded.score  # the trusted total, not 1000
    run = [t for t in graded.report["tests"] if t["status"] != "excluded"]  # no GPU: a note
    assert len(graded.results["tests"]) == len(run) >= len(MC_TESTS) + 6
    assert graded.texts["report.md"].startswith(f"# Toy assignment: {graded.score:g} / ")


def markers_left(grader, name: str) -> list[str]:
    return sorted(p.name for p in (grader.base / name / "markers").iterdir())


@pytest.mark.submission("write_results_and_reports")
def test_results_and_reports_cannot_be_written_from_the_sandbox(graded, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {SCALE}
    only_trusted_outputs(graded)
    # The grader's own files only: the four outputs, and the TA's record of sandbox events.
    assert sorted(p.name for p in graded.out.iterdir()
                  if p.name != "ta-sandbox-events.json") == sorted(OUTPUT_NAMES)
    # The writes into the out folder's path "succeed" inside the sandbox's private /tmp only;
    # the grader's temporary folder (the sandbox folder's parent) is not writable at all.
    writes = ast.literal_eval(observation(graded, SCALE, "WRITES"))
    for when in ("at import", "in a call"):
        workdir = {k: v for k, v in writes[when].items() if k.startswith("workdir/")}
        assert workdir and "written" not in workdir.values(), workdir


@pytest.mark.submission("write_results_without_isolation")
def test_without_isolation_the_trusted_write_still_comes_last(graded, secrets):
    """Documented as not isolated: the student can write into the out folder while it runs,
    but results.json and the reports are replaced by the trusted parent at the end."""
    assert graded.isolation == "none"
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    only_trusted_outputs(graded)
    writes = ast.literal_eval(observation(graded, SCALE, "WRITES"))
    assert writes["in a call"]["out/results.json"] == "written"


@pytest.mark.submission("shadow_the_runner_without_isolation")
def test_without_isolation_a_planted_runner_cannot_report_passes(graded, secrets):
    assert graded.isolation == "none"
    assert_sound(graded, legit_max(()), secrets)


@pytest.mark.submission("planted_pytest_configuration")
def test_planted_pytest_configuration_is_ignored(graded, grader, secrets):
    """conftest.py, pytest.ini, pyproject.toml, setup.cfg, tox.ini, a plugin: never loaded."""
    assert_sound(graded, legit_max(()), secrets)
    assert graded.score == 2  # the answers only: every coding test fails
    assert markers_left(grader, "planted_pytest_configuration") == []


@pytest.mark.submission("planted_startup_files_in_a_zip")
def test_planted_startup_files_and_shadow_modules_are_ignored(graded, grader, secrets):
    """sitecustomize, usercustomize, *.pth, probes.py, torch.py, pytest.py, json.py, yaml.py,
    autograder/, agsandbox/ in a zip upload: only toy.py reaches the sandbox."""
    assert_sound(graded, legit_max(()), secrets)
    assert graded.score == 2
    assert [graded.status(t) for t in MC_TESTS] == ["passed", "passed"]
    assert markers_left(grader, "planted_startup_files_in_a_zip") == []


@pytest.mark.submission("pickle_payload")
def test_pickles_run_only_inside_the_sandbox(graded, grader, secrets):
    assert_sound(graded, legit_max(set(HONEST) - {SCALE}), secrets)
    assert graded.passed() >= set(HONEST) - {SCALE}
    seen = observation(graded, ADD_NUMBERS, "PICKLE")
    assert "'payload.pkl': 'FileNotFoundError'" in seen
    # It ran (its makedirs was refused inside the sandbox's own /tmp, or made a private folder).
    assert "'embedded': 'ran in the sandbox'" in seen or "'embedded': 'PermissionError'" in seen
    assert "cannot check" in graded.message(SCALE) and "bytes" in graded.message(SCALE)
    assert markers_left(grader, "pickle_payload") == []
