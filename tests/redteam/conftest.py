"""The red team's fixtures; the harness itself (what the test files import) is red_team.py."""

from __future__ import annotations

import pytest
from red_team import Graded, Grader, Secrets, Spec, make_secrets

# ----------------------------------------------------------------------------- fixtures


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "submission(name): the red-team submission a test reads")


@pytest.fixture(scope="session")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Secrets:
    return make_secrets(tmp_path_factory.mktemp("redteam-secrets"))


def _spec_of(item: pytest.Item) -> Spec | None:
    marker = item.get_closest_marker("submission")
    if marker is None:
        return None
    name = marker.args[0]
    raw = item.module.SUBMISSIONS[name]
    return Spec(name=name, **raw)


@pytest.fixture(scope="session")
def grader(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets):
    g = Grader(tmp_path_factory.mktemp("redteam"), secrets)
    yield g
    g.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module", autouse=True)
def _grade_the_modules_submissions(grader: Grader, request: pytest.FixtureRequest) -> None:
    """Every submission the module's selected tests read, started before its first test: by
    module, not session, so that parallel runs (pytest -n, files kept whole) grade each
    submission on the one process that runs its tests."""
    items = [i for i in request.session.items if i.module is request.module]
    specs = [s for s in (_spec_of(i) for i in items) if s is not None]
    for spec in sorted(specs, key=lambda s: not s.slow):  # slowest first, then in test order
        grader.start(spec)


@pytest.fixture
def graded(grader: Grader, request: pytest.FixtureRequest) -> Graded:
    """The graded submission named by the test's `submission` marker."""
    spec = _spec_of(request.node)
    assert spec is not None, "mark the test with @pytest.mark.submission(name)"
    future = grader.start(spec)
    if future is None:
        pytest.skip("needs the sandbox's namespaces; this machine has isolation mode 'none'")
    return future.result()
