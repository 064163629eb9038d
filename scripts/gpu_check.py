"""The parts of scripts/gpu_check.sh, one subcommand each; the shell script runs them.

    python scripts/gpu_check.py PART WORK     # PART: environment, verify_key, grading, mutants,
                                              #       batch, memory; writes WORK/parts/PART.json
    python scripts/gpu_check.py summary WORK OUT_JSON

Each part prints what it does (the shell script puts it in the log) and writes a JSON record
{"ok": bool, "problems": [...], ...details}. `summary` merges the records with the shell's
status of each part (ok, failed, timed out, not run) into one JSON summary.

Mode: GPU_CHECK_DRY=1 is the dry run on a machine without a GPU: the same parts with the
expectations of a CPU grader (GPU tests left out, mutants caught by the simulated-GPU tests), so
the script's logic is exercised anywhere. Without it, the machine must have a CUDA GPU.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "dp_basics"
DRY = os.environ.get("GPU_CHECK_DRY") == "1"
PY = sys.executable
PARTS = ("environment", "verify_key", "grading", "mutants", "batch", "memory")
GENERIC_MESSAGE = "a check of this behaviour failed"  # autograder.runner.pytest_plugin's fallback

# One mutant per GPU test: (mutant, GPU test (display-name prefix), words its message must hold,
# True where one GPU tells it from the reference, else why one GPU cannot). Mutants of
# scripts/make_mutants.py, written into the work folder (their EXPECT_FAIL headers name the
# simulated-GPU tests that catch them), or made here (GENERATED).
MUTANTS = [
    ("wrap_forgets_move", "wrap_data_parallel: puts the parameters on cuda:ids[0]",
     ["cuda:0"], "with one device id, nn.DataParallel moves the module to it itself"),
    ("wrap_gathers_on_last", "wrap_data_parallel: puts the parameters on cuda:ids[0]",
     ["cuda:"], "ids[-1] == ids[0], so the output lands on cuda:0 anyway"),
    ("match_forgets_device", "match_input_dtype: moves tensors to a real GPU", ["cuda:0"], True),
    ("setup_always_gloo", "setup_ddp: picks nccl and pins cuda:rank on real GPUs", ["nccl"], True),
    ("wrap_ddp_no_device_ids", "wrap_ddp: on a real GPU wraps with device_ids", ["device_ids"],
     True),
    ("step_forgets_move", "ddp_train_step: moves a CPU batch to the model's real GPU",
     ["device"], True),
    ("syncbn_not_converted", "convert_to_sync_batchnorm: under DDP on real GPUs",
     ["SyncBatchNorm"], True),
]
GENERATED = {  # name -> (old, new, EXPECT_FAIL on simulated GPUs)
    "syncbn_not_converted": (
        "    return nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group)\n",
        "    return model\n",
        ["convert_to_sync_batchnorm: under DDP on GPUs, statistics cover every rank's batch"]),
}


# ----------------------------------------------------------------------------- helpers


def say(*args: object) -> None:
    print(*args, flush=True)


def assignment():
    """The checked assignment, of the project found from here (as `autograder` finds it)."""
    from autograder.project.assignment import load_assignment
    from autograder.project.paths import Project

    return load_assignment(ASSIGNMENT, Project.find())


def gpu_count() -> int:
    out = subprocess.run([PY, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, timeout=120)
    return int(out.stdout.split()[-1]) if out.returncode == 0 and out.stdout.split() else 0


def gpu_tests() -> list[dict]:
    """Hidden tests marked @pytest.mark.gpu: display name and how many GPUs each needs."""
    tests = []
    for path in sorted(assignment().hidden_tests.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                text = ast.unparse(deco)
                if text == "pytest.mark.gpu" or text.startswith("pytest.mark.gpu("):
                    need = int(deco.args[0].value) if isinstance(deco, ast.Call) else 1
                    name = (ast.get_docstring(node) or node.name).splitlines()[0]
                    tests.append({"name": name, "gpus": need, "test": node.name})
    return tests


def specific(message: str, words: list[str]) -> list[str]:
    """Why a failure message would not help a student (empty: it helps)."""
    problems = []
    if not message.strip():
        problems.append("empty message")
    if GENERIC_MESSAGE in message:
        problems.append("only the generic message")
    if "Traceback" in message:
        problems.append("a traceback instead of a message")
    missing = [w for w in words if w not in message]
    if missing:
        problems.append(f"does not mention {missing}")
    return problems


def find(report: dict, prefix: str) -> dict | None:
    return next((t for t in report["tests"] if t["name"].startswith(prefix)), None)


def submission(folder: Path, module: str, answers: dict | None = None) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dp_basics.py").write_text(module)
    if answers is not None:
        (folder / "answers.yml").write_text(yaml.safe_dump(answers, sort_keys=False))
    return folder


def sources() -> dict[str, str]:
    from autograder.project.markers import reference, strip_solutions

    text = assignment().solution.read_text()
    return {"reference": reference(text), "blank": strip_solutions(text)}


def key() -> dict:
    from autograder.release.build import key_answers

    return key_answers(assignment().bank)


def grade(folder: Path, out: Path, require_gpu: bool = False) -> tuple[int, str, dict | None]:
    """`autograder grade` as a TA runs it: exit code, its output, the report (None if absent)."""
    # The staff's full copy: out/ holds what the student may see (no multiple choice before the
    # due date).
    command = [PY, "-m", "autograder.cli", "grade", str(folder), "--assignment", ASSIGNMENT,
               "--out", str(out), "--staff-out", str(out / "staff")] + \
        (["--require-gpu"] if require_gpu else [])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    report = out / "staff" / "report.json"
    return (proc.returncode, proc.stdout + proc.stderr,
            json.loads(report.read_text()) if report.exists() else None)


def jobs() -> int:
    return int(os.environ.get("GPU_CHECK_JOBS") or max(1, min(7, (os.cpu_count() or 2) // 2)))


# ----------------------------------------------------------------------------- parts


def part_environment(work: Path) -> dict:
    import platform

    info: dict = {"mode": "dry" if DRY else "gpu", "python": platform.python_version(),
                  "executable": PY, "cpus": os.cpu_count(), "problems": []}
    probe = ("import json, torch; n = torch.cuda.device_count(); print(json.dumps({'torch': "
             "torch.__version__, 'cuda_build': torch.version.cuda, 'gpus': n, 'names': "
             "[torch.cuda.get_device_name(i) for i in range(n)], 'nccl': "
             "torch.distributed.is_nccl_available()}))")
    proc = subprocess.run([PY, "-c", probe], capture_output=True, text=True, timeout=120)
    if proc.returncode:
        info["problems"].append(f"torch failed: {proc.stderr.strip()[-500:]}")
    else:
        info.update(json.loads(proc.stdout.splitlines()[-1]))
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
        info["nvidia_smi"] = (smi.stdout or smi.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["nvidia_smi"] = f"not available: {exc}"
    from autograder.sandbox.isolation import IsolationUnavailable, detect

    gpus = info.get("gpus", 0)
    say(f"python {info['python']} ({PY}), torch {info.get('torch')}, CUDA build "
        f"{info.get('cuda_build')}, {gpus} GPU(s) {info.get('names', [])}")
    say(f"nvidia-smi: {info['nvidia_smi']}")
    try:
        isolation = detect()
    except IsolationUnavailable as exc:  # every grading here would be refused: say why once
        info["isolation"] = {"mode": "refused", "protections": []}
        info["problems"].append(f"isolation: {exc}")
        say(f"isolation refused: {exc}")
    else:
        info["isolation"] = {"mode": isolation.mode, "protections": isolation.protections}
        say(f"isolation in force: {isolation.mode} ({'; '.join(isolation.protections)})")
        if isolation.mode != "namespaces":
            say(f"note: namespaces refused here: the grader uses isolation {isolation.mode!r}")
    if not DRY and not gpus:
        info["problems"].append("no GPU: torch.cuda.device_count() == 0 (use GPU_CHECK_DRY=1 "
                                "on a machine without one)")
    if DRY and gpus:
        say("note: dry run on a machine with a GPU: GPU tests will run, expectations are a CPU's")
    return info


def part_verify_key(work: Path) -> dict:
    proc = subprocess.run([PY, "-m", "autograder.cli", "verify-key", ASSIGNMENT],
                          capture_output=True, text=True, timeout=600)
    say(proc.stdout + proc.stderr)
    rows = [line.split(None, 2) for line in proc.stdout.splitlines()
            if re.match(r"q\d+\s", line)]
    environments = sorted({r[1] for r in rows if len(r) > 1})
    mismatches = [" ".join(r) for r in rows if len(r) > 2 and r[2] != "OK"]
    expected = "no_gpu" if DRY else "one_gpu"
    problems = [f"verify-key: {m}" for m in mismatches]
    if proc.returncode:
        problems.append(f"verify-key exited {proc.returncode}")
    if environments != [expected]:
        problems.append(f"snippets ran as {environments}, expected {expected}")
    return {"exit": proc.returncode, "environment": environments, "snippets": len(rows),
            "mismatches": mismatches, "problems": problems}


def part_grading(work: Path) -> dict:
    texts = sources()
    ref = submission(work / "sub" / "reference", texts["reference"], key())
    blank = submission(work / "sub" / "blank", texts["blank"])
    with ThreadPoolExecutor(2) as pool:
        ref_run = pool.submit(grade, ref, work / "out" / "reference", not DRY)
        blank_run = pool.submit(grade, blank, work / "out" / "blank")
        (ref_code, ref_out, ref_report), (blank_code, _, blank_report) = (
            ref_run.result(), blank_run.result())
    say(ref_out)
    problems: list[str] = []
    info: dict = {"problems": problems}
    if DRY:  # --require-gpu must refuse to grade here, before any work
        code, out, _ = grade(ref, work / "out" / "refused", require_gpu=True)
        info["require_gpu_without_gpu"] = {"exit": code, "message": out.strip()[-300:]}
        if code != 2 or "--require-gpu" not in out:
            problems.append(f"--require-gpu without a GPU: exit {code}, expected 2 ({out!r})")
    if ref_report is None or blank_report is None:
        problems.append(f"no report (reference exit {ref_code}, blank exit {blank_code})")
        return info
    env = ref_report["environment"]
    gpus = env.get("gpus", 0)
    info.update(reference={"score": ref_report["score"], "max_score": ref_report["max_score"],
                           "exit": ref_code},
                blank={"score": blank_report["score"], "max_score": blank_report["max_score"]},
                environment=env, warnings=ref_report["warnings"])
    if abs(ref_report["score"] - ref_report["max_score"]) > 1e-6:
        failed = [f"{t['name']}: {t['message'][:200]}" for t in ref_report["tests"]
                  if t["status"] == "failed"]
        problems.append(f"reference scored {ref_report['score']:g} / "
                        f"{ref_report['max_score']:g}; failed: {failed}")
    if blank_report["score"] != 0:
        problems.append(f"blank template scored {blank_report['score']:g}, expected 0")
    rows, not_run = [], []
    say(f"\nGPU tests (@pytest.mark.gpu), this grader has {gpus} GPU(s):")
    for spec in gpu_tests():
        test = find(ref_report, spec["name"])
        status = test["status"] if test else "missing"
        rows.append({**spec, "status": status, "message": test["message"] if test else ""})
        say(f"  {status:9} needs {spec['gpus']}  {spec['name']}")
        if status != "passed" and test:
            say(f"            {test['message'][:300]}")
        if spec["gpus"] > gpus:
            not_run.append({"name": spec["name"], "why": (
                f"needs {spec['gpus']} GPU(s); this machine has {gpus}"
                + (" (dry run)" if DRY else ""))})
            if status != "excluded":
                problems.append(f"{spec['name']}: {status}, expected excluded (too few GPUs)")
        elif status != "passed":
            problems.append(f"GPU test {status} on a machine with {gpus} GPU(s): {spec['name']}")
    info["gpu_tests"], info["not_run"] = rows, not_run
    return info


def write_mutants(folder: Path) -> Path:
    """scripts/make_mutants.py's mutants and alternative solutions, written into `folder` (each
    part its own, as parts run at once on the GPU machine)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_mutants",
                                                  ROOT / "scripts" / "make_mutants.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.write_mutants(folder)
    return folder


