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
