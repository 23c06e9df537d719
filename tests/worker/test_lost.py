"""A worker process that dies: its supervisor says so, with the signal and the tasks it held, and hands
those back at once — the running ones with an attempt counted and the reason WORKER_LOST naming the
process and its signal, the ones not started without — instead of leaving them to their leases."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from kittiwake import Client
from kittiwake.constants import DEAD_REASON_HEADER
from kittiwake.errors import TaskFailed
from kittiwake.worker.lost import exit_description, lost_reason
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, workers


def aborted_pids(runs: Path) -> list[int]:
    return [int(line.split()[1]) for line in read_lines(runs) if line.startswith("abort ")]


def test_exit_descriptions_name_the_signal_or_the_status() -> None:
    assert exit_description(-signal.SIGABRT) == "died of SIGABRT"
    assert exit_description(-signal.SIGKILL) == "died of SIGKILL"
    assert exit_description(3) == "exited with status 3"
    assert exit_description(-99) == "died of signal 99"
    assert lost_reason(427, -signal.SIGABRT) == "WORKER_LOST: process 427 died of SIGABRT"


def test_a_task_that_kills_its_process_fails_as_worker_lost_without_waiting_out_its_lease(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    submitted_at = time.monotonic()
    handle = apps.aborts.submit(str(runs))
    with workers(broker.url, tmp_path, "--queues", "lost", "--prefetch", "0") as worker:
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=apps.LOST_LEASE_SECS * 0.75)
        # twice handed back at once, not twice waited out (two leases would be 120 s)
        assert time.monotonic() - submitted_at < apps.LOST_LEASE_SECS / 2
        first, second = aborted_pids(runs)
        assert failure.value.reason == f"WORKER_LOST: process {second} died of SIGABRT"
        with Client(broker.url) as client:
            dead = client.peek("lost.dead")
            assert [(letter.headers or {}).get(DEAD_REASON_HEADER) for letter in dead] == [failure.value.reason]
        # one line per death, with the signal and the task; then the worker goes on serving
        deaths = [line for line in worker.log().splitlines() if "died of SIGABRT" in line]
        assert len(deaths) == 2, worker.log()[-3000:]
        for pid, line in zip((first, second), deaths):
            assert f"pid {pid}" in line and f"lost/{handle.pid}" in line, line
        assert apps.attempt_of.submit("after").result(timeout=30) == 1


def test_tasks_a_dead_process_had_not_started_come_back_at_once_without_an_attempt(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    crashing = apps.aborts.submit(str(runs))  # first in line: the only slot takes it first
    waiting = [apps.attempt_of.submit(f"t{n}") for n in range(3)]
    with workers(broker.url, tmp_path, "--queues", "lost", "--concurrency", "1", "--prefetch", "5") as worker:
        assert app.results(waiting, timeout=apps.LOST_LEASE_SECS / 2) == [1, 1, 1]
        with pytest.raises(TaskFailed):
            crashing.result(timeout=apps.LOST_LEASE_SECS / 2)
        deaths = [line for line in worker.log().splitlines() if "died of SIGABRT" in line]
        assert len(deaths) == 2 and all("3 not started" in line for line in deaths), deaths


def test_a_timed_task_that_kills_its_sandbox_fails_as_worker_lost_naming_the_signal(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """The worker process stays: its runner says how the sandbox died, in the same words."""
    handle = apps.aborts_in_its_sandbox.submit()
    with workers(broker.url, tmp_path, "--queues", "lost") as worker:
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=apps.LOST_LEASE_SECS / 2)
        assert failure.value.reason == "WORKER_LOST"
        assert "died of SIGABRT during the task" in failure.value.remote_message
        assert "died of" not in worker.log()  # no worker process died


def test_an_at_most_once_task_whose_sandbox_dies_is_dead_lettered_not_started_again(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """WORKER_LOST was retried whatever the task's delivery: an at-most-once task started three times."""
    runs = tmp_path / "runs"
    handle = apps.aborts_in_its_sandbox_at_most_once.submit(str(runs))
    with workers(broker.url, tmp_path, "--queues", "lost"):
        with pytest.raises(TaskFailed) as failure:
            handle.result(timeout=apps.LOST_LEASE_SECS / 2)
    assert failure.value.reason == "WORKER_LOST"
    assert len([line for line in read_lines(runs) if line.startswith("start ")]) == 1