def mutant_module(name: str, reference_text: str, mutants: Path) -> tuple[str, list[str]]:
    """A mutant's source and the simulated-GPU tests that must catch it (`mutants`: the folder
    write_mutants wrote)."""
    if name in GENERATED:
        old, new, expect = GENERATED[name]
        assert reference_text.count(old) == 1, f"{name}: the reference no longer has {old!r}"
        return reference_text.replace(old, new), expect
    text = (mutants / f"{name}.py").read_text()
    expect = [line.removeprefix("# EXPECT_FAIL: ").strip() for line in text.splitlines()
              if line.startswith("# EXPECT_FAIL: ")]
    return text, expect


def part_mutants(work: Path) -> dict:
    reference_text = sources()["reference"]
    gpus = 0 if DRY else gpu_count()
    mutants = write_mutants(work / "mutants" / "mutants")
    folders = {}
    for name, *_ in MUTANTS:
        text, _ = mutant_module(name, reference_text, mutants)
        folders[name] = submission(work / "sub" / name, text)
    with ThreadPoolExecutor(jobs()) as pool:
        runs = dict(zip(folders, pool.map(lambda n: grade(folders[n], work / "out" / n),
                                          folders), strict=True))
    rows, problems = [], []
    for name, gpu_test, words, one_gpu_catches in MUTANTS:
        code, out, report = runs[name]
        _, expect = mutant_module(name, reference_text, mutants)
        row: dict = {"mutant": name, "gpu_test": gpu_test, "problems": []}
        rows.append(row)
        if report is None:
            row["problems"].append(f"no report (exit {code}): {out[-300:]}")
            continue
        test = find(report, gpu_test)
        row["gpu_status"] = test["status"] if test else "missing"
        row["gpu_message"] = test["message"] if test else ""
        catches = one_gpu_catches is True or gpus >= 2
        if DRY or not gpus:
            if row["gpu_status"] != "excluded":
                row["problems"].append(f"GPU test {row['gpu_status']}, expected excluded")
        elif catches:
            if row["gpu_status"] != "failed":
                row["problems"].append(f"GPU test {row['gpu_status']}, expected failed")
            else:
                row["problems"] += [f"GPU test message: {p}"
                                    for p in specific(row["gpu_message"], words)]
        else:
            row["note"] = f"one GPU cannot tell this mistake apart ({one_gpu_catches})"
        row["simulated"] = []
        for prefix in expect:
            sim = find(report, prefix)
            status = sim["status"] if sim else "missing"
            row["simulated"].append({"test": prefix, "status": status,
                                     "message": sim["message"] if sim else ""})
            if status != "failed":
                row["problems"].append(f"simulated test {status}, expected failed: {prefix}")
            else:
                row["problems"] += [f"simulated test message: {p}"
                                    for p in specific(sim["message"], [])]
        say(f"{name}: GPU test {row['gpu_status']}"
            + (f" ({row['gpu_message'][:160]!r})" if row.get("gpu_message") else "")
            + "; simulated: " + ", ".join(s["status"] for s in row["simulated"])
            + "".join(f"\n    PROBLEM {p}" for p in row["problems"]))
        problems += [f"{name}: {p}" for p in row["problems"]]
    return {"mutants": rows, "problems": problems}


