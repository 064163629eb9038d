"""The Gradescope bundle, run end to end as Gradescope runs it; the Docker files; --require-gpu.

Each case unpacks dist/dp_basics-gradescope.zip (built into a temporary folder) into a folder
standing in for /autograder (AUTOGRADER_GRADESCOPE_ROOT), puts a submission into submission/ and
runs the real run_autograder script with this venv's Python (AUTOGRADER_PYTHON) instead of the
venv setup.sh would install. The three real gradings run once, in parallel, in a module fixture.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from repo_project import REPO

from autograder.gradescope.entry import (
    GRADESCOPE_DEFAULT_TIMEOUT_S,
    GRADING_MARGIN_S,
    GradingFailed,
    _grade_timeout,
    fallback_results,
)
from autograder.project.assignment import load_assignment
from autograder.project.config import load_config
from autograder.project.markers import reference, strip_solutions
from autograder.project.schemas import validate
from autograder.release.build import answers_template, key_answers, torch_requirement
from autograder.release.gradescope_bundle import build_bundle, bundle_path

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = load_assignment("dp_basics", REPO)
SOURCE = ASSIGNMENT.solution.read_text()
KEY = yaml.safe_dump(key_answers(ASSIGNMENT.bank))
TORCH = torch_requirement(REPO)
CONFIG_DUE = load_config(REPO)["dp_basics"].due


@pytest.mark.parametrize("name", sorted(load_config(REPO)))
def test_grading_fits_gradescopes_default_timeout_with_margin(name):
    # Gradescope stops run_autograder at its autograder timeout (10 minutes unless the course
    # sets more): the grade command's own limit must end first, with a minute to spare, so
    # that results.json (the report, or the fallback) is always written.
    timeout = _grade_timeout(name, REPO)
    assert timeout == load_config(REPO)[name].submission_timeout + GRADING_MARGIN_S
    assert timeout <= GRADESCOPE_DEFAULT_TIMEOUT_S - 60, f"{name}: {timeout:g} s"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle("dp_basics", REPO,
                        tmp_path_factory.mktemp("dist") / "dp_basics-gradescope.zip")


def autograder_root(base: Path, bundle: Path, files: dict[str, str],
                    metadata: dict | None = None) -> Path:
    """What Gradescope's harness sets up: source/ from the zip, run_autograder, submission/."""
    root = base / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    run = root / "run_autograder"
    run.write_bytes((root / "source" / "run_autograder").read_bytes())
    run.chmod(0o755)
    (root / "submission").mkdir()
    for name, text in files.items():
        (root / "submission" / name).write_text(text)
    if metadata is not None:
        (root / "submission_metadata.json").write_text(json.dumps(metadata))
    return root


def run_autograder(root: Path, python: str = sys.executable,
                   env: dict[str, str] | None = None) -> tuple[dict, str]:
    env = {**(os.environ if env is None else env), "AUTOGRADER_GRADESCOPE_ROOT": str(root),
           "AUTOGRADER_PYTHON": python}
    proc = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # Gradescope reads results.json only
    results = json.loads((root / "results" / "results.json").read_text())
    validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    return results, proc.stdout + proc.stderr


# Before the due date, whatever today is: Gradescope's late due date (in 3000) holds back the
# multiple choice's right or wrong (tests/grading/test_visibility.py grades after one too).
ON_TIME = {"created_at": "2026-12-10T12:00:00.000000-05:00",
           "assignment": {"due_date": CONFIG_DUE, "late_due_date": "3000-01-01T00:00:00Z"}}
SUBMISSIONS = {
    "reference": ({"dp_basics.py": reference(SOURCE), "answers.yml": KEY},
                  {**ON_TIME, "users": [{"name": "Ada Lovelace", "email": "ada@example.org",
                                         "id": 1}]}),
    "blank": ({"dp_basics.py": strip_solutions(SOURCE),
               "answers.yml": answers_template(ASSIGNMENT)}, None),
    "syntax_error": ({"dp_basics.py": "def wrap_data_parallel(model)\n    return model\n",
                      "answers.yml": KEY}, ON_TIME),
}


@pytest.fixture(scope="module")
def graded(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, str]]:
    def one(name: str) -> tuple[dict, str]:
        files, metadata = SUBMISSIONS[name]
        return run_autograder(autograder_root(tmp_path_factory.mktemp(name), bundle, files,
                                              metadata))

    with ThreadPoolExecutor(len(SUBMISSIONS)) as pool:  # one grading takes ~15 s
        return dict(zip(SUBMISSIONS, pool.map(one, SUBMISSIONS), strict=True))


# ----------------------------------------------------------------------------- the bundle


