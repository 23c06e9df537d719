"""Delayed tasks (pid = due time, leased with max_pid = now) and retries with exponential backoff."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kittiwake.app import TaskFailed
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, wait_for, workers


def test_a_delayed_task_waits_for_its_time_and_runs_once(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path, "--processes", "2", processes=2):
        submitted = time.time()
        handle = apps.slow.submit(str(runs), "later", 0.0, delay=3.0)  # three times its 1 s lease
        assert handle.queue == "short.delayed"
        time.sleep(1.0)
        assert handle.status().state == "pending"
        assert read_lines(runs) == []
        assert handle.result(timeout=30) == "later"
    lines = [line.split() for line in read_lines(runs)]
    assert [line[:2] for line in lines] == [["start", "later"], ["end", "later"]]
    assert float(lines[0][2]) >= submitted + 3.0


def test_a_failing_task_is_retried_with_backoff(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path):
        assert apps.flaky.submit(str(runs), 2).result(timeout=30) == 3
    times = [float(line.split()[1]) for line in read_lines(runs)]
    assert len(times) == 3
    # backoff 0.4 s doubling, jitter between half and all of it
    assert times[1] - times[0] >= 0.2
    assert times[2] - times[1] >= 0.4


def test_a_task_failing_every_attempt_ends_dead_with_its_error(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path):
        handle = apps.flaky.submit(str(runs), 100)
        waiting = wait_for(lambda: (lambda s: s if s.state == "pending" and s.note else None)(handle.status()),
                           every=0.01, message="a retry waiting out its backoff")
        assert waiting.note.startswith("retry ") and "after ConnectionError: run " in waiting.note
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=30)
    assert failure.value.type == "ConnectionError"
    assert len(read_lines(runs)) == 4  # max_attempts=4
    assert app.client.get("short.dead", handle.id).headers["kittiwake-dead-reason"] == "ERROR"