class CudaWatch(threading.Thread):
    """Samples /proc while a batch runs: does a runner server (the warm parent of every runner
    and zygote) ever open a GPU device (/dev/nvidiactl, /dev/nvidia-uvm, ...: the CUDA driver
    started, or NVML)? Do its forks? (Not whether libcuda is mapped: `import torch` maps it
    on torch 2.11 with CUDA 13, through libcudart, and starts nothing.)"""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.servers: set[int] = set()
        self.server_reads = 0
        self.server_cuda: list[str] = []
        self.forks_cuda: set[int] = set()
        self.unreadable: set[int] = set()

    @staticmethod
    def _cmdline(pid: int | str) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return ""

    @staticmethod
    def _cuda(pid: int) -> list[str]:
        signs = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                signs.add(f"{target} open")
        return sorted(signs)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for entry in Path("/proc").iterdir():
                runner = "autograder.runner.warm"
                if not entry.name.isdigit() or runner not in self._cmdline(entry.name):
                    continue
                pid = int(entry.name)
                try:
                    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    server = "autograder.batch.local_workers" in self._cmdline(ppid)
                    signs = self._cuda(pid)
                except (OSError, ValueError, IndexError):
                    self.unreadable.add(pid)
                    continue
                if server:
                    self.servers.add(pid)
                    self.server_reads += 1
                    self.server_cuda += [f"pid {pid}: {s}" for s in signs
                                         if f"pid {pid}: {s}" not in self.server_cuda]
                elif signs:
                    self.forks_cuda.add(pid)


