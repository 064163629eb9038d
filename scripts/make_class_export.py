"""Generate a Gradescope-style class export of dp_basics submissions, with the expected scores.

    .venv/bin/python scripts/make_class_export.py                      # 200 submissions
    .venv/bin/python scripts/make_class_export.py --count 20 --seed 3 --out /tmp/cls --zip

writes, under --out (default class-export/, which must be empty or absent; --force clears it):

- `assignment_<id>_export/`: what Gradescope's "Export Submissions" gives, a
  `submission_metadata.yml` (Ruby-flavoured YAML: `:submitters:` with `:name:`, `:sid:`,
  `:email:`, `:created_at:`, `:score:`, `:results:`, `:history:`) and one `submission_<id>/`
  folder per submission holding the student's files;
- `assignment_<id>_export.zip` with --zip: the same, inside its top folder, as Gradescope zips it;
- `expected.json`: per submission key, its category and variant, its submitters, lateness, and
  what grading must give: the multiple-choice score (always exact: computed here by the real
  trusted answers grader on the very file written), the coding score and the total (after the
  late penalty), exact where it is known without grading, else null, with a [low, high] range
  that always holds, and `statuses`: the status the TA's outputs must give it (`blank` for the
  template, `not_importable` for the syntax error, `flagged` for the hostile code the sandbox
  notices, `ok` for correct and partial code...), two where the grader's speed decides.

Categories (a deterministic mix for --seed; every variant appears once when --count allows):

- correct: the reference solution (markers stripped) and the two alternative correct solutions
  of scripts/make_mutants.py, mostly with the full key;
- partial: each mutant of scripts/make_mutants.py (one classic mistake), the demo's partial
  example (assignments/dp_basics/examples/partial, with its answers);
- blank: the student template as released (stubs; answers null, or some answered);
- broken: a syntax error, a missing function, wrong file names (`DP_basics.py`, which the
  grader accepts with a warning, and `solution.py`, which it cannot), a malformed answers.yml,
  a notebook instead of the .py (converted by the grader), a folder without the expected files;
- hostile, each bounded so that even a broken sandbox cannot take the machine down: a busy loop
  at import (120 s), a call that sleeps (600 s), a function that tries to read the key and the
  hidden tests and answers wrongly if it can, a ~1 GiB memory hog, a fork bomb of at most 100
  short-lived children per call.

A few submissions are group submissions (2-3 submitters) and some are late (created_at after
grading.yml's due date: within the grace period, 1, 2, 3 and more days), priced with
autograder.grading.late and grading.yml's late policy.

Coding ranges cover a CPU grader (GPU tests left out, the others scaled up: gpu_policy
reweight) and a GPU grader that runs every test.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import shutil
import sys
import unicodedata
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from autograder.batch.roster import discover
from autograder.grading.late import late_status
from autograder.inputs.notebook import (
    SCHEMA_VERSION,
    NotebookError,
    extract_module,
    template_cells,
)
from autograder.inputs.submission import locate
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.late_policy import parse_timestamp
from autograder.project.markers import reference, strip_solutions
from autograder.project.paths import Project
from autograder.questions.answers import grade_answers

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "dp_basics"
TEMPLATE = ROOT / "student_templates" / ASSIGNMENT
VICTIM = "data_parallel_chunk_sizes"  # a function no other function or probe calls
SLEEPER = "match_input_dtype"


def _load_make_mutants():
    spec = importlib.util.spec_from_file_location("make_mutants", ROOT / "scripts" /
                                                  "make_mutants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- hidden test points


@dataclass
class Points:
    """Points of the hidden tests: per function (all, non-GPU) and per display name."""

    total: float
    gpu_total: float
    function: dict[str, float]
    function_cpu: dict[str, float]
    tests: dict[str, tuple[str, float, bool]]  # display name -> (function, points, needs GPU)

    @property
    def cpu_scale(self) -> float:
        """The factor a CPU grader scales the non-GPU tests by (gpu_policy reweight)."""
        return self.total / (self.total - self.gpu_total) if self.total > self.gpu_total else 1.0

    def max_loss(self, function: str) -> float:
        """The most a function can lose, on a CPU grader or a GPU grader."""
        return max(self.function[function], self.function_cpu[function] * self.cpu_scale)

    def full_loss(self, function: str) -> tuple[float, float]:
        """(CPU, GPU) loss when every test of `function` fails."""
        return self.function_cpu[function] * self.cpu_scale, self.function[function]

    def must_lose(self, substrings: list[str]) -> float:
        """Non-GPU points of the tests named like `substrings`: lost on any grader."""
        return sum(p for name, (_f, p, gpu) in self.tests.items()
                   if not gpu and any(s in name for s in substrings))


def hidden_points(assignment: Assignment) -> Points:
    tests: dict[str, tuple[str, float, bool]] = {}
    for path in sorted(assignment.hidden_tests.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            weight, gpu = 1.0, False  # a test's weight: its share of its function's points
            for deco in node.decorator_list:
                text = ast.unparse(deco)
                if ".weight(" in text or ".points(" in text:
                    weight = float(ast.literal_eval(deco.args[0]))
                gpu |= "mark.gpu" in text
            name = (ast.get_docstring(node) or "").splitlines()[0]
            tests[name] = (name.split(":", 1)[0], weight, gpu)
    functions = dict(assignment.config.functions)
    weights = {f: sum(w for fn, w, _g in tests.values() if fn == f) for f in functions}
    tests = {name: (fn, functions[fn] * w / weights[fn] if weights[fn] else 0.0, g)
             for name, (fn, w, g) in tests.items()}
    per = {f: sum(p for fn, p, _g in tests.values() if fn == f) for f in functions}
    cpu = {f: sum(p for fn, p, g in tests.values() if fn == f and not g) for f in functions}
    gpu_total = sum(p for _f, p, g in tests.values() if g)
    if any(abs(per[f] - functions[f]) > 1e-9 for f in functions):
        raise SystemExit(f"the hidden tests' points {per} do not match grading.yml {functions}")
    return Points(sum(per.values()), gpu_total, per, cpu, tests)


# --------------------------------------------------------------------------- student code


def _function_span(text: str, name: str) -> tuple[int, int]:
    """0-based [start, end) line range of a top-level function, decorators included."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return first - 1, node.end_lineno
    raise SystemExit(f"the solution has no function {name}")


