"""A task over its `timeout` is killed (it runs in a child process of the worker) and retried or dead-lettered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kittiwake.app import TaskFailed
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, workers


def test_a_task_over_its_timeout_is_killed_then_dead_lettered(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path) as worker:
        handle = apps.overruns.submit(str(runs), 30.0)  # timeout=1, max_attempts=2
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=30)
        assert failure.value.reason == "TIMEOUT"
        assert apps.overruns.submit(str(runs), 0.0).result(timeout=30) == "finished"  # a fresh sandbox
        worker_pid = worker.worker_pids()[0]
    lines = [line.split() for line in read_lines(runs)]
    killed = [line for line in lines[:2]]
    assert [line[0] for line in killed] == ["start", "start"]  # two attempts, neither reached its end
    assert all(int(line[1]) not in (worker_pid, os.getpid()) for line in lines)  # ran in sandboxes
    assert len({line[1] for line in killed}) == 2  # the killed sandbox was replaced
    assert app.client.get("short.dead", handle.id).headers["kittiwake-dead-reason"] == "TIMEOUT"


def test_a_sandbox_s_start_does_not_count_against_the_task_s_timeout(broker: BrokerProcess, app, tmp_path: Path) -> None:
    # each sandbox imports the app for 3 s, longer than the task's timeout of 2 s: the timeout is
    # the run's, so a task that runs at once finishes however slow its sandbox was to start
    env = {"KITTIWAKE_TEST_SANDBOX_IMPORT_SECS": "3"}
    with workers(broker.url, tmp_path, env=env):
        assert apps.timed.submit(str(tmp_path / "runs")).result(timeout=30) == "finished"
    assert len(read_lines(tmp_path / "runs")) == 1  # on its first attempt
