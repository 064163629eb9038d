"""A small assignment per test, built from the toy (tests/fixtures/toy): its own hidden tests,
configuration and probes, loaded as the grader loads it."""

from toy_course import assignment, toy  # noqa: F401 - the fixtures
