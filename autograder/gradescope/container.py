"""Try a Gradescope bundle in a Gradescope-like container before uploading it.

What Gradescope does with the zip, done here with Docker:

1. **Build** (`build_image`): from a base image (Gradescope's own `gradescope/autograder-base`
   when it is present locally, otherwise a stand-in made from a Debian rootfs by `debootstrap`,
   `standin_base`), extract the zip into `/autograder/source`, copy `run_autograder` to
   `/autograder/run_autograder` and run `setup.sh` once, as root, with the network. pip's own
   environment variables (a CA bundle, find-links folders, an extra index) are passed to that one
   run only, so that `setup.sh` itself runs unchanged where the PyTorch index cannot be reached.
2. **Run** (`run_submission`): for each submission, a fresh container with Gradescope's defaults
   (`GRADESCOPE`: 768 MB, half a CPU, no network, Docker's default capabilities and seccomp
   profile, as root; `SELF_HOSTED` adds `--cap-add SYS_ADMIN`, docs/GPU.md's recipe), the files
   copied into `/autograder/submission`, `run_autograder` run from `/autograder`. An observer
   (`observe.py`, the part Gradescope's own harness plays) times it, reads the container's peak
   memory, and then checks that nothing the submission started is left and that results.json
   and run_autograder stay as the grader left them for a few seconds more.

Images are cached by the content of the bundle and the base image's id, so a second try of the
same bundle starts at once. Everything here runs `docker` as a subprocess; a daemon must run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.gradescope.entry import STATUS_PREFIX

GRADESCOPE_BASE = "gradescope/autograder-base:ubuntu-22.04"
STANDIN_BASE = "autograder-standin-base:bookworm"
STANDIN_SUITE, STANDIN_MIRROR = "bookworm", "http://deb.debian.org/debian"
# What Gradescope's base image has that setup.sh relies on: a python3 and CA certificates.
STANDIN_PACKAGES = ("python3", "ca-certificates")
IMAGE_REPOSITORY = "autograder-gradescope"
HARNESS_DIR = "/var/lib/autograder-harness"  # root-only, outside /autograder
OBSERVER = Path(__file__).with_name("observe.py")


class ContainerError(Exception):
    """Docker is missing, a build failed, or a container could not be run."""


@dataclass(frozen=True)
class Limits:
    """How a graded container runs (Gradescope's defaults unless said otherwise)."""

    name: str
    memory_mb: int = 768
    cpus: float = 0.5
    timeout_s: int = 600  # Gradescope's default limit for one run
    docker_args: tuple[str, ...] = ()

    def args(self) -> list[str]:
        # --memory-swap equal to --memory: no swap to lean on, as a 768 MB limit means.
        return ["--network", "none", "--memory", f"{self.memory_mb}m",
                "--memory-swap", f"{self.memory_mb}m", "--cpus", f"{self.cpus:g}",
                *self.docker_args]


GRADESCOPE = Limits("gradescope")
SELF_HOSTED = Limits("self-hosted", docker_args=("--cap-add", "SYS_ADMIN"))


@dataclass(frozen=True)
class PipSettings:
    """pip's settings for the one `setup.sh` run of a build (none needed with a normal network)."""

    find_links: tuple[Path, ...] = ()
    cert: Path | None = None
    extra_index: str | None = None

    @classmethod
    def from_environment(cls) -> PipSettings:
        """This machine's own pip settings (pip's configuration files and PIP_* variables, as
        `pip config list` shows them): its find-links folders, its CA bundle (else
        SSL_CERT_FILE) and its index (else PyPI) as the extra index."""
        said = _pip_config()
        links = tuple(Path(p) for p in said.get("find-links", "").split() if Path(p).is_dir())
        cert = said.get("cert") or os.environ.get("SSL_CERT_FILE")
        return cls(links, Path(cert) if cert and Path(cert).is_file() else None,
                   said.get("index-url") or "https://pypi.org/simple")

    def mounts_and_exports(self) -> tuple[list[str], str]:
        """`docker create` mount arguments, and the shell exports for setup.sh's one run."""
        mounts, exports = [], {"PIP_RETRIES": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        for i, folder in enumerate(self.find_links):
            mounts += ["-v", f"{folder.resolve()}:/mnt/pip-links/{i}:ro"]
        if self.find_links:
            exports["PIP_FIND_LINKS"] = " ".join(f"/mnt/pip-links/{i}"
                                                 for i in range(len(self.find_links)))
        if self.cert:
            mounts += ["-v", f"{self.cert.resolve()}:/mnt/pip-ca.crt:ro"]
            exports["PIP_CERT"] = "/mnt/pip-ca.crt"
        if self.extra_index:
            exports["PIP_EXTRA_INDEX_URL"] = self.extra_index
        return mounts, " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())


def _pip_config() -> dict[str, str]:
    """pip's settings by name ('find-links', 'cert', ...), a PIP_* variable over a file's."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                          text=True, timeout=60)
    found: dict[str, tuple[bool, str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        if name and (scope == ":env:" or name not in found or not found[name][0]):
            found[name] = (scope == ":env:", value.strip().strip("'\""))
    return {name: value for name, (_, value) in found.items()}


@dataclass
class ContainerRun:
    """One submission graded in a fresh container, as the observer saw it."""

    submission: str
    limits: str
    memory_mb: int
    results: dict | None  # /autograder/results/results.json at the end
    report: dict | None  # report.json beside it (the grader's own record)
    stdout: str  # run_autograder's output (Gradescope keeps it for instructors)
    seconds: float  # run_autograder's wall time
    peak_memory_bytes: int | None  # the container's high-water mark (page cache included)
    oom_kills: int | None  # processes its memory limit killed
    exit_code: int | None
    timed_out: bool
    results_rewritten: bool  # results.json changed after run_autograder exited
    run_autograder_changed: bool  # differs from the bundle's
    leftover: list[str] = field(default_factory=list)  # processes alive after grading

    def problems(self) -> list[str]:
        """What Gradescope would not accept, or what the submission got away with."""
        found = []
        if self.timed_out:
            found.append("did not finish within the time limit")
        if self.results is None:
            found.append("left no readable results.json")
        if self.oom_kills:
            found.append(f"the {self.memory_mb} MB memory limit killed {self.oom_kills} "
                         "process(es)")
        if self.results_rewritten:
            found.append("results.json changed after run_autograder had exited")
        if self.run_autograder_changed:
            found.append("/autograder/run_autograder was changed during grading")
        if self.leftover:
            found.append(f"{len(self.leftover)} process(es) still running after grading: "
                         + ", ".join(self.leftover[:5]))
        return found

    def summary(self) -> str:
        score = "no score" if self.score is None else f"score {self.score:g}"
        peak = ("peak memory unknown" if self.peak_memory_bytes is None else
                f"peak memory {self.peak_memory_bytes / 2**20:.0f} MiB of {self.memory_mb}")
        return (f"{self.submission} [{self.limits}]: {score} in {self.seconds:g} s, {peak}, "
                f"isolation {self.isolation or 'unknown'}, status {self.status or 'unknown'}")

    @property
    def score(self) -> float | None:
        return None if self.results is None else self.results.get("score")

    @property
    def isolation(self) -> str | None:
        """The isolation `autograder grade` said it used (its stdout, which no sandbox writes;
        report.json could have been overwritten where there was none)."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("isolation: "):
                return line.removeprefix("isolation: ").split(";")[0].strip()
        return None

    @property
    def status(self) -> str | None:
        """The status run_autograder printed for staff ("flagged: ...", "ok", ...)."""
        lines = [line for line in self.stdout.splitlines() if line.startswith(STATUS_PREFIX)]
        return lines[-1].removeprefix(STATUS_PREFIX) if lines else None


# ----------------------------------------------------------------------------- docker


def docker(*args: str, stdin: bytes | None = None, timeout: float = 600,
           check: bool = True) -> subprocess.CompletedProcess:
    """Run the docker client; a failure is a ContainerError that quotes docker's words."""
    if shutil.which("docker") is None:
        raise ContainerError("docker is not installed (Debian: apt-get install docker.io)")
    try:
        done = subprocess.run(["docker", *args], input=stdin, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ContainerError(f"docker {args[0]} did not finish within {timeout:g} s") from None
    if check and done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-2000:]
        raise ContainerError(f"docker {' '.join(args[:2])} failed: {said}")
    return done


def require_daemon() -> None:
    if docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=30).returncode:
        raise ContainerError(
            "no Docker daemon answers: start one (as root, `dockerd &`; on a machine without "
            "bridge networking, `dockerd --iptables=false --bridge=none &`)")


def image_id(name: str) -> str | None:
    done = docker("image", "inspect", "--format", "{{.Id}}", name, check=False, timeout=60)
    return done.stdout.decode().strip() or None if done.returncode == 0 else None


# ----------------------------------------------------------------------------- images


def base_image(requested: str | None = None, log: Path | None = None) -> str:
    """The base to build on: `requested`, else Gradescope's own if present, else the stand-in
    (built once with debootstrap, then cached by Docker)."""
    if requested:
        if image_id(requested) is None:
            docker("pull", requested, timeout=1800)
        return requested
    if image_id(GRADESCOPE_BASE):
        return GRADESCOPE_BASE
    if image_id(STANDIN_BASE) is None:
        standin_base(STANDIN_BASE, log)
    return STANDIN_BASE


def standin_base(tag: str = STANDIN_BASE, log: Path | None = None) -> str:
    """A stand-in for gradescope/autograder-base where no image registry can be reached: a
    minimal Debian rootfs made by debootstrap (root only), imported as an image."""
    if shutil.which("debootstrap") is None:
        raise ContainerError("the stand-in base image needs debootstrap (Debian: apt-get install "
                             f"debootstrap), or pass a base image such as {GRADESCOPE_BASE}")
    if os.geteuid() != 0:
        raise ContainerError("debootstrap needs root to build the stand-in base image")
    with tempfile.TemporaryDirectory(prefix="standin-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(STANDIN_PACKAGES)}",
                   STANDIN_SUITE, str(rootfs), STANDIN_MIRROR]
        with open(log or os.devnull, "ab") as out:
            if subprocess.run(command, stdout=out, stderr=out, timeout=1800).returncode:
                raise ContainerError(f"debootstrap failed (see {log or 'its output'})")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout,
                                  capture_output=True, timeout=600)
        tar.wait()
        if imported.returncode or tar.returncode:
            raise ContainerError(f"docker import failed: {imported.stderr.decode()[-2000:]}")
    return tag


