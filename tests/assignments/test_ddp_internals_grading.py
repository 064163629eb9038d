"""Acceptance tests of ddp_internals, graded by the real engine end to end (tests/assignments/
generated.py): the reference with the key scores 100, the blank template 0, do-nothing
submissions 0 on coding, the demo's partial example in between, and each mutant (made from the
reference by scripts/make_ddp_internals_mutants.py) fails the tests its header names and only
tests of its own function, where the grader's own rank in each scenario (observers.py) saw the
mistake."""

import pytest
from generated import GeneratedAcceptance

pytestmark = pytest.mark.slow


class TestDdpInternals(GeneratedAcceptance):
    NAME = "ddp_internals"
