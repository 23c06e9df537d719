"""Celery on Redis, for `kittiwake bench peers`.

The Celery app and its null task (`ignore_result=True`, no result backend),
loaded by `celery -A kittiwake_benchmarks.peers.celery_peer worker --concurrency 2`
(the prefork pool, Celery's default, with its default prefetch of 4 per
process). The broker is `$KITTIWAKE_BENCH_REDIS_URL`. One at a time goes
through `f.delay(x)`; many through a `group` of signatures, Celery's API for
submitting many calls (it publishes one message per task).
"""

from __future__ import annotations

import os

from celery import Celery, group

from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK, PEERS_QUEUE, PEERS_REDIS_URL_ENV

app = Celery("kittiwake_bench_peers", broker=os.environ.get(PEERS_REDIS_URL_ENV))
app.conf.task_default_queue = PEERS_QUEUE
app.conf.broker_connection_retry_on_startup = True  # Celery's own default; set only to silence its warning


@app.task(name="bench.null", ignore_result=True)
def null(payload: str) -> None:
    null_task(payload)


class Submitter:
    bulk_api = f"group(f.s(x) for x in chunk).apply_async(), chunks of {PEERS_BULK_CHUNK}"

    def submit(self, payload: str) -> None:
        null.delay(payload)

    def submit_many(self, payloads: list[str]) -> None:
        group(null.s(payload) for payload in payloads).apply_async()

    def waiting(self) -> int | None:
        from kombu.transport.redis import Channel as RedisChannel

        with app.connection_for_write() as connection:
            channel = connection.default_channel
            assert isinstance(channel, RedisChannel)  # the peers' Celery runs on Redis
            length: int = channel.client.llen(PEERS_QUEUE)
            return length

    def purge(self) -> None:
        app.control.purge()

    def close(self) -> None:
        app.close()