def image_tag(bundle: Path, base: str) -> str:
    digest = hashlib.sha256(bundle.read_bytes())
    digest.update((image_id(base) or base).encode())
    name = bundle.name.removesuffix(".zip").removesuffix("-gradescope")
    return f"{IMAGE_REPOSITORY}/{_safe(name)}:{digest.hexdigest()[:16]}"


def build_image(bundle: Path, base: str, pip: PipSettings = PipSettings(),
                log: Path | None = None) -> str:
    """The image Gradescope would build from `bundle` (cached by content); returns its tag."""
    tag = image_tag(bundle, base)
    if image_id(tag):
        return tag
    mounts, exports = pip.mounts_and_exports()
    script = ("set -e; cp /autograder/source/run_autograder /autograder/run_autograder; "
              f"cd /autograder/source; export {exports}; exec bash ./setup.sh")
    name = f"autograder-build-{os.getpid()}-{time.monotonic_ns()}"
    docker("create", "--name", name, "--network", "host", *mounts, base, "bash", "-c", script)
    try:
        docker("cp", "-", f"{name}:/", stdin=_source_tar(bundle))
        done = docker("start", "-a", name, timeout=3600, check=False)
        output = done.stdout + done.stderr
        if log:
            log.write_bytes(output)
        if done.returncode:
            tail = output.decode(errors="replace").strip()[-3000:]
            raise ContainerError(f"setup.sh failed (exit {done.returncode}):\n{tail}")
        docker("commit", "--change", "WORKDIR /autograder",
               "--change", 'CMD ["/autograder/run_autograder"]', name, tag)
    finally:
        docker("rm", "-f", name, check=False)
    _remove_older(tag)
    return tag


