"""Red-team harness: hostile submissions graded end to end by the real engine on the toy assignment.

Each test module declares its hostile submissions in a module-level ``SUBMISSIONS`` dict (name ->
``dict`` spec, see `Spec`) and marks each test with ``@pytest.mark.submission(name)``; the
``graded`` fixture hands the test that submission's `Graded` result. Every submission is graded
once per session, by ``autograder.grading.grade.grade`` in a child Python process (so a grading can
have its own isolation mode, a hard time limit and its own memory), three at a time; before a
module's first test, every grading its selected tests need starts, slowest first.

The toy assignment is graded from a copy whose secrets (hidden tests, key, a solution, grading.yml)
hold a canary string unique to the session: the canary must never reach a report. The attacker is
handed the absolute paths of both the copy and the repository's own fixture files (worst case).

Tokens replaced in a spec's file texts (never the canary itself):
  @@GOOD@@      the toy's correct solution (add, divide, scale)
  @@HUNT@@      helper code that hunts for secrets (`HUNT`): hunt(kinds, seconds, walk) returns
                "LOOT[n found]: ..." with what it could read
  @@SECRETS@@   a Python list of the absolute paths of every secret (copy and originals)
  @@OUT@@       the absolute path of the folder the grader writes results to
  @@MARKERS@@   a host folder where hostile code that wrongly ran in a trusted process (or
                outside the sandbox) would leave traces; it must stay empty
  @@TOKEN@@     a string unique to the submission (to find its processes)
  @@REPO@@      the repository's absolute path
  @@SECRET:i@@  the absolute path of Secrets.files[i]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml
from markupsafe import escape
from repo_project import REPO

from autograder.project.schemas import validate

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
ANSWERS = "sum_shape: A\nfloat_types: [A, C]\n"
# Gradings at a time: three, or one in a parallel run (pytest -n), whose other processes load
# the machine already (a hard time limit per grading would be missed).
JOBS = int(os.environ.get("REDTEAM_JOBS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "3"))
GRADING_LIMIT_S = 90  # a grading still running then is killed (the test then fails)

# The toy's hidden tests by display name, with the student function each checks. On a grader
# without CUDA the GPU test is left out and the coding part (8 points over 7 run) is reweighted.
MC_TESTS = ("Q1 sum_shape", "Q2 float_types")
ADD_NUMBERS = "add: adds two integers"
ADD_TENSORS = "add: adds tensors without changing the inputs"
ADD_RANKS = "add: works in two processes"
DIVIDE = "divide: divides"
DIVIDE_ZERO = "divide: raises ZeroDivisionError for a zero divisor"
SCALE = "scale: doubles a tensor"
SCALE_GPU = "scale: keeps a CUDA tensor on its GPU"
CODING_TESTS = (ADD_NUMBERS, ADD_TENSORS, ADD_RANKS, DIVIDE, DIVIDE_ZERO, SCALE, SCALE_GPU)
HIDDEN_POINTS = {ADD_NUMBERS: 1, ADD_TENSORS: 1, ADD_RANKS: 1, DIVIDE: 2, DIVIDE_ZERO: 1,
                 SCALE: 1, SCALE_GPU: 1}
MC_POINTS = 2.0
OUTPUT_NAMES = ("results.json", "report.json", "report.md", "report.html")

# Text that only the secret files hold (the key is revealed by design, the hidden tests' display
# names and messages are shown by design; these lines are not).
ORIGINAL_SIGNATURES = ("def test_add_numbers", "raises_student(", "answer: [A]",
                       "@pytest.mark.points(", "functions: {add: 3")


@cache
def has_cuda() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return torch.cuda.is_available()


def legit_max(passing: set[str] | list[str] | tuple[str, ...], mc: float = MC_POINTS) -> float:
    """The most a submission can score when only the hidden tests in `passing` may pass.

    The GPU test counts only where CUDA is there (else it is left out and the rest reweighted);
    it may pass when the plain scale test may.
    """
    passing = set(passing) | ({SCALE_GPU} if SCALE in passing else set())
    run = {n: p for n, p in HIDDEN_POINTS.items() if n != SCALE_GPU or has_cuda()}
    scale = 8 / sum(run.values())
    return mc + scale * sum(p for n, p in run.items() if n in passing)


HONEST = (ADD_NUMBERS, ADD_TENSORS, ADD_RANKS, DIVIDE, DIVIDE_ZERO, SCALE)  # all but the GPU test


# ----------------------------------------------------------------------------- secrets


@dataclass(frozen=True)
class Secrets:
    """A copy of the toy assignment whose secret files hold a canary."""

    canary: str
    config: Path          # grading.yml of the copy (toy's timeouts)
    short_config: Path    # same assignment, 12 s for the whole coding part
    files: tuple[Path, ...]  # absolute paths handed to attackers (copy and originals)


def _plant(path: Path, canary: str, comment: str = "#") -> None:
    path.write_text(f"{comment} {canary} (a secret: never shown to students)\n"
                    + path.read_text())


# The whole coding part's limit for `short` gradings: room for the runner's start and one test's
# 8 s on a loaded machine (at 20 s, a loaded CI machine ran out of it during the first test).
SHORT_LIMIT = 40


def make_secrets(base: Path) -> Secrets:
    canary = f"CANARY-{uuid.uuid4().hex}"
    copies = {}
    for name, submission_limit in (("toy", None), ("toy-short", SHORT_LIMIT)):
        root = base / name
        shutil.copytree(TOY, root, ignore=shutil.ignore_patterns("submissions", "__pycache__"))
        config = root / "grading.yml"
        if submission_limit is not None:
            raw = yaml.safe_load(config.read_text())
            raw["assignments"]["toy"]["timeouts"]["submission"] = submission_limit
            config.write_text(yaml.safe_dump(raw, sort_keys=False))
        assignment = root / "assignments" / "toy"
        (assignment / "solution").mkdir()
        (assignment / "solution" / "toy.py").write_text(GOOD)
        for secret in (config, assignment / "questions.yml",
                       assignment / "tests" / "hidden" / "test_toy.py",
                       assignment / "solution" / "toy.py"):
            _plant(secret, canary)
        copies[name] = root
    toy = copies["toy"] / "assignments" / "toy"
    original = TOY / "assignments" / "toy"
    files = (copies["toy"] / "grading.yml", toy / "questions.yml",
             toy / "tests" / "hidden" / "test_toy.py", toy / "solution" / "toy.py",
             TOY / "grading.yml", original / "questions.yml",
             original / "tests" / "hidden" / "test_toy.py",
             ROOT / "assignments" / "dp_basics" / "questions.yml",
             ROOT / "assignments" / "dp_basics" / "solution" / "dp_basics.py",
             ROOT / "assignments" / "dp_basics" / "tests" / "hidden",
             ROOT / "assignments" / "ddp_training" / "questions.yml",
             ROOT / "assignments" / "ddp_training" / "solution" / "ddp_training.py",
             ROOT / "assignments" / "ddp_training" / "tests" / "hidden")
    return Secrets(canary, copies["toy"] / "grading.yml", copies["toy-short"] / "grading.yml",
                   files)


# The secret hunter run inside the sandbox: bounded in time, never raises, reads only regular
# files (a pipe could block it). Its hints are spelled with "~" so its own source never matches.
HUNT = r"""
import os as _os, stat as _stat, sys as _sys, time as _time

