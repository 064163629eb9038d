"""What the trusted parent asks a runner to do, and what a runner collects: plain data.

Kept apart from the pytest plugin so the parent (grading one submission) never imports pytest
or torch to build a job (an import contract in `make lint` holds it to that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Gradescope's visibility values, and those a result worth points may have (see
# autograder.grading.visibility): the same as grading.yml's and report.json's schemas (a test
# holds them to that), written here so that a runner reads no schema file to check a marker.
VISIBILITIES: tuple[str, ...] = ("hidden", "after_due_date", "after_published", "visible")
SCORED_VISIBILITIES: tuple[str, ...] = ("after_due_date", "visible")


@dataclass(frozen=True)
class Job:
    """What the runner is asked to do; written by the parent as JSON. Each runner of a grading
    gets its own, made by the supervisor: what earlier runners of it found is in it."""

    tests_dir: str
    assignment_dir: str
    module_name: str
    functions: dict[str, float]
    output_dir: str
    # From grading.yml (the supervisor copies them from the assignment's config): no defaults
    # here, so the schema stays their one source.
    test_timeout: float
    rank_retries: int
    crash_limit: int
    import_timeout: float  # timeouts.imports: every import of the student's module, in all
    visibility: str
    budget_factor: float
    budget_floor: float
    limits: dict  # SandboxLimits as a dict
    sandbox_dir: str | None = None
    missing_reason: str | None = None
    collect_only: bool = False
    skip: list[str] = field(default_factory=list)
    # Functions that hung in an earlier runner of this grading: {function: first hang}.
    hung: dict[str, dict] = field(default_factory=dict)
    # Functions whose calls crashed in earlier runners: {function: {"crashes": n, and the
    # first crash's "test", "nodeid" and "message"}}; and the seconds that imports of the
    # student's module have taken so far (against import_timeout).
    crashed: dict[str, dict] = field(default_factory=dict)
    imports_spent: float = 0.0
    # Calibrated budgets (see autograder.project.budgets): the reference's seconds per test nodeid,
    # the calibration workload's seconds when they were recorded, k and the floor (k 0: flat).
    timings: dict[str, float] = field(default_factory=dict)
    timings_calibration: float | None = None
    machine_calibration: float | None = None  # measured by this grading's first runner
    # pytest's own tracebacks of failed tests in runner.log (AUTOGRADER_KEEP_WORKDIR): they
    # parse the source of every frame, about 20 ms a failure; students never see them.
    tracebacks: bool = False


@dataclass
class TestSpec:
    """A collected test as declared by its markers and docstring."""

    nodeid: str
    name: str
    function: str
    points: float  # the test's weight until collection splits its function's points
    visibility: str
    gpu: bool
    timeout: float
    uses: list[str] = field(default_factory=list)  # every student function the test needs
    tolerant: bool = False