def test_bundle_layout(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        setup = archive.read("setup.sh").decode()
        requirements = archive.read("requirements.txt").decode().splitlines()
    for name in ("setup.sh", "run_autograder"):  # at the zip's root, executable
        assert name in names and modes[name] & stat.S_IXUSR
    for name in ("grading.yml", "pyproject.toml", "autograder/grading/grade.py",
                 "autograder/cli.py",
                 "schemas/gradescope_results.schema.json", "assignments/dp_basics/questions.yml",
                 "assignments/dp_basics/probes.py",
                 "assignments/dp_basics/tests/hidden/test_part_a_data_parallel.py"):
        assert name in names, name
    assert not any(n.startswith(("assignments/dp_basics/solution/",
                                 "assignments/dp_basics/examples/")) or "__pycache__" in n
                   for n in names), "the reference solution stays out of the grading image"
    cpu_index = "https://download.pytorch.org/whl/cpu"
    assert f'install --no-cache-dir "{TORCH}" --index-url {cpu_index}' in setup
    assert TORCH in requirements
    for script in ("setup.sh", "run_autograder"):  # shell syntax, without running them
        with zipfile.ZipFile(bundle) as archive:
            text = archive.read(script).decode()
        check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, f"{script}: {check.stderr}"
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==\S+", line) for line in requirements
               if not line.startswith("#")), "every dependency pinned"


# ----------------------------------------------------------------------------- end to end


def test_reference_scores_full_marks_with_the_students_name(graded) -> None:
    results, output = graded["reference"]
    # Before the due date the student sees the coding part, told so; staff see the full 100.
    assert results["score"] == 70 and "This score counts the coding part only" in \
        results["output"]
    assert re.search(r"^total +100 / 100$", output, re.MULTILINE)
    assert results["output"].startswith("Submitted by Ada Lovelace.\n")
    assert all(t["score"] == t["max_score"] for t in results["tests"] if t.get("status"))
    assert "Late: Submitted on time." in results["output"]  # as a batch says it
    assert not [t for t in results["tests"] if t["tags"] == ["late"]]


def test_blank_template_scores_zero(graded) -> None:
    results, _ = graded["blank"]
    assert results["score"] == 0
    coding = [t for t in results["tests"] if "coding" in t["tags"] and t.get("status")]
    assert coding and all(t["status"] == "failed" for t in coding)
    assert any("not implemented yet" in t["output"] for t in coding)


def test_syntax_error_fails_the_code_but_grades_the_answers(graded) -> None:
    results, output = graded["syntax_error"]
    assert results["score"] == 0  # the answers count once shown, after the due date
    assert re.search(r"^multiple_choice +30 / 30$", output, re.MULTILINE)
    coding = [t for t in results["tests"] if "coding" in t["tags"] and t.get("status")]
    assert coding and all("SyntaxError" in t["output"] for t in coding)


def test_a_crash_of_the_grader_still_leaves_valid_results(bundle: Path, tmp_path: Path) -> None:
    root = autograder_root(tmp_path, bundle, SUBMISSIONS["reference"][0])
    config = root / "source" / "grading.yml"
    config.write_text(config.read_text() + "\n  broken: [\n")
    results, output = run_autograder(root)
    assert results["score"] == 0 and results["tests"] == []
    assert "contact the instructor" in results["output"]
    assert "Error: error:" in results["output"] and "grading.yml is not valid YAML" in \
        results["output"]
    assert "grading.yml is not valid YAML" in results["extra_data"]["autograder_error"]
    assert "writing a fallback results.json" in output  # for the instructor, in results/stdout


def test_results_even_when_python_cannot_start(bundle: Path, tmp_path: Path) -> None:
    root = autograder_root(tmp_path, bundle, SUBMISSIONS["reference"][0])
    results, output = run_autograder(root, python=str(tmp_path / "no-such-python"))
    assert results["score"] == 0
    assert "contact the instructor" in results["output"]
    assert "could not start (exit status 127)" in results["output"]
    assert "wrote no results.json" in output


def _unstartable_sandbox(root: Path) -> None:
    """The bundle's sandboxes cannot start: probes.py (2 MB) does not fit in the sandbox's 1 MiB
    tmpfs, so the isolation launcher fails (in namespaces mode, the only one that copies it)."""
    from autograder.sandbox.isolation import detect

    if detect().mode != "namespaces":
        pytest.skip("only namespaces mode copies the sandbox folder into a tmpfs")
    config = root / "source" / "grading.yml"
    text = config.read_text()
    assert "      memory_mb: 4096\n" in text
    config.write_text(text.replace("      memory_mb: 4096\n", "      memory_mb: 4096\n"
                                                              "      disk_mb: 1\n", 1))
    with open(root / "source" / "assignments" / "dp_basics" / "probes.py", "a") as probes:
        probes.write("\n# more than a 1 MiB disk holds\n" + ("#" * 99 + "\n") * 20000)


