"""Long tasks keep their lease through the heartbeat, and report progress through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, wait_for, workers


def test_a_task_running_five_times_its_lease_completes_once(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    handle = apps.slow.submit(str(runs), "long", 5.0)  # lease_secs=1
    with workers(broker.url, tmp_path, "--processes", "2", processes=2):
        assert handle.result(timeout=30) == "long"
    assert [line.split()[:2] for line in read_lines(runs)] == [["start", "long"], ["end", "long"]]
    assert app.client.list_queues("^short") == []


@pytest.mark.parametrize("task", [apps.reports_progress, apps.reports_progress_sandboxed], ids=["thread", "sandbox"])
def test_progress_reported_by_the_task_shows_in_status(broker: BrokerProcess, app, tmp_path: Path, task) -> None:
    marks = tmp_path / "marks"
    handle = task.submit(str(marks), 20.0)
    assert handle.status().state == "pending"
    with workers(broker.url, tmp_path):
        wait_for(lambda: read_lines(marks), message="the task to report")
        status = wait_for(lambda: (lambda s: s if s.progress is not None else None)(handle.status()),
                          message="progress in the status")
        assert status.state == "running"
        assert status.progress == 0.4
        assert status.note == "resized 40 of 100"
        Path(str(marks) + ".go").touch()
        assert handle.result(timeout=20) == handle.id
    assert handle.status().state == "done"
