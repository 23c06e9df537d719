"""Fixtures of the flow tests: workers of a flow run in the test's own process.

* `python_workers(flow)`: a `WorkerLoop` (the loop of `kittiwake worker`) serving the flow's
  python steps, in a thread; stopped at teardown.
* `spark_workers(flow)`: a `SparkWorker` on the run's shared SparkSession (`spark_session`),
  in a thread; stopped at teardown.
* `fail_dir`: a folder named by `$KITTIWAKE_TEST_FAIL_DIR`: a file `<step>` in it makes that
  step of `flow.pipelines` raise, `<step>.slow` makes it sleep (see `pipelines.maybe_fail`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from flow.pipelines import FAIL_FILE_ENV
from kittiwake import Client
from support.broker_process import BrokerProcess


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    with Client(broker.url) as connected:
        yield connected


@pytest.fixture
def fail_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "fail"
    folder.mkdir()
    monkeypatch.setenv(FAIL_FILE_ENV, str(folder))
    return folder


def _in_thread(target: Callable[[], Any], stop: Callable[[], None], name: str) -> Callable[[], None]:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()

    def stopper() -> None:
        stop()
        thread.join(60)
        assert not thread.is_alive(), f"{name} did not stop"

    return stopper


@pytest.fixture
def python_workers(broker: BrokerProcess) -> Iterator[Callable[..., Any]]:
    from kittiwake.worker import WorkerConfig, WorkerLoop

    stoppers: list[Callable[[], None]] = []

    def start(flow: Any, concurrency: int = 2) -> Any:
        app = flow.kittiwake_app()
        app.url = None
        loop = WorkerLoop(app, WorkerConfig(url=broker.url, concurrency=concurrency, wait_secs=0.2,
                                            registry_every_secs=0.5, shutdown_secs=5))
        stoppers.append(_in_thread(loop.run, loop.stop, f"python-steps-{flow.name}"))
        return loop

    yield start
    for stop in reversed(stoppers):
        stop()


@pytest.fixture
def spark_workers(broker: BrokerProcess, spark_session: Any) -> Iterator[Callable[..., Any]]:
    from kittiwake.flow.spark_worker import SparkWorker

    stoppers: list[Callable[[], None]] = []

    def start(*flows: Any, concurrency: int = 2, lease_secs: float | None = None, fuse: bool = True) -> Any:
        worker = SparkWorker(list(flows), url=broker.url, session=spark_session, concurrency=concurrency,
                             wait_secs=0.2, lease_secs=lease_secs, shutdown_secs=10, fuse=fuse)
        stoppers.append(_in_thread(worker.run, worker.stop, "spark-steps"))
        assert worker.started.wait(30)
        return worker

    yield start
    for stop in reversed(stoppers):
        stop()