@pytest.mark.parametrize("broken", ["isolation asked for cannot start", "sandbox cannot start"])
def test_a_grader_that_cannot_isolate_or_start_a_sandbox_asks_the_student_to_contact_staff(
        bundle: Path, tmp_path: Path, broken: str) -> None:
    root = autograder_root(tmp_path, bundle, SUBMISSIONS["reference"][0])
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_UNSAFE_NO_ISOLATION"}
    if broken == "sandbox cannot start":
        _unstartable_sandbox(root)
        told = "the sandbox could not start: the isolation launcher failed"
    else:
        env["AUTOGRADER_ISOLATION"] = "uid"
        told = "student code cannot be isolated here (AUTOGRADER_ISOLATION=uid"
    results, output = run_autograder(root, env=env)
    if results.get("score") and broken != "sandbox cannot start":
        pytest.skip("uid mode works on this machine")
    # The student: no verdict, the grader's failure, ask the staff. Never "your code failed".
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The autograder failed on its side") and \
        "contact the instructor (course staff)" in results["output"]
    assert "your code" not in results["output"]
    # The instructor (run_autograder's output, kept by Gradescope): what failed, how to fix it.
    assert told in output and "writing a fallback results.json" in output
    # Told apart by `autograder grade`'s exit status: the set-up cannot isolate code at all.
    misconfigured = "the autograder is misconfigured" in results["output"]
    assert misconfigured == (broken != "sandbox cannot start")
    if broken != "sandbox cannot start":
        assert "To fix:" in output


@pytest.mark.parametrize("error", ["", "Traceback ...\nKeyError: 'x'", "é\x00\"\\" * 3000])
def test_fallback_results_are_valid(error: str) -> None:
    validate(fallback_results(GradingFailed(error), 1.5), "gradescope_results.schema.json",
             "fallback", REPO.schemas)


# ----------------------------------------------------------------------------- docker


def _makefile_torch() -> str:
    found = re.search(r"^TORCH\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found
    return found.group(1)


def _copied_sources(dockerfile: Path) -> list[str]:
    text = dockerfile.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.MULTILINE))
    sources = []
    for line in re.findall(r"^(?:COPY|ADD) (.+)$", text, re.MULTILINE):
        parts = [p for p in line.split() if not p.startswith("--")]
        for source in parts[:-1]:
            sources.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], source))
    return sources


@pytest.mark.parametrize("name", ["Dockerfile.gpu", "Dockerfile.gradescope"])
def test_dockerfiles_copy_files_that_exist(name: str) -> None:
    dockerfile = ROOT / "docker" / name
    allowed = [line[1:] for line in (ROOT / "docker" / f"{name}.dockerignore").read_text()
               .splitlines() if line.startswith("!")]
    sources = _copied_sources(dockerfile)
    assert sources
    for source in sources:
        if source.startswith("dist/"):  # made by `autograder gradescope`, not committed
            assert source == bundle_path("dp_basics", REPO).relative_to(ROOT).as_posix()
        else:
            assert (ROOT / source).exists(), f"{name} copies {source}, which does not exist"
        assert any(Path(source).match(pattern.rstrip("/")) or source.rstrip("/") ==
                   pattern.rstrip("/") for pattern in allowed), f"{source} is .dockerignored"


def test_dockerfiles_pin_the_makefiles_torch() -> None:
    torch = _makefile_torch()
    assert torch == TORCH
    gpu = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    assert re.search(rf"^ARG TORCH={re.escape(torch)}$", gpu, re.MULTILINE)
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:[\w.-]+-runtime-", gpu, re.MULTILINE)
    assert 'ENTRYPOINT ["autograder", "grade"]' in gpu
    gradescope = (ROOT / "docker" / "Dockerfile.gradescope").read_text()
    assert re.search(r"^FROM gradescope/autograder-base:\S+$", gradescope, re.MULTILINE)
    assert "/autograder/source" in gradescope and "setup.sh" in gradescope


# ----------------------------------------------------------------------------- --require-gpu


def test_require_gpu_fails_fast_without_cuda(tmp_path: Path) -> None:
    count = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=180).stdout.strip()
    if count != "0":
        pytest.skip("this machine has a GPU")
    (tmp_path / "dp_basics.py").write_text(reference(SOURCE))
    result = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", str(tmp_path),
                             "-a", "dp_basics", "-o", str(tmp_path / "out"), "--require-gpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "error: --require-gpu: torch sees no CUDA device" in result.stderr
    assert not (tmp_path / "out").exists()