def _remove_older(tag: str) -> None:
    """Each bundle's image is over a GB: keep only the newest of each assignment's."""
    repository = tag.rsplit(":", 1)[0]
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}}", repository, check=False)
    for old in listed.stdout.decode().split():
        if old != tag:
            docker("rmi", old, check=False)


def _source_tar(bundle: Path) -> bytes:
    """The zip as Gradescope extracts it: /autograder/source/..., owned by root."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(bundle) as archive, tarfile.open(fileobj=buffer, mode="w") as tar:
        _add_dir(tar, "autograder", 0o755)
        _add_dir(tar, "autograder/source", 0o755)
        for info in archive.infolist():
            if info.is_dir():
                continue
            mode = 0o755 if info.filename in ("setup.sh", "run_autograder") else 0o644
            _add_file(tar, f"autograder/source/{info.filename}", archive.read(info), mode)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- runs


def run_submission(image: str, submission: Path, limits: Limits = GRADESCOPE,
                   settle_s: float = 5.0, metadata: dict | None = None) -> ContainerRun:
    """Grade `submission` (a folder) in a fresh container of `image`, as Gradescope runs it."""
    name = f"autograder-run-{os.getpid()}-{time.monotonic_ns()}"
    command = ["python3", f"{HARNESS_DIR}/observe.py", str(settle_s)]
    docker("create", "--name", name, *limits.args(), image, *command)
    try:
        docker("cp", "-", f"{name}:/", stdin=_submission_tar(submission, metadata))
        try:
            docker("start", "-a", name, timeout=limits.timeout_s + settle_s + 60, check=False)
            timed_out = False
        except ContainerError:
            docker("kill", name, check=False)
            timed_out = True
        observed = _json(_read(name, f"{HARNESS_DIR}/record.json")) or {}
        results, report = (_read(name, f"/autograder/results/{f}") for f in
                           ("results.json", "report.json"))
        return ContainerRun(
            submission=submission.name, limits=limits.name, memory_mb=limits.memory_mb,
            results=_json(results), report=_json(report),
            stdout=(_read(name, f"{HARNESS_DIR}/stdout") or b"").decode(errors="replace"),
            seconds=observed.get("seconds", 0.0), peak_memory_bytes=observed.get("peak_memory"),
            oom_kills=observed.get("oom_kills"),
            exit_code=observed.get("exit_code"),
            timed_out=timed_out,
            results_rewritten=observed.get("results_at_exit") != observed.get("results_later"),
            run_autograder_changed=(observed.get("run_autograder_later")
                                    != observed.get("run_autograder_before")),
            leftover=observed.get("leftover", []))
    finally:
        docker("rm", "-f", name, check=False)


def _submission_tar(submission: Path, metadata: dict | None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add_dir(tar, "autograder/submission", 0o755)
        for path in sorted(submission.rglob("*")):
            relative = path.relative_to(submission).as_posix()
            if path.is_dir() and not path.is_symlink():
                _add_dir(tar, f"autograder/submission/{relative}", 0o755)
            elif path.is_file() and not path.is_symlink():
                _add_file(tar, f"autograder/submission/{relative}", path.read_bytes(), 0o644)
        document = metadata or {"id": 1, "users": [{"name": "Test Student", "email": "t@x"}],
                                "created_at": "2026-01-01T00:00:00Z"}
        _add_file(tar, "autograder/submission_metadata.json", json.dumps(document).encode(),
                  0o644)
        _add_dir(tar, HARNESS_DIR.lstrip("/"), 0o700)
        _add_file(tar, f"{HARNESS_DIR.lstrip('/')}/observe.py", OBSERVER.read_bytes(), 0o600)
    return buffer.getvalue()


def _read(container: str, path: str) -> bytes | None:
    """One file out of a (stopped) container, or None when it is not there."""
    done = docker("cp", f"{container}:{path}", "-", check=False, timeout=120)
    if done.returncode:
        return None
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        extracted = tar.extractfile(member) if member else None
        return extracted.read() if extracted else None


def _json(data: bytes | None) -> dict | None:
    try:
        document = json.loads(data) if data else None
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name.lower()) or "bundle"



def try_bundle(bundle: Path, submissions: list[Path], limits: Limits = GRADESCOPE,
               base: str | None = None, pip: PipSettings | None = None,
               say: Callable[[str], None] = print) -> list[ContainerRun]:
    """Build `bundle`'s image (cached) and grade each submission folder in a fresh container."""
    require_daemon()
    started = time.monotonic()
    chosen = base_image(base)
    say(f"base image {chosen}; building the bundle's image (setup.sh; cached by content)...")
    with tempfile.TemporaryDirectory(prefix="autograder-build-") as tmp:
        log = Path(tmp) / "setup.log"
        tag = build_image(bundle, chosen, pip or PipSettings.from_environment(), log)
    say(f"image {tag} ready after {time.monotonic() - started:.0f} s; grading with "
        f"{' '.join(limits.args())}")
    runs = []
    for submission in submissions:
        run = run_submission(tag, submission, limits)
        say(run.summary())
        for problem in run.problems():
            say(f"  problem: {problem}")
        runs.append(run)
    return runs
