"""Run the question bank's code snippets and compare them with their recorded outcomes.

A snippet backs a question whose answer is "what happens when this runs". Each runs in a fresh
``python -I`` process (no user site, no PYTHONPATH, no cwd on sys.path) so the result does not
depend on the caller's imports or environment, and so the trusted grader never imports torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograder.project.question_bank import Environment, Outcome, Question


# The harness runs the snippet as __main__ through runpy, so `if __name__ == "__main__":` guards
# work and multiprocessing's spawn start method can re-import the snippet file in its children.
# An uncaught exception is written as JSON to the result file named on the command line: a
# machine-readable record that the snippet's own stdout/stderr cannot forge by accident.
_HARNESS = r"""
import json, runpy, sys, traceback
code_path, result_path = sys.argv[1], sys.argv[2]
try:
    runpy.run_path(code_path, run_name="__main__")
except BaseException as exc:
    sys.stdout.flush()
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump({"type": type(exc).__name__, "message": str(exc)}, fh)
    traceback.print_exc()
    sys.exit(1)
"""


@dataclass
class SnippetOutcome:
    stdout: str  # stripped
    stderr: str
    returncode: int | None
    exc_type: str | None = None  # class name of an uncaught exception, e.g. "RuntimeError"
    exc_message: str | None = None
    timed_out: bool = False

    def describe(self) -> str:
        if self.timed_out:
            return "timed out"
        if self.exc_type is not None:
            return f"raised {self.exc_type}: {_shorten(self.exc_message or '')}"
        if self.returncode not in (0, None):
            return f"exited with status {self.returncode}; stderr: {_shorten(self.stderr)}"
        return f"printed {self.stdout!r}"


def _shorten(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # One thread per snippet: snippets run in parallel and are tiny, oversubscription only hurts.
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.pop("PYTHONPATH", None)  # -I ignores it anyway; keep the environment honest
    return env


def run_snippet(code: str, timeout: float = 60) -> SnippetOutcome:
    """Run ``code`` as ``__main__`` in a fresh ``python -I`` process and record what happened."""
    with tempfile.TemporaryDirectory(prefix="snippet-") as tmp:
        tmp_path = Path(tmp)
        code_path = tmp_path / "snippet.py"
        result_path = tmp_path / "result.json"
        code_path.write_text(code, encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _HARNESS, str(code_path), str(result_path)],
            cwd=tmp_path,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Own process group, so a timeout also ends the snippet's own children (DDP ranks).
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            stdout, stderr = proc.communicate()
            return SnippetOutcome(stdout.strip(), stderr, None, timed_out=True)
        outcome = SnippetOutcome(stdout.strip(), stderr, proc.returncode)
        if result_path.exists():
            record = json.loads(result_path.read_text(encoding="utf-8"))
            outcome.exc_type = record["type"]
            outcome.exc_message = record["message"]
        return outcome


@functools.lru_cache(maxsize=1)
def current_environment() -> Environment:
    """Classify this machine by ``torch.cuda.device_count()``, asked in a subprocess.

    A subprocess keeps torch (and CUDA initialisation) out of the caller. A CPU-only torch build
    and a CUDA build on a machine without a GPU both count as "no_gpu".
    """
    outcome = run_snippet("import torch\nprint(torch.cuda.device_count())", timeout=120)
    if outcome.exc_type is not None or outcome.timed_out or outcome.returncode != 0:
        raise RuntimeError(f"could not count CUDA devices: {outcome.describe()}")
    count = int(outcome.stdout.splitlines()[-1])
    if count == 0:
        return "no_gpu"
    return "one_gpu" if count == 1 else "multi_gpu"


def compare_outcome(expected: Outcome, actual: SnippetOutcome) -> list[str]:
    """Problems with ``actual`` against ``expected``; empty when it matches."""
    if actual.timed_out:
        return ["the snippet timed out"]
    if expected.raises:
        if actual.exc_type is None:
            return [f"expected it to raise {' or '.join(expected.raises)}, "
                    f"but it {actual.describe()}"]
        problems = []
        message = _shorten(actual.exc_message or "")
        if actual.exc_type not in expected.raises:
            problems.append(f"expected {' or '.join(expected.raises)}, "
                            f"but it raised {actual.exc_type}: {message}")
        if expected.match and not re.search(expected.match, actual.exc_message or ""):
            problems.append(f"exception message {message!r} does not match {expected.match!r}")
        return problems
    if actual.exc_type is not None or actual.returncode != 0:
        return [f"expected stdout {expected.stdout!r}, but it {actual.describe()}"]
    if actual.stdout != (expected.stdout or "").strip():
        return [f"expected stdout {expected.stdout!r}, got {actual.stdout!r}"]
    return []


def check_snippet(question: Question, env: Environment, timeout: float = 60) -> list[str]:
    """Run the question's snippet and compare with its expectation for ``env``.

    Returns problems, each naming the question; empty when it matches (or there is no snippet).
    """
    if question.snippet is None:
        return []
    expected = question.snippet.expect[env]
    actual = run_snippet(question.snippet.code, timeout=timeout)
    return [f"{question.id} ({env}): {p}" for p in compare_outcome(expected, actual)]
