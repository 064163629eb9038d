"""scripts/gpu_check.sh, the GPU machine's one prepared script (issue #16), checked on CPU.

Its dry mode (GPU_CHECK_DRY=1) runs every part with a CPU grader's expectations, so the logic
that a GPU session will rely on is exercised here: the summary's shape, the GPU tests found in
the hidden suite, a mutant per GPU test, the warm batch's watch of the runner server, the hog.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
PARTS = ["environment", "verify_key", "grading", "mutants", "batch", "memory"]


def load_driver():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(out: Path, parts: str | None = None, timeout: int = 1500) -> tuple[int, str, dict]:
    # Two gradings at a time (the script's default is one per two cores: a GPU machine's).
    env = {**os.environ, "GPU_CHECK_DRY": "1", "OUT": str(out), "GPU_CHECK_JOBS": "2"}
    if parts:
        env["GPU_CHECK_PARTS"] = parts
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, json.loads(
        (out / "gpu_check.json").read_text())


def test_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_wheels.sh")], check=True)


def test_driver_knows_every_gpu_test_and_a_mutant_for_each(tmp_path):
    driver = load_driver()
    mutants = driver.write_mutants(tmp_path / "mutants")
    tests = driver.gpu_tests()
    assert len(tests) == 6 and all(t["gpus"] == 1 for t in tests), tests
    names = [t["name"] for t in tests]
    covered = set()
    for name, prefix, words, _ in driver.MUTANTS:
        matching = [n for n in names if n.startswith(prefix)]
        assert len(matching) == 1, (name, prefix)
        covered.update(matching)
        text, expect = driver.mutant_module(name, driver.sources()["reference"], mutants)
        assert expect and words and text != driver.sources()["reference"]
    assert covered == set(names), "every GPU test needs a mutant that it catches"


def test_dry_environment_summary_shape(tmp_path):
    code, log, summary = dry_run(tmp_path, "environment", timeout=300)
    assert code == 0, log
    assert (tmp_path / "gpu_check.log").read_text().strip()
    assert summary["mode"] == "dry" and summary["ok"] is True
    assert set(summary) >= {"date", "machine", "isolation", "parts", "not_run", "parts_run"}
    assert summary["machine"]["gpus"] == 0 and summary["machine"]["torch"]
    assert summary["isolation"]["mode"] in ("namespaces", "uid", "none")
    assert list(summary["parts"]) == PARTS
    assert summary["parts"]["environment"]["status"] == "ok"
    assert all(summary["parts"][p]["status"] == "skipped" for p in PARTS[1:])


@pytest.mark.deployment
def test_dry_run_passes(tmp_path):
    """Every part on CPU: 13 gradings, two at a time, on the 2-core machine."""
    code, log, summary = dry_run(tmp_path)
    assert code == 0, log[-6000:]
    parts = summary["parts"]
    assert all(parts[p]["status"] == "ok" for p in PARTS), {p: parts[p]["status"] for p in PARTS}
    assert parts["verify_key"]["environment"] == ["no_gpu"]
    grading = parts["grading"]
    assert grading["reference"]["score"] == grading["reference"]["max_score"] == 100
    assert grading["blank"]["score"] == 0
    assert grading["require_gpu_without_gpu"]["exit"] == 2
    assert len(summary["not_run"]) == 6 and all("dry run" in r["why"] for r in summary["not_run"])
    assert {r["status"] for r in grading["gpu_tests"]} == {"excluded"}
    for row in parts["mutants"]["mutants"]:
        assert row["gpu_status"] == "excluded" and row["simulated"], row
        assert all(s["status"] == "failed" for s in row["simulated"]), row
    batch = parts["batch"]
    assert batch["runner_servers_seen"] >= 1 and not batch["runner_server_cuda"]
    assert len(batch["submissions"]) == 3
    memory = parts["memory"]
    assert memory["results_json"] and memory["hog"], memory
    assert memory["hog"].get("stopped", "killed") != "None"