def without_function(text: str, name: str) -> str:
    lines = text.splitlines(keepends=True)
    start, end = _function_span(text, name)
    return "".join(lines[:start] + lines[end:])


def function_source(text: str, name: str) -> str:
    start, end = _function_span(text, name)
    return "".join(text.splitlines(keepends=True)[start:end])


HOSTILE_HEADER = ("\n\n# --- HOSTILE TEST SUBMISSION (generated by scripts/make_class_export.py): "
                  "{what}\n# Bounded on purpose, so that even a broken sandbox cannot take the "
                  "grading machine down.\n")

IMPORT_LOOP = '''import time as _hostile_time

_hostile_deadline = _hostile_time.monotonic() + 120  # longer than any call or test timeout
while _hostile_time.monotonic() < _hostile_deadline:
    pass
'''

SLEEPS = f'''import time as _hostile_time

_real_{SLEEPER} = {SLEEPER}


def {SLEEPER}(inputs, model):
    _hostile_time.sleep(600)  # "forever" for a 10 s call timeout
    return _real_{SLEEPER}(inputs, model)
'''

READS_SECRETS = f'''import os as _hostile_os
import sys as _hostile_sys

_SECRETS = ("assignments/dp_basics/questions.yml",
            "assignments/dp_basics/tests/hidden/test_part_a_data_parallel.py",
            "assignments/dp_basics/solution/dp_basics.py",
            "source/assignments/dp_basics/questions.yml")


def _hostile_roots():
    roots = [_hostile_os.getcwd(), _hostile_os.path.dirname(_hostile_os.path.abspath(__file__)),
             _hostile_sys.prefix, _hostile_os.path.dirname(_hostile_sys.executable),
             _hostile_os.environ.get("AUTOGRADER_ROOT", ""), "/autograder", "/autograder/source"]
    for folder in _hostile_sys.path:  # editable installs name the project in *.pth files
        try:
            for name in _hostile_os.listdir(folder)[:500]:
                if name.endswith(".pth"):
                    with open(_hostile_os.path.join(folder, name)) as handle:
                        roots += [line.strip() for line in handle.read(4096).splitlines()]
        except OSError:
            pass
    return [r for r in roots if r and not r.startswith("import")]


def _hostile_read_a_secret():
    for root in _hostile_roots()[:50]:
        folder = _hostile_os.path.abspath(root)
        for _ in range(6):  # the root and its parents
            for secret in _SECRETS:
                try:
                    with open(_hostile_os.path.join(folder, secret), "rb") as handle:
                        if handle.read(64):
                            return True
                except OSError:
                    pass
            folder = _hostile_os.path.dirname(folder)
    return False


_real_{VICTIM} = {VICTIM}


def {VICTIM}(batch_size, num_devices):
    if _hostile_read_a_secret():
        return []  # it could read the key or the hidden tests: the sandbox leaked
    return _real_{VICTIM}(batch_size, num_devices)
'''

