"""Submitting tasks and getting their results through the reply queue, over a real broker and worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kittiwake.app import TaskFailed
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import workers


def test_submit_result_round_trip(broker: BrokerProcess, app, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path, "--concurrency", "4"):
        handle = apps.add.submit(2, 3)
        assert handle.result(timeout=20) == 5
        assert handle.status().state == "done"
        assert apps.echo.submit({"a": [1, 2.5, "x", None, b"raw"]}).result(timeout=10) == {"a": [1, 2.5, "x", None, b"raw"]}


def test_the_same_idempotency_key_twice_makes_one_task(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = apps.record.submit(str(runs), "once", key="invoice-42")
    second = apps.record.submit(str(runs), "twice", key="invoice-42")
    assert (first.queue, first.pid) == (second.queue, second.pid) == ("tests", "invoice-42")
    assert [view.pid for view in app.client.peek("tests", 10)] == ["invoice-42"]
    with workers(broker.url, tmp_path):
        assert first.result(timeout=20) == "once"
        assert second.result(timeout=20) == "once"
    assert [line.split()[:2] for line in runs.read_text().splitlines()] == [["start", "once"], ["end", "once"]]


def test_tasks_without_a_key_are_served_in_submission_order(broker: BrokerProcess, app) -> None:
    """Their ids sort by submission time: a queue hands them out in the order they were submitted
    (with random ids it handed them out in random order)."""
    handles = [apps.echo.submit(n) for n in range(20)] + apps.echo.map(range(20, 60), chunk=7)
    job = app.job()
    nodes = [job.add(apps.echo, n) for n in range(60, 70)]
    job.submit()
    expected = [handle.pid for handle in handles] + [node.pid for node in nodes]
    assert [view.pid for view in app.client.peek("tests", 100)] == expected
    assert len(set(expected)) == 70


def test_map_bundles_many_tasks_per_request(broker: BrokerProcess, app, tmp_path: Path) -> None:
    requests = []
    enqueue_many = app.client.enqueue_many

    def counting(tasks, **options):
        requests.append(len(tasks))
        return enqueue_many(tasks, **options)

    app.client.enqueue_many = counting
    handles = apps.echo.map(range(2000), chunk=500)
    assert requests == [500, 500, 500, 500]
    with workers(broker.url, tmp_path, "--concurrency", "2", "--prefetch", "200"):
        assert app.results(handles, timeout=60) == list(range(2000))


def test_an_exception_comes_back_as_task_failed(broker: BrokerProcess, app, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path):
        handle = apps.explode.submit("no such invoice")
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=20)
    assert failure.value.reason == "ERROR"
    assert failure.value.type == "ValueError"
    assert failure.value.remote_message == "no such invoice"
    assert "raise ValueError(message)" in failure.value.traceback
    assert handle.status().state == "failed"
    dead = app.client.get("tests.dead", handle.id)
    assert dead.headers["kittiwake-dead-reason"] == "ERROR"


def test_an_old_dead_letter_of_a_key_does_not_fail_its_next_run(broker: BrokerProcess, app) -> None:
    first = apps.explode.submit("boom", key="invoice-7")
    app.client.cancel(("tests", first.id))  # the first run of the key died: a dead letter remains
    assert first.status().state == "failed"
    second = apps.explode.submit("again", key="invoice-7")
    [task] = app.client.lease("tests")
    app.client.dequeue(task)  # the run finished; its result is not here yet
    assert second.status().state == "done"  # not the first run's failure


def test_unserialisable_and_oversize_results_are_error_results(broker: BrokerProcess, app, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path):
        unserialisable = apps.unserialisable.submit()
        huge = apps.huge.submit(2_000_000)
        with pytest.raises(TaskFailed) as failure:
            unserialisable.result(timeout=20)
        assert failure.value.reason == "RESULT_UNSERIALISABLE"
        with pytest.raises(TaskFailed) as failure:
            huge.result(timeout=20)
        assert failure.value.reason == "RESULT_TOO_LARGE"
        assert apps.huge.submit(1000).result(timeout=20) == "x" * 1000


def test_unserialisable_arguments_fail_at_submit(app) -> None:
    from kittiwake.app.serialization import PayloadError

    with pytest.raises(PayloadError):
        apps.echo.submit(object())


def test_a_pickle_app_passes_any_picklable_object(broker: BrokerProcess, tmp_path: Path) -> None:
    from fractions import Fraction

    from worker import pickled_apps
    from worker.harness import connected_app

    for app in connected_app(broker.url, pickled_apps.app):
        with workers(broker.url, tmp_path, app="worker.pickled_apps:app"):
            invoice = pickled_apps.Invoice(7, Fraction(1, 3))
            assert pickled_apps.double.submit(invoice).result(timeout=20) == pickled_apps.Invoice(7, Fraction(2, 3))
            assert pickled_apps.distinct.submit([1, 1, 2]).result(timeout=20) == {1, 2}


def test_coroutine_functions_run_as_tasks(broker: BrokerProcess, app, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path):
        assert apps.waits.submit(4).result(timeout=20) == 40


def test_a_key_submitted_again_after_its_run_finished_gets_the_new_run_result(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """Each handle gets the result of the run it submitted, even while an older handle of the key is alive;
    a submit collapsed into a live task shares that task's result."""
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path):
        first = apps.record.submit(str(runs), "one", key="report-7")
        assert first.result(timeout=20) == "one"
        second = apps.record.submit(str(runs), "two", 1.0, key="report-7")  # runs for a second
        third = apps.record.submit(str(runs), "three", key="report-7")  # collapses into the second
        assert second.result(timeout=20) == "two"
        assert third.result(timeout=20) == "two"
        assert first.result(timeout=0) == "one"
        fourth = apps.record.submit(str(runs), "four", key="report-7")
        assert fourth.result(timeout=20) == "four"
        assert [first.status().state, second.status().state, fourth.status().state] == ["done"] * 3
    assert [line.split()[1] for line in runs.read_text().splitlines() if line.startswith("end")] == ["one", "two", "four"]
