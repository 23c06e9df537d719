"""The pull loop of one worker process (`kittiwake.worker.loop`), run in the test's own process.

Its clocks are passed in, as the settler's and the heartbeat's are: the wall
clock decides which delayed tasks are due, so a loop whose wall clock runs two
hours ahead runs a task delayed by one hour at once.
"""

from __future__ import annotations

import threading
import time

from kittiwake.worker import WorkerConfig, WorkerLoop
from support.broker_process import BrokerProcess
from worker import apps


def test_the_loop_takes_the_wall_clock_that_says_what_is_due(broker: BrokerProcess, app) -> None:
    handle = apps.add.submit(1, 2, delay=3600.0)
    assert handle.queue == "tests.delayed"
    loop = WorkerLoop(
        app, WorkerConfig(url=broker.url, queues=["tests"], wait_secs=0.2, delayed_poll_secs=0.1),
        wall_clock=lambda: time.time() + 7200.0,
    )
    runner = threading.Thread(target=loop.run, name="test-worker-loop", daemon=True)
    runner.start()
    try:
        assert handle.result(timeout=30) == 3
    finally:
        loop.stop()
        runner.join(30)
    assert not runner.is_alive()
    assert loop.finished == 1


def test_tasks_waiting_behind_a_slow_one_go_back_to_the_broker(broker: BrokerProcess, app, tmp_path) -> None:
    """Fast tasks grow the prefetch; once a slow run is seen it drops to nothing ahead, and the
    tasks then waiting for the slot are handed back unstarted (no attempt used), so another
    worker's free slot could run them. Every task still runs exactly once."""
    path = str(tmp_path / "runs")
    handles = [apps.record.submit(path, f"fast-{n}") for n in range(300)]
    handles += [apps.record.submit(path, f"slow-{n}", 0.5) for n in range(3)]
    handles += [apps.record.submit(path, f"after-{n}") for n in range(20)]
    loop = WorkerLoop(app, WorkerConfig(url=broker.url, queues=["tests"], wait_secs=0.2))
    runner = threading.Thread(target=loop.run, name="test-worker-loop", daemon=True)
    runner.start()
    try:
        assert len(app.results(handles, timeout=60)) == len(handles)
    finally:
        loop.stop()
        runner.join(30)
    assert loop.given_back >= 1
    lines = (tmp_path / "runs").read_text().split("\n")
    starts = [line.split()[1] for line in lines if line.startswith("start")]
    assert sorted(starts) == sorted({*starts}) and len(starts) == len(handles)
