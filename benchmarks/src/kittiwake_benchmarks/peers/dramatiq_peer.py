"""Dramatiq on Redis, for `kittiwake bench peers`.

The null task is an actor on queue `bench` of a `RedisBroker` at
`$KITTIWAKE_BENCH_REDIS_URL`, run by `dramatiq kittiwake_benchmarks.peers.dramatiq_peer
--processes 2` (8 threads per process, Dramatiq's default). Dramatiq keeps no
results unless a results middleware is added. One at a time goes through
`actor.send(x)`; many through `group(...).run()`, which enqueues one message
per task.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK, PEERS_QUEUE, PEERS_REDIS_URL_ENV

broker = RedisBroker(url=os.environ.get(PEERS_REDIS_URL_ENV))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=PEERS_QUEUE)
def null(payload: str) -> None:
    null_task(payload)


class Submitter:
    bulk_api = f"group(actor.message(x) for x in chunk).run(), chunks of {PEERS_BULK_CHUNK}"

    def submit(self, payload: str) -> None:
        null.send(payload)

    def submit_many(self, payloads: list[str]) -> None:
        dramatiq.group(null.message(payload) for payload in payloads).run()

    def waiting(self) -> int | None:
        return broker.client.llen(f"dramatiq:{PEERS_QUEUE}")

    def purge(self) -> None:
        broker.flush(PEERS_QUEUE)

    def close(self) -> None:
        broker.close()
