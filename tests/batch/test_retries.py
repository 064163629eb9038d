"""autograder.batch.retries: what follows the loss of a worker, for every backend."""

from autograder.batch.retries import MAX_DEATHS_IN_A_ROW, Retries


def test_a_submission_is_retried_once_then_fails_saying_why():
    retries = Retries()
    assert retries.lost("alice", "the worker died (signal SIGKILL)") is None
    assert retries.lost("alice", "the worker died (signal SIGKILL)") == \
        "the worker died (signal SIGKILL), twice (retried once, on a new worker)"


def test_workers_lost_in_a_row_make_the_batch_hopeless_until_one_grades():
    retries = Retries()
    for n in range(MAX_DEATHS_IN_A_ROW - 1):
        retries.lost(f"s{n}", "lost")
        assert retries.hopeless() is None
    retries.graded()  # one answer between: the count starts again
    for n in range(MAX_DEATHS_IN_A_ROW - 1):
        retries.lost(f"t{n}", "lost")
    assert retries.hopeless() is None
    retries.lost("u", "its node was lost")
    assert retries.hopeless() == (f"{MAX_DEATHS_IN_A_ROW} grading workers were lost in a row, "
                                  "the last one: its node was lost")