SECRETS = @@SECRETS@@
HINTS = tuple(h.replace("~", "") for h in ("CAN~ARY-", "def te~st_add_numbers", "ans~wer: [",
                                           "@pytest.mark.po~ints("))
RELATIVE = ["assignments/toy/tests/hidden/test_toy.py", "assignments/toy/questions.yml",
            "assignments/toy/solution/toy.py", "grading.yml", "tests/hidden/test_toy.py",
            "questions.yml", "solution/toy.py", "tests/fixtures/toy/grading.yml",
            "tests/fixtures/toy/assignments/toy/questions.yml",
            "tests/fixtures/toy/assignments/toy/tests/hidden/test_toy.py",
            "assignments/dp_basics/questions.yml", "assignments/ddp_training/questions.yml",
            "runner.log", "pytest.ini", "upload/toy.py",
            "upload/answers.yml"]


def _read(path, limit=1 << 16):
    try:
        if not _stat.S_ISREG(_os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except BaseException:
        return None


TRIED = []


def _look(path, found):
    TRIED.append(path)
    text = _read(path)
    if text and any(h in text for h in HINTS):
        at = min(text.find(h) for h in HINTS if h in text)
        found.append(f"{path}: {text[max(0, at - 60): at + 120]!r}")


def _paths_in(folder):
    try:
        return [_os.path.join(folder, n) for n in _os.listdir(folder)[:200]]
    except BaseException:
        return []


def absolute_paths():
    # The worst case: the exact absolute paths of the secrets, and what is next to them.
    paths = list(SECRETS)
    for secret in SECRETS:
        paths += _paths_in(secret) + _paths_in(_os.path.dirname(secret))
        paths += _paths_in(_os.path.dirname(_os.path.dirname(secret)))
    return paths


def layout_paths():
    # Guesses from the package layout: cwd, HOME, TMPDIR, sys.path, the probes' and the
    # worker's files, each with its ancestors; the editable install's finder names the repo.
    starts = [_os.getcwd(), _os.environ.get("HOME", ""), _os.environ.get("TMPDIR", ""),
              *_sys.path]
    for module in ("probes", "agsandbox.worker"):
        try:
            starts.append(_os.path.dirname(__import__(module, fromlist=["x"]).__file__))
        except BaseException:
            pass
    paths = []
    for start in filter(None, starts):
        folder = start
        for _ in range(8):
            paths += [_os.path.join(folder, r) for r in RELATIVE] + _paths_in(folder)
            folder = _os.path.dirname(folder)
    for entry in _sys.path:
        for path in _paths_in(entry):
            if _os.path.basename(path).startswith("__editable__"):
                for quoted in (_read(path) or "").split("'"):
                    if quoted.startswith("/") and "autograder" in quoted:
                        repo = _os.path.dirname(quoted)
                        paths += [_os.path.join(repo, r) for r in RELATIVE]
    return paths


def proc_paths():
    # /proc: this process, its parent (/proc/<ppid>), every process it can see: cmdline,
    # environ, mounts, open fds (and where they point), cwd, and the secrets through /root.
    pids = ["self", str(_os.getppid())]
    pids += [p for p in _paths_in("/proc") if _os.path.basename(p).isdigit()]
    paths = []
    for pid in dict.fromkeys(_os.path.basename(p) for p in pids):
        base = f"/proc/{pid}"
        paths += [f"{base}/{n}" for n in ("cmdline", "environ", "mountinfo", "maps", "status")]
        paths += _paths_in(f"{base}/cwd") + _paths_in(f"{base}/cwd/..")
        paths += [f"{base}/root{s}" for s in SECRETS] + [f"{base}/cwd/{r}" for r in RELATIVE]
        for fd in _paths_in(f"{base}/fd"):
            paths.append(fd)
            try:
                target = _os.readlink(fd)
            except BaseException:
                continue
            paths += [target] + _paths_in(_os.path.dirname(target))
    return paths


def crawl(found, deadline):
    # Every file named like a secret anywhere this process can see (bounded in time).
    wanted = {"test_toy.py", "questions.yml", "grading.yml", "runner.log", "results.json"}
    for folder, dirs, files in _os.walk("/"):
        if _time.monotonic() > deadline:
            return
        dirs[:] = [d for d in dirs if _os.path.join(folder, d) not in ("/proc", "/sys", "/dev")]
        for name in files:
            if name in wanted:
                _look(_os.path.join(folder, name), found)


def hunt(kinds=("absolute", "layout", "proc"), seconds=1.5, walk=False):
    deadline = _time.monotonic() + seconds
    found = []
    try:
        makers = {"absolute": absolute_paths, "layout": layout_paths, "proc": proc_paths}
        for kind in kinds:
            for path in dict.fromkeys(makers[kind]()):
                if _time.monotonic() > deadline:
                    break
                _look(path, found)
        if walk:
            crawl(found, deadline)
    except BaseException as exc:
        found.append(f"hunt stopped: {type(exc).__name__}")
    found = list(dict.fromkeys(found))
    return f"LOOT[{len(found)} found] ({len(set(TRIED))} paths tried): " + \
        " | ".join(found)[:3000]
"""


# ----------------------------------------------------------------------------- grading


@dataclass
class Graded:
    """One grading's outputs, read back and checked for well-formedness."""

    name: str
    out: Path
    workdir: Path
    returncode: int
    wall: float
    stderr: str
    results: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return self.report["score"]

    @property
    def tests(self) -> dict[str, dict]:
        return {t["name"]: t for t in self.report["tests"]}

    @property
    def isolation(self) -> str:
        return self.report["environment"].get("isolation", "?")

    @property
    def refused(self) -> str:
        """Why the grader refused to grade (student code could not be isolated as asked), or
        '' when it did not refuse."""
        found = re.search(r"IsolationUnavailable: (.*)", self.stderr)
        return found.group(1) if found and self.returncode != 0 else ""

    def part(self, name: str) -> float:
        return next(p["score"] for p in self.report["parts"] if p["name"] == name)

    def status(self, name: str) -> str:
        return self.tests[name]["status"]

    def message(self, name: str) -> str:
        return self.tests[name]["message"]

    def everything(self) -> str:
        return "\n".join(self.texts.values())

    def passed(self) -> set[str]:
        return {n for n, t in self.tests.items() if t["status"] == "passed"}


@dataclass
class Spec:
    """A hostile submission. Keys of a SUBMISSIONS dict entry:

    files:     {relative path: text or bytes} written into the submission folder (tokens
               replaced in text); default {"toy.py": GOOD, "answers.yml": ANSWERS} is NOT
               implied: say what you want
    symlinks:  {relative path: target} (target may be a token such as "@@SECRET:1@@", the
               absolute path of Secrets.files[1])
    build:     callable(folder: Path) -> Path, called after the files are written, returns
               what to grade (a zip, say)
    isolated:  True when the submission is only safe, or only meaningful, inside the sandbox's
               namespaces: it is not graded (its tests skip) on a machine without them
    isolation: a mode to insist on (AUTOGRADER_ISOLATION=uid, say): where it cannot start,
               the grader refuses and `Graded.refused` says why
    unsafe_no_isolation: True to grade with the unsafe opt-in AUTOGRADER_UNSAFE_NO_ISOLATION=1
               (no isolation at all, whoever runs it)
    short:     True to grade with a SHORT_LIMIT on the whole coding part (not the toy's 120 s)
    no_cgroup: True to grade (as root) in a mount namespace whose /sys/fs/cgroup is an empty
               tmpfs, so that no sandbox gets a cgroup (as in a default Docker container)
    slow:      a hint: start this grading early
    """

    name: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    build: Callable[[Path], Path] | None = None
    isolated: bool = False
    isolation: str | None = None
    unsafe_no_isolation: bool = False
    short: bool = False
    no_cgroup: bool = False
    slow: bool = False


GRADE_SCRIPT = """
import sys
from pathlib import Path
from autograder.grading.grade import grade
from autograder.project.paths import Project
grade(Path(sys.argv[1]), "toy", Path(sys.argv[2]), Project.of_config(Path(sys.argv[3])))
"""


class Grader:
    """Grades specs in child processes, a few at a time, each once per session."""

    def __init__(self, base: Path, secrets: Secrets) -> None:
        from autograder.sandbox.isolation import detect

        self.base, self.secrets = base, secrets
        self.isolation = detect().mode  # what gradings here get (the environment's settings)
        self.pool = ThreadPoolExecutor(max_workers=JOBS, thread_name_prefix="redteam")
        self.futures: dict[str, Future] = {}
        self.lock = threading.Lock()

    def start(self, spec: Spec) -> Future | None:
        """The grading of `spec`, started if need be (None: not graded without isolation)."""
        if spec.isolated and self.isolation == "none":
            return None
        if spec.no_cgroup and (os.geteuid() != 0 or not shutil.which("unshare")):
            return None
        with self.lock:
            if spec.name not in self.futures:
                self.futures[spec.name] = self.pool.submit(self._grade, spec)
            return self.futures[spec.name]

    def folder(self, spec: Spec) -> Path:
        return self.base / spec.name

    def markers(self, spec: Spec) -> Path:
        return self.folder(spec) / "markers"

    def token(self, name: str) -> str:
        """A process name (at most 15 characters) unique to the submission and session."""
        return f"rt{abs(hash((name, self.secrets.canary))) % 10**10}"

    def expand(self, text: str, spec: Spec) -> str:
        out = self.folder(spec) / "out"
        replacements = {
            "@@GOOD@@": GOOD, "@@HUNT@@": HUNT,
            "@@SECRETS@@": repr([str(p) for p in self.secrets.files]),
            "@@OUT@@": str(out), "@@MARKERS@@": str(self.markers(spec)),
            "@@TOKEN@@": self.token(spec.name), "@@REPO@@": str(ROOT),
        }
        for i, path in enumerate(self.secrets.files):
            replacements[f"@@SECRET:{i}@@"] = str(path)
        for _ in range(2):  # tokens inside @@HUNT@@ / @@GOOD@@ too
            for key, value in replacements.items():
                text = text.replace(key, value)
        return text

    def _materialise(self, spec: Spec) -> Path:
        folder = self.folder(spec)
        submission = folder / "submission"
        submission.mkdir(parents=True)
        self.markers(spec).mkdir()
        for rel, data in spec.files.items():
            path = submission / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(self.expand(textwrap.dedent(data), spec))
        for rel, target in spec.symlinks.items():
            (submission / rel).parent.mkdir(parents=True, exist_ok=True)
            (submission / rel).symlink_to(self.expand(target, spec))
        return submission if spec.build is None else spec.build(folder)

    def _grade(self, spec: Spec) -> Graded:
        target = self._materialise(spec)
        folder = self.folder(spec)
        out, workdirs = folder / "out", folder / "tmp"
        workdirs.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_KEEP_WORKDIR"}
        env["TMPDIR"] = str(workdirs)  # the grader's temporary folder, to check it is removed
        if spec.isolation:
            env["AUTOGRADER_ISOLATION"] = spec.isolation
        if spec.unsafe_no_isolation:
            env["AUTOGRADER_UNSAFE_NO_ISOLATION"] = "1"
        config = self.secrets.short_config if spec.short else self.secrets.config
        command = [sys.executable, "-c", GRADE_SCRIPT, str(target), str(out), str(config)]
        if spec.no_cgroup:
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       'mount -t tmpfs -o ro none /sys/fs/cgroup && exec "$@"', "sh", *command]
        started = time.monotonic()
        with open(folder / "stderr.txt", "wb") as err:
            child = subprocess.Popen(
                command,
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                start_new_session=True)
            try:
                code = child.wait(timeout=GRADING_LIMIT_S)
            except subprocess.TimeoutExpired:
                kill_tree(child.pid)
                code = child.wait()
        graded = Graded(spec.name, out, workdirs, code, time.monotonic() - started,
                        (folder / "stderr.txt").read_text(errors="replace")[-4000:])
        for name in OUTPUT_NAMES:
            if (out / name).is_file():
                graded.texts[name] = (out / name).read_bytes().decode("utf-8")
        if code == 0:
            graded.results = json.loads(graded.texts["results.json"])
            graded.report = json.loads(graded.texts["report.json"])
        return graded


