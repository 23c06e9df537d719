"""The Celery example of docs/existing-clients.md runs as written: examples/celery_app.py, its worker
started with the page's command (`celery -A celery_app worker -P solo`), then the page's one-line call
and `celery -A celery_app kittiwake`, all against a real broker named by $CELERY_BROKER_URL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CALL = "from celery_app import add; print(add.delay(2, 3).get(timeout=10))"  # the page's command


def environment(broker: BrokerProcess) -> dict[str, str]:
    return {**os.environ, "CELERY_BROKER_URL": f"kittiwake://{broker.host}:{broker.port}"}


@contextmanager
def celery_worker(broker: BrokerProcess, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as sink:
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "solo",
                                   "--loglevel=INFO"],  # the page's command; INFO for its ready line
                                  cwd=EXAMPLES, env=environment(broker), stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text(errors="replace"):  # "celery@host ready.": before the 10 s get()
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the worker is not ready after 60 s\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def run(broker: BrokerProcess, *command: str) -> str:
    done = subprocess.run([sys.executable, *command], cwd=EXAMPLES, env=environment(broker),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_celery_example_runs_its_task_on_a_worker(broker: BrokerProcess, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with celery_worker(broker, log):
        assert run(broker, "-c", CALL) == "5\n"
        listing = run(broker, "-m", "celery", "-A", "celery_app", "kittiwake")
    assert "celery" in listing, listing
    assert "celery_app.add" in log.read_text()  # the worker ran the example's task
