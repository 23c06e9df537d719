"""Which run a keyed submission joins: its own, or the live task's it collapsed into (`app.collapse`).

Over a real broker. The test finishes tasks by hand with the worker's own
`result_task`, so it can put a run's end exactly where it wants: between a
collapsed enqueue and the lookup of the task it collapsed into.
"""

from __future__ import annotations

from pathlib import Path

from kittiwake.client import Client
from kittiwake.worker.outcomes import result_task
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import workers


def finish_by_hand(broker: BrokerProcess, app, queue: str, value: object) -> None:
    """Lease the task of `queue` and finish it as a worker does: dequeue it and post its result, atomically."""
    with Client(broker.url) as client:
        [task] = client.lease(queue)
        client.update(dequeue=[task], enqueue=[result_task(task, app.serializer.dump_result(value))])


def test_a_submit_collapsed_into_a_run_that_ends_before_it_is_looked_up_gets_that_run_result(
    broker: BrokerProcess, app
) -> None:
    first = apps.echo.submit("one", key="late")
    real_get = app.client.get
    finished = []

    def get_after_the_run_ended(queue: str, pid: str, **options):
        if (queue, pid) == ("tests", "late") and not finished:
            finish_by_hand(broker, app, "tests", "one")
            finished.append(True)
        return real_get(queue, pid, **options)

    app.client.get = get_after_the_run_ended
    try:
        second = apps.echo.submit("two", key="late")
    finally:
        del app.client.get
    assert finished
    assert first.result(timeout=10) == "one"
    assert second.result(timeout=10) == "one"
    assert app.client.peek("tests", 10) == []  # nothing ran again


def test_a_delayed_submit_collapsed_by_its_key_gets_the_live_run_result(broker: BrokerProcess, app, tmp_path: Path) -> None:
    now = apps.echo.submit("now", key="soon")
    later = apps.echo.submit("later", key="soon", delay=60)
    assert (later.queue, later.pid) == ("tests", "soon")  # the task it joined
    assert app.client.peek("tests.delayed", 10) == []
    with workers(broker.url, tmp_path):
        assert later.result(timeout=20) == "now"
        assert now.result(timeout=20) == "now"


def test_results_of_earlier_runs_never_reach_later_handles(broker: BrokerProcess, app) -> None:
    handles = []
    for run in range(3):
        handles.append(apps.echo.submit(f"run {run}", key="again"))
        finish_by_hand(broker, app, "tests", f"result {run}")
    assert [handle.result(timeout=10) for handle in handles] == ["result 0", "result 1", "result 2"]
    assert len({handle.submission for handle in handles}) == 3