def kill_tree(pid: int) -> None:
    """SIGKILL a grading process and every process it started (by pid, children first)."""
    def children(p: int) -> list[int]:
        found = []
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                found += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return found

    stack, seen = [pid], []
    while stack:
        p = stack.pop()
        seen.append(p)
        stack += children(p)
    for p in reversed(seen):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------- checks


def assert_sound(graded: Graded, max_score: float, secrets: Secrets,
                 also_secret: tuple[str, ...] = ()) -> None:
    """No inflation, no leak, a complete and readable report."""
    assert graded.returncode == 0, f"grading crashed or hung ({graded.returncode}):\n" \
                                   f"{graded.stderr}"
    # Complete and valid: the engine validated on write; validate again as read back.
    validate(graded.results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    validate(graded.report, "report.schema.json", "report.json", REPO.schemas)
    names = [t["name"] for t in graded.report["tests"]]
    assert sorted(names) == sorted(MC_TESTS + CODING_TESTS), names
    # results.json has no entry for a GPU test left out (one note instead).
    assert [t["name"] for t in graded.results["tests"]] == [
        t["name"] for t in graded.report["tests"] if t["status"] != "excluded"]
    for t in graded.report["tests"]:
        if t["status"] != "passed":
            assert t["message"].strip(), f"{t['name']}: no message"
    md, html = graded.texts["report.md"], graded.texts["report.html"]
    for t in graded.report["tests"]:  # readable: every failure's reason is in both reports
        if t["status"] not in ("passed", "excluded") and t["visibility"] == "visible":
            first = t["message"].strip().splitlines()[0][:80]
            # report.md escapes Markdown in student-influenced text: compare without escapes.
            assert first in md or first in re.sub(r"\\(.)", r"\1", md), (t["name"], first)
            assert first in html or str(escape(first)) in html, (t["name"], first)
    # No inflation: the total is what the honest parts earn at most, and adds up.
    # Points are shown in whole hundredths that add up exactly (largest remainder).
    assert graded.score <= round(max_score, 2) + 0.01 + 1e-9, \
        f"score {graded.score} > {max_score:.4f}: passed {sorted(graded.passed())}"
    assert graded.results["score"] == graded.score
    assert abs(sum(p["score"] for p in graded.report["parts"]) - graded.score) < 1e-6
    assert abs(sum(t["score"] for t in graded.report["tests"]) - graded.score) < 1e-6
    # No leak of any secret, in any output file.
    everything = graded.everything()
    for secret in (secrets.canary, *ORIGINAL_SIGNATURES, *also_secret):
        assert secret not in everything, f"secret text {secret!r} reached the reports"
    # Nothing left behind: the grader's temporary folder is gone.
    assert not any(graded.workdir.iterdir()), sorted(graded.workdir.iterdir())


def observation(graded: Graded, test: str, tag: str) -> str:
    """What hostile code reported about its sandbox, as `TAG{...}` in a test's message/output."""
    text = graded.message(test) + "\n" + graded.tests[test]["output"]
    found = re.search(re.escape(tag) + r"\{(.*?)\}" + re.escape(tag), text, re.S)
    assert found, f"no {tag} observation in {test!r}: {text[:500]!r}"
    return found.group(1)
