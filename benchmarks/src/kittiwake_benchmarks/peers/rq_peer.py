"""RQ on Redis, for `kittiwake bench peers`.

The null task is an RQ job on queue `bench`, run by `rq worker-pool -n 2`
(two workers of RQ's default worker class, which forks a work horse per
job; the class is named through this module so it is imported before the fork). Jobs are enqueued with `result_ttl=0`, RQ's way to keep no result (the
fire-and-forget of the other rows). One at a time goes through
`queue.enqueue(f, x)`; many through `queue.enqueue_many`, one Redis pipeline
per call. The broker is `$KITTIWAKE_BENCH_REDIS_URL`.
"""

from __future__ import annotations

import os

import rq
from redis import Redis
from rq import Queue

from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK, PEERS_QUEUE, PEERS_REDIS_URL_ENV


def null(payload: str) -> None:
    null_task(payload)


# RQ's default worker class, named through this module (`rq worker-pool --worker-class
# kittiwake_benchmarks.peers.rq_peer.Worker`) so the worker imports the task's module once, before it
# forks its work horses, rather than each horse importing it again: the preloading RQ's
# performance notes recommend.
Worker = rq.Worker


class Submitter:
    bulk_api = f"queue.enqueue_many([...]), {PEERS_BULK_CHUNK} jobs per call"

    def __init__(self) -> None:
        self.redis = Redis.from_url(os.environ[PEERS_REDIS_URL_ENV])
        self.queue = Queue(PEERS_QUEUE, connection=self.redis)

    def submit(self, payload: str) -> None:
        self.queue.enqueue(null, payload, result_ttl=0)

    def submit_many(self, payloads: list[str]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(null, (payload,), result_ttl=0) for payload in payloads])

    def waiting(self) -> int | None:
        return self.queue.count

    def purge(self) -> None:
        self.queue.empty()

    def close(self) -> None:
        self.redis.close()