def part_batch(work: Path) -> dict:
    texts = sources()
    partial = assignment().root / "examples" / "partial" / "dp_basics.py"
    alt = write_mutants(work / "mutants" / "batch") / "alt_handrolled.py"
    folder = work / "class"
    submission(folder / "reference", texts["reference"], key())
    submission(folder / "partial", partial.read_text())
    submission(folder / "alt_handrolled", alt.read_text())
    out = work / "out" / "class"
    watch = CudaWatch()
    watch.start()
    started = time.monotonic()
    proc = subprocess.run([PY, "-m", "autograder.cli", "batch", str(folder), "--assignment",
                           ASSIGNMENT, "--out", str(out), "--jobs", "2"],
                          capture_output=True, text=True, timeout=900)
    watch.stop.set()
    watch.join()
    say(proc.stdout[-3000:] + proc.stderr[-3000:])
    problems: list[str] = []
    info: dict = {"exit": proc.returncode,
                  "batch_seconds": round(time.monotonic() - started, 1),
                  "runner_servers_seen": len(watch.servers),
                  "runner_server_samples": watch.server_reads,
                  "runner_server_cuda": watch.server_cuda,
                  "forks_with_cuda": len(watch.forks_cuda),
                  "unreadable_processes": len(watch.unreadable), "submissions": {},
                  "problems": problems}
    if proc.returncode:
        problems.append(f"autograder batch exited {proc.returncode}")
    if not watch.servers or not watch.server_reads:
        problems.append("no runner server seen while the batch ran (is it still warm?)")
    if watch.server_cuda:
        problems.append(f"a runner server opened a GPU device: {watch.server_cuda}")
    gpus = 0 if DRY else gpu_count()
    needed = [t for t in gpu_tests() if t["gpus"] <= gpus]
    for report_path in sorted((out / "reports").glob("*/report.json")):
        report = json.loads(report_path.read_text())
        sid = report_path.parent.name
        rows = {t["name"]: (find(report, t["name"]) or {}).get("status", "missing")
                for t in gpu_tests()}
        info["submissions"][sid] = {"score": report["score"], "max_score": report["max_score"],
                                    "gpu_tests": rows}
        say(f"{sid}: {report['score']:g} / {report['max_score']:g}; GPU tests: "
            + ", ".join(f"{s}" for s in rows.values()))
        bad_fork = [t["name"] for t in report["tests"]
                    if re.search(r"re-initialize CUDA|forked subprocess", t["message"])]
        if bad_fork:
            problems.append(f"{sid}: CUDA refused in a forked sandbox: {bad_fork}")
        for spec in needed:  # each sandbox must have initialised CUDA for these to pass
            status = rows[spec["name"]]
            if status == "excluded" or (sid != "partial" and status != "passed"):
                problems.append(f"{sid}: GPU test {status}: {spec['name']}")
    if len(info["submissions"]) != 3:
        problems.append(f"{len(info['submissions'])} reports, expected 3")
    if not DRY and gpus and not watch.forks_cuda:
        info["note"] = ("no fork of the runner server was seen holding CUDA (sampling may miss "
                        "short sandboxes; the GPU tests passing is the evidence)")
    return info