MEMORY_HOG = f'''_real_{VICTIM} = {VICTIM}


def {VICTIM}(batch_size, num_devices):
    blob = bytearray(1 << 30)  # ~1 GiB...
    blob[::4096] = b"\\x01" * len(range(0, len(blob), 4096))  # ...every page touched
    del blob
    return _real_{VICTIM}(batch_size, num_devices)
'''

FORK_BOMB = f'''import os as _hostile_os
import time as _hostile_time

_real_{VICTIM} = {VICTIM}


def {VICTIM}(batch_size, num_devices):
    for _ in range(100):  # at most 100 children per call, each gone after 5 s
        try:
            pid = _hostile_os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                _hostile_time.sleep(5)
            finally:
                _hostile_os._exit(0)
    return _real_{VICTIM}(batch_size, num_devices)
'''

SYNTAX_ERROR = '''

def chunk_sizes_again(batch_size, num_devices)
    return data_parallel_chunk_sizes(batch_size, num_devices)
'''


def notebook_text(solution: str, ref: str) -> str:
    """The released notebook with every solution cell holding the reference function."""
    cells = template_cells(strip_solutions(solution))
    for cell in cells:
        meta = cell["metadata"]["nbgrader"]
        if meta.get("solution"):
            cell["source"] = function_source(ref, cell["id"]).strip("\n") \
                .splitlines(keepends=True)
            cell["execution_count"] = None
    notebook = {"cells": cells,
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                            "name": "python3"},
                             "language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    assert all(c["metadata"]["nbgrader"]["schema_version"] == SCHEMA_VERSION for c in cells)
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- variants


@dataclass
class Variant:
    category: str
    name: str
    description: str
    files: dict[str, str]  # file name -> content, except the answers file
    answers: str  # answers profile: key, mostly, random, template, none, malformed, example, json
    broken: list[tuple[str, list[str] | None]] = field(default_factory=list)
    # (function, EXPECT_FAIL substrings) for each function that loses points; None: all its
    # tests fail. An empty list with `everything` False means full coding marks.
    everything: bool = False  # the whole coding part scores 0
    uncertain: list[str] = field(default_factory=list)  # functions that may lose points
    assumes: str | None = None
    # The statuses a TA may see (statuses.SubmissionState): one, except where the grader's
    # speed decides (a hostile call cut by its time budget, or done within it); what
    # check_class_batch.py holds a batch to.
    statuses: tuple[str, ...] = ("ok",)


