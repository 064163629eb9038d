"""A two-node Ray cluster on this machine whose worker node cannot see the driver's folders, and
`autograder batch --backend ray --address` run against it (used by tests/batch/test_ray_cluster.py).

Run as PID 1 of its own PID, mount and network namespaces (the test starts it with `unshare
--net --pid --mount --fork --mount-proc`): the network namespace has loopback only, so Ray's
nodes get 127.0.0.1 as their address and nothing can leave the machine; when this process ends
the kernel ends every process of the cluster with it (no `ray stop`, which would stop other
people's Ray on this machine).

    python tests/batch/ray_two_nodes.py SPEC.json

SPEC: {"hide": [folders the worker node must not see], "hide_files": [files it must not see
(/dev/null is mounted over them)], "probe": [files under them that exist here], "temp": folder
for Ray's files (not hidden), "batch": [argv of autograder batch], "result": where to write what
happened (JSON)}.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

PORT = 6379  # this network namespace is ours: no other Ray can hold it
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result: dict = {"steps": []}
    # Token authentication, as a real cluster should have: one token for the nodes and the
    # driver (this machine's ~/.ray/auth_token is someone else's business).
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    temp = Path(spec["temp"])
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        step(result, "head", subprocess.run(
            [*RAY, "start", "--head", f"--port={PORT}", "--num-cpus=0",
             f"--temp-dir={temp / 'head'}", "--include-dashboard=false",
             "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=240))
        # The worker node: its own mount namespace, where every driver folder is an empty,
        # read-only file system (nothing can be read there, nothing written).
        hide = " ".join(f"mount -t tmpfs -o ro,size=4k,mode=0555 none '{d}' &&"
                        for d in spec["hide"])
        files = " ".join(f"mount --bind -o ro /dev/null '{f}' &&" for f in spec["hide_files"])
        # Twice at most: Ray gives a raylet a fixed 30 s to start, which a loaded machine can
        # miss ("raylet failed to startup"), as the product's local instance does (see
        # ray_workers.init_on_loopback); what the first try left is killed first.
        for attempt in (1, 2):
            worker_temp = temp / f"worker-{attempt}"
            start = " ".join([*RAY, "start", f"--address=127.0.0.1:{PORT}", "--num-cpus=2",
                              f"--temp-dir={worker_temp}", "--disable-usage-stats"])
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 f"{hide} {files} exec {start}"], env=env, capture_output=True, text=True,
                timeout=240)
            if done.returncode == 0 or attempt == 2:
                break
            result["steps"].append({"name": "worker (first try)", "returncode": done.returncode,
                                    "tail": (done.stdout + done.stderr)[-3000:]})
            for pid in _pids():
                if str(worker_temp) in _cmdline(pid):
                    os.kill(pid, signal.SIGKILL)
        step(result, "worker", done)
        worker_pids = [p for p in _pids() if str(worker_temp) in _cmdline(p)]
        result["worker_node_sees"] = _seen(worker_pids, spec["probe"])
        result["driver_sees"] = [os.path.isfile(p) for p in spec["probe"]]
        started = time.monotonic()
        graders: dict = {}  # the actors' processes, looked at while they grade
        with subprocess.Popen(spec["batch"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as process:
            while process.poll() is None and time.monotonic() - started < 600:
                actors = [p for p in _pids() if _cmdline(p).startswith("ray::RayGrader")]
                graders.update(_seen(actors, spec["probe"]))
                time.sleep(0.5)
            process.kill()  # when it ran over the time; a no-op otherwise
            out, err = process.communicate()
        batch = subprocess.CompletedProcess(spec["batch"], process.returncode, out, err)
        result["batch_seconds"] = round(time.monotonic() - started, 1)
        result["actors_see"] = graders
        step(result, "batch", batch)
        result["batch_stdout"] = batch.stdout[-4000:]
        result["batch_stderr"] = batch.stderr[-4000:]
        result["worker_node_id"] = _node_id(worker_temp)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
        result["error"] = f"{type(exc).__name__}: {exc}"
    Path(spec["result"]).write_text(json.dumps(result))


def step(result: dict, name: str, done: subprocess.CompletedProcess) -> None:
    result["steps"].append({"name": name, "returncode": done.returncode,
                            "tail": (done.stdout + done.stderr)[-3000:]})
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed with status {done.returncode}")


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _seen(pids: list[int], probes: list[str]) -> dict:
    """What each worker-node process sees of the probes, through /proc/PID/root (its own mount
    namespace)."""
    return {str(pid): [os.path.isfile(f"/proc/{pid}/root{p}") for p in probes] for pid in pids}


def _node_id(worker_temp: Path) -> str:
    """The worker node's id, from its raylet's command line."""
    for pid in _pids():
        line = _cmdline(pid)
        if "raylet/raylet" in line and str(worker_temp) in line:
            for arg in line.split():
                if arg.startswith("--node_id="):
                    return arg.split("=", 1)[1]
    return ""


if __name__ == "__main__":
    main()