HOG = '''

# ---- gpu_check: a memory hog (bounded), once per sandbox folder, in data_parallel_chunk_sizes
def _gpu_check_hog():
    import ctypes, mmap, os, tempfile
    flag = os.path.join(tempfile.gettempdir(), "gpu_check_hogged")
    if os.path.exists(flag):
        return
    open(flag, "w").close()
    cuda = False
    if torch.cuda.is_available():
        torch.ones(1, device="cuda")
        cuda = torch.cuda.is_initialized()
    # Reserve first (an address-space limit stops that at once), then write every byte (what a
    # cgroup's memory limit counts): quick either way, well inside the call's timeout.
    hoard, reserved, touched, stopped = [], 0, 0, None
    try:
        for _ in range(CAP_MIB // 128):
            hoard.append(mmap.mmap(-1, 128 << 20))
            reserved += 128
        for block in hoard:
            ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(block)), 1, len(block))
            touched += 128
    except (MemoryError, OSError) as exc:
        stopped = type(exc).__name__
    hoard.clear()
    raise RuntimeError(f"HOG{{cuda={cuda} reserved={reserved} touched={touched} "
                       f"stopped={stopped}}}HOG")


_gpu_check_chunk_sizes = data_parallel_chunk_sizes


def data_parallel_chunk_sizes(batch_size, num_devices):
    _gpu_check_hog()
    return _gpu_check_chunk_sizes(batch_size, num_devices)
'''