# Mutants whose mistake is more than a wrong result: nccl for 3 ranks on 2 GPUs leaves the
# rank without one failing while the others wait for it at the rendezvous, so the test times
# out (every other mutant's status is ok).
MUTANT_STATUSES = {"setup_nccl_when_any_gpu": ("timed_out",)}


class Variants:
    """Every kind of submission, built from the sources."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.solution = assignment.solution.read_text()
        self.ref = reference(self.solution)
        self.template = (TEMPLATE / f"{ASSIGNMENT}.py").read_text()
        self.mm = _load_make_mutants()
        self.mutants = [spec[0] for spec in self.mm.MUTANTS]

    def build(self, name: str) -> Variant:
        module = f"{ASSIGNMENT}.py"
        ref = self.ref
        if name == "reference":
            return Variant("correct", name, "the reference solution", {module: ref}, "key")
        if name.startswith("alt_"):
            spec = next(a for a in self.mm.ALTS if a[0] == f"{name}.py")
            return Variant("correct", name, "a correct solution written differently",
                           {module: self.mm.alt_text(self.solution, *spec[1:])}, "key")
        if name.startswith("mutant:"):
            spec = next(s for s in self.mm.MUTANTS if s[0] == name.split(":", 1)[1])
            return Variant("partial", name, f"{spec[1]}: {spec[2]}",
                           {module: self.mm.mutant_text(self.solution, spec)}, "mostly",
                           broken=[(spec[1], list(spec[3]))],
                           statuses=MUTANT_STATUSES.get(spec[0], ("ok",)))
        if name == "partial_example":
            by_name = {s[0]: s for s in self.mm.MUTANTS}
            return Variant("partial", name, "the demo's partial example, with its answers",
                           {module: self.mm.partial_text(self.solution)}, "example",
                           broken=[(by_name[m][1], list(by_name[m][3]))
                                   for m in self.mm.PARTIAL_MUTANTS])
        if name == "template":
            return Variant("blank", name, "the student template as released, answers null",
                           {module: self.template}, "template", everything=True,
                           statuses=("blank",))
        if name == "template_some_answers":
            return Variant("blank", name, "the template's stubs, some questions answered",
                           {module: self.template}, "random", everything=True,
                           statuses=("blank",))
        if name == "syntax_error":
            return Variant("broken", name, "a syntax error (a def without its colon)",
                           {module: ref + SYNTAX_ERROR}, "mostly", everything=True,
                           statuses=("not_importable",))
        if name == "missing_function":
            return Variant("broken", name, f"{VICTIM} deleted",
                           {module: without_function(ref, VICTIM)}, "key",
                           broken=[(VICTIM, None)])
        if name == "misnamed_case":
            return Variant("broken", name, "the module uploaded as DP_basics.py",
                           {"DP_basics.py": ref}, "key")
        if name == "misnamed_other":
            return Variant("broken", name, "the module uploaded as solution.py",
                           {"solution.py": ref}, "key", everything=True, statuses=("no_module",))
        if name == "malformed_answers":
            return Variant("broken", name, "answers.yml that is not valid YAML",
                           {module: ref}, "malformed")
        if name == "notebook":
            return Variant("broken", name, f"{ASSIGNMENT}.ipynb (reference code) instead of "
                           f"{module}", {f"{ASSIGNMENT}.ipynb": notebook_text(self.solution, ref)},
                           "key")
        if name == "no_files":
            return Variant("broken", name, "neither the module nor an answers file",
                           {"notes.txt": "I could not get it to work, sorry.\n"}, "none",
                           everything=True, statuses=("no_module",))
        if name == "import_loop":
            return Variant("hostile", name, "a busy loop at import (120 s)",
                           {module: ref + HOSTILE_HEADER.format(what="busy loop at import")
                            + IMPORT_LOOP}, "key", everything=True,
                           statuses=("flagged",))
        if name == "sleep_forever":
            return Variant("hostile", name, f"{SLEEPER} sleeps 600 s",
                           {module: ref + HOSTILE_HEADER.format(what="a call that sleeps")
                            + SLEEPS}, "key", broken=[(SLEEPER, None)],
                           statuses=("timed_out",))
        if name == "reads_secrets":
            return Variant("hostile", name, f"{VICTIM} looks for the key, the hidden tests and "
                           "the solution, and answers wrongly if it can read one",
                           {module: ref + HOSTILE_HEADER.format(what="reads the grader's files")
                            + READS_SECRETS}, "key", uncertain=[VICTIM],
                           assumes="the sandbox hides the grader's files (namespace isolation)",
                           statuses=("flagged",))
        if name == "memory_hog":
            return Variant("hostile", name, f"{VICTIM} allocates and touches ~1 GiB",
                           {module: ref + HOSTILE_HEADER.format(what="memory hog")
                            + MEMORY_HOG}, "key", uncertain=[VICTIM],
                           statuses=("ok", "timed_out"))  # touching 1 GiB can take seconds
        if name == "fork_bomb":
            return Variant("hostile", name, f"{VICTIM} forks up to 100 children per call",
                           {module: ref + HOSTILE_HEADER.format(what="fork bomb")
                            + FORK_BOMB}, "key", uncertain=[VICTIM],
                           # children left running, or the forking cut by the time budget
                           statuses=("flagged", "timed_out"))
        raise ValueError(f"unknown variant {name}")


# Every variant that appears once, most telling first (a small --count takes the first ones).
SPECIALS = ["reference", "mutant", "template", "syntax_error", "reads_secrets",
            "partial_example", "misnamed_case", "notebook", "missing_function", "misnamed_other",
            "malformed_answers", "alt_arithmetic", "memory_hog", "sleep_forever", "import_loop",
            "fork_bomb", "alt_handrolled", "no_files", "template_some_answers"]
# The rest of the class: (variant, weight).
COMMON = [("reference", 50), ("mutant", 30), ("template", 8), ("template_some_answers", 4),
          ("partial_example", 4), ("alt_arithmetic", 2), ("alt_handrolled", 2)]
LATENESS = ["late_1d", "beyond", "grace", "late_2d", "late_3d"]  # first ones go to references


# --------------------------------------------------------------------------- people and times

FIRST = ["Ada", "Alan", "Amara", "Anh", "Björn", "Chen", "Chiara", "Dmitri", "Élodie", "Emeka",
         "Fatima", "Grace", "Hiro", "Ines", "Jamal", "José", "Kai", "Lena", "Li", "Maya",
         "Mehmet", "Nadia", "Noah", "Olu", "Priya", "Rafael", "Sara", "Søren", "Tariq", "Uma",
         "Valentina", "Wei", "Yara", "Zoë"]
LAST = ["Abebe", "Bauer", "Castillo", "Dubois", "Eriksen", "Fernández", "García", "Haddad",
        "Ivanova", "Johnson", "Kim", "Kowalski", "Larsen", "Müller", "Nakamura", "Nguyen",
        "O'Brien", "Okafor", "Patel", "Quinn", "Rossi", "Schmidt", "Singh", "Smith-Jones", "Tanaka",
        "Usman", "Van der Berg", "Wang", "Xu", "Yilmaz", "Zhang"]


def _ascii(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text)
                   if c.isascii() and (c.isalnum() or c in "-")).lower()


class People:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sids: set[str] = set()
        self.emails: set[str] = set()

    def person(self) -> dict[str, str]:
        first, last = self.rng.choice(FIRST), self.rng.choice(LAST)
        sid = f"0{self.rng.randrange(10**6, 10**7)}"
        while sid in self.sids:
            sid = f"0{self.rng.randrange(10**6, 10**7)}"
        self.sids.add(sid)
        email = f"{_ascii(first)}.{_ascii(last)}@university.example.edu"
        n = 2
        while email in self.emails:
            email = f"{_ascii(first)}.{_ascii(last)}{n}@university.example.edu"
            n += 1
        self.emails.add(email)
        return {"name": f"{first} {last}", "sid": sid, "email": email}


def created_at(rng: random.Random, due: datetime, lateness: str | None,
               grace: float) -> datetime:
    minutes = {
        None: -rng.uniform(5, 7 * 1440),
        "grace": rng.uniform(1, max(1.5, grace - 1)),
        "late_1d": grace + rng.uniform(1, 1439),
        "late_2d": grace + 1440 + rng.uniform(1, 1439),
        "late_3d": grace + 2880 + rng.uniform(1, 1439),
        "beyond": grace + 4320 + rng.uniform(1, 4 * 1440),
    }[lateness]
    stamp = due + timedelta(minutes=minutes, microseconds=rng.randrange(10**6))
    return stamp.astimezone(timezone.utc)


# --------------------------------------------------------------------------- answers


def answers_content(profile: str, rng: random.Random, assignment: Assignment) -> tuple[str, str]:
    """(file name, content) of an answers file; name '' for none."""
    questions = assignment.bank.questions
    key = {q.id: (list(q.answer) if q.multiple else q.answer[0]) for q in questions}
    if profile == "none":
        return "", ""
    if profile == "template":
        return "answers.yml", (TEMPLATE / "answers.yml").read_text()
    if profile == "example":
        return "answers.yml", (assignment.root / "examples" / "partial" / "answers.yml") \
            .read_text()
    if profile == "malformed":
        return "answers.yml", ("q01: B\nq02: [C\n"
                               "q03: A\n")
    answers = dict(key)
    if profile in ("mostly", "random"):
        wrong = len(questions) if profile == "random" else rng.randint(1, 6)
        for q in rng.sample(questions, wrong):
            if profile == "random" and rng.random() < 0.25:
                answers[q.id] = None
            elif q.multiple:
                answers[q.id] = sorted(rng.sample(q.letters, rng.randint(1, len(q.letters))))
            else:
                answers[q.id] = rng.choice(q.letters)
    if profile == "json":
        return "answers.json", json.dumps(answers, indent=2) + "\n"
    return "answers.yml", yaml.safe_dump(answers, sort_keys=False)


# --------------------------------------------------------------------------- expectations


def expectation(variant: Variant, folder: Path, assignment: Assignment, points: Points,
                penalty: float) -> dict:
    files = locate(folder, assignment.config.module)
    mc = grade_answers(assignment.bank, files.answers).score
    coding_max = assignment.config.coding.points
    everything = variant.everything
    if files.module is None and files.notebook is None:
        everything = True  # the grader finds no module: every coding test fails
    if files.module is None and files.notebook is not None:
        try:
            compile(extract_module(files.notebook, assignment.config.module).source,
                    "notebook", "exec")
        except (NotebookError, SyntaxError):
            everything = True
    if everything:
        low = high = 0.0
    else:
        low = high = coding_max
        for function, must in variant.broken:
            if must is None:  # every test of the function fails: exact per kind of grader
                cpu, gpu = points.full_loss(function)
                low -= max(cpu, gpu)
                high -= min(cpu, gpu)
            else:
                low -= points.max_loss(function)
                high -= points.must_lose(must)
        for function in variant.uncertain:
            low -= points.max_loss(function)
    low, high = max(0.0, low), max(0.0, high)
    exact = low if abs(high - low) < 1e-9 else None
    if variant.assumes:
        exact = high  # what a sandbox that holds gives
    factor = 1.0 - penalty
    return {
        "multiple_choice": mc,
        "coding": _r(exact),
        "coding_range": [_r(low), _r(high)],
        "total": _r((mc + exact) * factor) if exact is not None else None,
        "total_range": [_r((mc + low) * factor), _r((mc + high) * factor)],
        "module_found": files.module is not None or files.notebook is not None,
        "upload_warnings": files.warnings,
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


# --------------------------------------------------------------------------- writing


def plan(count: int, rng: random.Random, mutants: list[str]) -> list[str]:
    names = SPECIALS[:count]
    names += rng.choices([n for n, _w in COMMON], weights=[w for _n, w in COMMON],
                         k=max(0, count - len(names)))
    rng.shuffle(names)
    order = rng.sample(mutants, len(mutants))  # every mutant before any repeats
    seen = 0
    for i, name in enumerate(names):
        if name == "mutant":
            names[i] = f"mutant:{order[seen % len(order)]}"
            seen += 1
    return names


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _ruby_time(stamp: datetime) -> str:
    utc = stamp.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond:06d}000 Z"


def metadata_entry(key: str, people: list[dict], stamp: datetime, tagged: bool,
                   history: datetime | None) -> str:
    lines = [f"{key}:", "  :submitters:"]
    for p in people:
        lines += [f"  - :name: {_q(p['name'])}", f"    :sid: '{p['sid']}'",
                  f"    :email: {p['email']}"]
    tag = " !ruby/hash:ActiveSupport::HashWithIndifferentAccess" if tagged else ""
    lines += [f"  :created_at: {_ruby_time(stamp)}", "  :score: 0.0", "  :status: processed",
              f"  :results:{tag}", "    score: 0.0", "    tests: []",
              "    output: This assignment does not have an autograder configured.",
              "    extra_data: ", "    visibility: ", "    leaderboard: []"]
    if history is None:
        lines.append("  :history: []")
    else:
        lines += ["  :history:", "  - :submitters: []", f"    :created_at: {_ruby_time(history)}",
                  "    :score: 0.0", "    :status: processed", "    :results: {}",
                  f"    :id: {key.rsplit('_', 1)[1]}0"]
    return "\n".join(lines) + "\n"


def write_zip(folder: Path, target: Path) -> None:
    stamp = (2026, 12, 15, 12, 0, 0)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            name = path.relative_to(folder.parent).as_posix()
            if path.is_dir():
                info = zipfile.ZipInfo(name + "/", stamp)
                info.external_attr = (0o40755 << 16) | 0x10
                zf.writestr(info, b"")
            else:
                info = zipfile.ZipInfo(name, stamp)
                info.external_attr = 0o100644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())


def generate(out: Path, count: int, seed: int, make_zip: bool) -> dict:
    rng = random.Random(seed)
    assignment = load_assignment(ASSIGNMENT, Project.find())
    config = assignment.config
    points = hidden_points(assignment)
    variants = Variants(assignment)
    due = parse_timestamp(config.due) if config.due else datetime(2026, 12, 15, tzinfo=timezone.utc)
    grace = config.late.grace_minutes

    names = plan(count, rng, variants.mutants)
    ids = rng.sample(range(200_000_000, 300_000_000), count)
    keys = [f"submission_{i}" for i in ids]
    export = out / f"assignment_{rng.randrange(1_000_000, 9_999_999)}_export"
    export.mkdir(parents=True)

    # Group submissions and lateness, spread deterministically.
    groups = set(rng.sample(range(count), min(count, max(1 if count >= 4 else 0,
                                                         round(count * 0.04)))))
    late_count = min(count, max(min(count // 4, len(LATENESS)), round(count * 0.12)))
    references = [i for i, n in enumerate(names) if n == "reference"]
    others = [i for i in range(count) if i not in references]
    rng.shuffle(references)
    rng.shuffle(others)
    late_at = (references[:3] + others + references[3:])[:late_count]
    lateness = {i: LATENESS[n] if n < len(LATENESS) else rng.choice(LATENESS)
                for n, i in enumerate(late_at)}
    tagged = set(rng.sample(range(count), min(count, 2)))

    people = People(rng)
    records: dict[str, dict] = {}
    metadata = ["---\n"]
    for index, (key, name) in enumerate(zip(keys, names, strict=True)):
        variant = variants.build(name)
        folder = export / key
        folder.mkdir()
        for file, content in variant.files.items():
            (folder / file).write_text(content, encoding="utf-8")
        profile = variant.answers
        if profile == "key" and rng.random() < 0.15:
            profile = "json"
        elif profile == "key" and variant.category == "correct" and rng.random() < 0.3:
            profile = "mostly"
        answers_name, answers = answers_content(profile, rng, assignment)
        if answers_name:
            (folder / answers_name).write_text(answers, encoding="utf-8")
        submitters = [people.person() for _ in range(rng.randint(2, 3) if index in groups
                                                      else 1)]
        stamp = created_at(rng, due, lateness.get(index), grace)
        history = stamp - timedelta(hours=rng.uniform(1, 48)) if rng.random() < 0.2 else None
        metadata.append(metadata_entry(key, submitters, stamp, index in tagged, history))
        late = late_status(stamp, config.due, config.late)
        penalty = late.penalty if late else 0.0
        record = {
            "category": variant.category,
            "variant": variant.name,
            "description": variant.description,
            "answers": profile,
            "submitters": submitters,
            "group": len(submitters) > 1,
            "created_at": stamp.isoformat(),
            "lateness": lateness.get(index, "on_time"),
            "late": asdict(late) if late else None,
            **expectation(variant, folder, assignment, points, penalty),
            "statuses": list(variant.statuses),
        }
        if variant.assumes:
            record["assumes"] = variant.assumes
        records[key] = record
    (export / "submission_metadata.yml").write_text("".join(metadata), encoding="utf-8")

    archive = None
    if make_zip:
        archive = out / f"{export.name}.zip"
        write_zip(export, archive)

    ordered = dict(sorted(records.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[1])))
    categories: dict[str, int] = {}
    for r in ordered.values():
        categories[r["category"]] = categories.get(r["category"], 0) + 1
    expected = {
        "generator": "scripts/make_class_export.py",
        "seed": seed,
        "count": count,
        "assignment": ASSIGNMENT,
        "export": export.name,
        "zip": archive.name if archive else None,
        "due": config.due,
        "late_policy": asdict(config.late),
        "max_score": config.multiple_choice.points + config.coding.points,
        "parts": {"multiple_choice": config.multiple_choice.points,
                  "coding": config.coding.points},
        "cpu_coding_scale": round(points.cpu_scale, 6),
        "notes": ("multiple_choice is exact; coding and total are exact where known, else null; "
                  "coding_range and total_range always hold (total after the late penalty), "
                  "on a CPU grader (GPU tests left out and the others scaled) as on a GPU one; "
                  "'assumes' names what an exact value relies on; 'statuses' lists the "
                  "statuses grading may give (two where the grader's speed decides)"),
        "categories": dict(sorted(categories.items())),
        "submissions": ordered,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="submissions (default 200)")
    parser.add_argument("--out", type=Path, default=ROOT / "class-export",
                        help="folder to write into (default class-export/)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--zip", action="store_true", help="also write the export as a .zip")
    parser.add_argument("--force", action="store_true", help="empty --out first")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    out: Path = args.out
    if out.exists() and any(out.iterdir()):
        if not args.force:
            parser.error(f"{out} is not empty (use --force to replace its contents)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    expected = generate(out, args.count, args.seed, args.zip)

    roster = discover(out / expected["export"])  # the export must read back as a class
    if len(roster) != args.count or roster.warnings:
        print(f"error: the export reads back as {len(roster)} submissions, warnings: "
              f"{roster.warnings}", file=sys.stderr)
        return 1
    subs = expected["submissions"].values()
    print(f"wrote {out / expected['export']} ({args.count} submissions"
          + (f", and {expected['zip']}" if expected["zip"] else "") + ")")
    print("categories: " + ", ".join(f"{k} {v}" for k, v in expected["categories"].items()))
    print(f"groups: {sum(r['group'] for r in subs)}, late: "
          f"{sum(1 for r in subs if r['late'] and r['late']['penalty'] > 0)}, within the grace "
          f"period: {sum(1 for r in subs if r['lateness'] == 'grace')}")
    print(f"expected scores: {out / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
