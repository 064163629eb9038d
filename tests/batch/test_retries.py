"""autograder.batch.retries: what follows the loss of a worker, for every backend."""

from autograder.batch.retries import MAX_DEATHS_IN_A_ROW, Queue, Retries


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


def test_the_queue_puts_a_lost_task_first_in_line_then_fails_it():
    queue = Queue(["a", "b"], key=str)
    task = queue.next()
    assert queue.lost(task, "its worker died") == [] and list(queue) == ["a", "b"]
    assert queue.next() == "a"
    assert queue.lost("a", "its worker died") == [
        ("a", "its worker died, twice (retried once, on a new worker)")]
    assert list(queue) == ["b"] and not queue.stopped


def test_a_hopeless_loss_fails_everything_waiting_or_running_and_stops_the_queue():
    queue = Queue([f"t{n}" for n in range(MAX_DEATHS_IN_A_ROW + 2)], key=str)
    given = [queue.next() for _ in range(MAX_DEATHS_IN_A_ROW)]  # one per worker
    for task in given[:-1]:
        assert queue.lost(task, "lost") == []  # each back first in line
    failed = queue.lost(given[-1], "its node was lost", running=["r1"])
    stopped = f"{MAX_DEATHS_IN_A_ROW} grading workers were lost in a row, the last one: " \
              "its node was lost"
    assert queue.stopped == stopped and not queue
    assert sorted(task for task, _ in failed) == sorted(
        [*(f"t{n}" for n in range(MAX_DEATHS_IN_A_ROW + 2)), "r1"])
    assert {error for _, error in failed} == {stopped}
