"""`TaskContext.enqueue_on_success`: tasks that commit in the update that finishes a run, only if it succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kittiwake.app import TaskFailed
from kittiwake.app.context import TaskContext
from kittiwake.errors import BadRequest
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import WorkerProcess


def test_a_successful_run_commits_its_record_and_a_failed_one_never_does(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    ok = apps.records_then.submit("ok", False)
    failing = apps.records_then.submit("bad", True)
    sandboxed = apps.records_sandboxed.submit("boxed")
    with WorkerProcess(broker.url, tmp_path / "worker.log", "--queues", "outbox"):
        assert ok.result(timeout=30) == "ok"
        assert sandboxed.result(timeout=30) == "boxed"
        with pytest.raises(TaskFailed):
            failing.result(timeout=30)
    records = {view.pid: view.data for view in app.client.peek("outbox.records", 10)}
    assert records == {"ok": b"ok attempt 1", "boxed": b"boxed sandboxed"}, "a failed run's record was committed"


def test_a_record_in_another_consistency_group_fails_the_run(broker: BrokerProcess, app, tmp_path: Path) -> None:
    handle = apps.records_elsewhere.submit()
    with WorkerProcess(broker.url, tmp_path / "worker.log", "--queues", "outbox"):
        with pytest.raises(TaskFailed, match="consistency group"):
            handle.result(timeout=30)


def test_records_are_checked_when_asked_for() -> None:
    context = TaskContext(id="t", name="n", queue="jobs#a", pid="p")
    context.enqueue_on_success("jobs#b", b"x", pid="k", headers={"h": "v"})
    assert context.outbox == [{"queue": "jobs#b", "data": b"x", "pid": "k", "headers": {"h": "v"}}]
    with pytest.raises(ValueError, match="consistency group"):
        context.enqueue_on_success("other#b", b"x")
    with pytest.raises(BadRequest):
        context.enqueue_on_success("bad queue name", b"x")
    with pytest.raises(BadRequest):
        context.enqueue_on_success("jobs#b", 42)  # type: ignore[arg-type]
    with pytest.raises(BadRequest):
        context.enqueue_on_success("jobs#b", b"x", pid="")
    assert len(context.outbox) == 1