def part_memory(work: Path) -> dict:
    limit = assignment().config.limits.memory_bytes >> 20
    cap = limit + 1024  # bounded: a hog that is not stopped takes this much and no more
    text = sources()["reference"] + HOG.replace("CAP_MIB", str(cap))
    folder = submission(work / "sub" / "memory_hog", text)
    code, out, report = grade(folder, work / "out" / "memory_hog")
    say(out)
    problems: list[str] = []
    info: dict = {"limit_mb": limit, "cap_mb": cap, "exit": code, "problems": problems}
    results = work / "out" / "memory_hog" / "results.json"
    info["results_json"] = results.exists()
    if report is None or not results.exists():
        problems.append(f"no results.json / report.json (exit {code}): the grader was harmed")
        return info
    info["protections"] = report["environment"].get("protections", [])
    hogged = [t for t in report["tests"] if t["name"].startswith("data_parallel_chunk_sizes:")
              and t["status"] == "failed"]
    seen = [m.group(1) for t in hogged for m in [re.search(r"HOG\{(.*?)\}HOG", t["message"])]
            if m]
    info["hog_messages"] = [t["message"][:300] for t in hogged]
    if seen:
        fields = dict(kv.split("=", 1) for kv in seen[0].split())
        info["hog"] = fields
        say(f"hog: {fields}")
        if fields.get("stopped") == "None":
            problems.append(f"the hog touched {fields.get('touched')} MiB (limit {limit} MB) "
                            "and was not stopped")
        elif int(fields.get("touched", 0)) > limit:
            problems.append(f"the hog touched {fields['touched']} MiB, over the {limit} MB limit")
        if not DRY and fields.get("cuda") != "True":
            problems.append("the hog's sandbox did not initialise CUDA")
    elif hogged:
        info["hog"] = {"killed": hogged[0]["message"][:300]}  # e.g. the cgroup's OOM kill
        say(f"hog killed: {hogged[0]['message'][:300]}")
        if "timed out" in hogged[0]["message"]:
            problems.append("the hog was stopped by the call's timeout, not by a memory limit")
    else:
        problems.append("no data_parallel_chunk_sizes test failed: the hog never ran?")
    others = [t["name"] for t in report["tests"] if t["part"] == "coding"
              and not t["name"].startswith("data_parallel_chunk_sizes:")
              and t["status"] not in ("passed", "excluded")]
    if others:
        problems.append(f"other tests failed next to the hog: {others}")
    return info


def summary(work: Path, out_json: Path) -> int:
    selected = os.environ.get("GPU_CHECK_PARTS", " ".join(PARTS)).split()
    parts = {}
    for name in PARTS:
        if name not in selected:
            parts[name] = {"status": "skipped", "seconds": 0, "problems": []}
            continue
        status_file = work / "parts" / f"{name}.status"
        record_file = work / "parts" / f"{name}.json"
        status, seconds = (status_file.read_text().split() + ["not-run", "0"])[:2] \
            if status_file.exists() else ("not-run", "0")
        record = json.loads(record_file.read_text()) if record_file.exists() else {}
        problems = record.get("problems", [])
        if status == "ok" and problems:
            status = "failed"
        parts[name] = {**record, "status": status, "seconds": int(seconds)}
    env = parts["environment"]
    grading = parts["grading"]
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "dry" if DRY else "gpu",
        "machine": {k: env.get(k) for k in ("python", "torch", "cuda_build", "gpus", "names",
                                            "nvidia_smi", "cpus")},
        "isolation": env.get("isolation") or grading.get("environment", {}).get("isolation"),
        "ok": all(p["status"] in ("ok", "skipped") for p in parts.values()),
        "parts_run": selected,
        "parts": parts,
        "not_run": grading.get("not_run", []),
    }
    out_json.write_text(json.dumps(result, indent=2, default=str))
    say("\nsummary:")
    for name, part in parts.items():
        say(f"  {name:<12} {part['status']:<10} {part['seconds']:>4}s"
            + "".join(f"\n      - {p}" for p in part.get("problems", [])[:8]))
    for row in result["not_run"]:
        say(f"  not run: {row['name']} ({row['why']})")
    return 0 if result["ok"] else 1


def main() -> int:
    part, work = sys.argv[1], Path(sys.argv[2])
    if part == "summary":
        return summary(work, Path(sys.argv[3]))
    record = globals()[f"part_{part}"](work)
    (work / "parts" / f"{part}.json").write_text(json.dumps(record, indent=2, default=str))
    for problem in record.get("problems", []):
        say(f"PROBLEM: {problem}")
    return 1 if record.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main())
