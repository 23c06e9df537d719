"""The Celery app of `kittiwake bench celery`: one module, run on Redis and on Kittiwake unchanged.

Its broker is `$CELERY_BROKER_URL` (Celery reads it by itself: `redis://…` or
`kittiwake://…`) and its queue `$KITTIWAKE_BENCH_CELERY_QUEUE`. The task is
the benchmarks' null task (`kittiwake.bench.tally`: counted in a tally file, no result
kept), acknowledged late — after it ran — as a task that must not be lost is.
Everything else is Celery's default. `create_app(url)` builds the same app
for the submitting side, which names its broker explicitly.
"""

from __future__ import annotations

import os

from celery import Celery

from kittiwake.bench.tally import null_task

QUEUE_ENV = "KITTIWAKE_BENCH_CELERY_QUEUE"
TASK_NAME = "bench.celery.null"


def create_app(broker_url: str | None = None) -> Celery:
    app = Celery("kittiwake_bench_celery", broker=broker_url)
    app.conf.task_default_queue = os.environ.get(QUEUE_ENV, "bench.celery")
    app.conf.task_acks_late = True
    app.conf.task_ignore_result = True
    app.conf.broker_connection_retry_on_startup = True  # Celery's own default; set only to silence its warning

    app.task(name=TASK_NAME, shared=False)(null)
    return app


def null(payload: str) -> None:
    null_task(payload)


app = create_app()
