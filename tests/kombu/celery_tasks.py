"""A plain Celery app, the same file on Redis and on Kittiwake: only the environment differs.

The broker comes from `CELERY_BROKER_URL` (redis://… or kittiwake://…), results
travel back through the broker (`rpc://`), and the queue is `$CELERY_TASKS_QUEUE`
so that runs sharing one Redis server do not meet. Tasks are acknowledged late
(after they ran), so a worker that dies mid-task leaves its task to another.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

app = Celery("celery_tasks", backend="rpc://")
app.conf.task_default_queue = os.environ.get("CELERY_TASKS_QUEUE", "celery_tasks")
app.conf.task_acks_late = True
app.conf.worker_prefetch_multiplier = 1
app.conf.broker_connection_retry_on_startup = True
if os.environ.get("CELERY_TASKS_CONNECT_TIMEOUT"):  # how long one connection attempt may take (Celery: 4 s)
    app.conf.broker_connection_timeout = float(os.environ["CELERY_TASKS_CONNECT_TIMEOUT"])


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True, max_retries=5)
def fail_then_succeed(self, failures: int) -> int:
    """Fails `failures` times, retrying after a short countdown, then returns how many retries it took."""
    if self.request.retries < failures:
        raise self.retry(exc=RuntimeError(f"failure {self.request.retries + 1}"), countdown=0.2)
    return self.request.retries


@app.task(ignore_result=True)
def null() -> None:
    pass


@app.task
def run_once_slowly(marker: str) -> int:
    """Notes each start in the file `marker`; the first run then hangs (to be killed), later runs return
    how many starts there were."""
    path = Path(marker)
    with path.open("a") as file:
        file.write(f"{os.getpid()}\n")
    starts = len(path.read_text().splitlines())
    if starts == 1:
        time.sleep(120)
    return starts


@app.task
def noted_sleep(marker: str, sleep_secs: float) -> str:
    """Notes its start in the file `marker`, sleeps, and says so."""
    Path(marker).write_text(f"{os.getpid()}\n")
    time.sleep(sleep_secs)
    return "slept"
