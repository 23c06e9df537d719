"""Huey on Redis, for `kittiwake bench peers`.

The null task of a `RedisHuey` named `bench` at `$KITTIWAKE_BENCH_REDIS_URL`
(blocking reads, Huey's default for Redis), run by `huey_consumer
kittiwake_benchmarks.peers.huey_peer.huey -w 2 -k process`. A task that returns
None stores no result (Huey's default). One at a time is a call of the task
(`f(x)` enqueues it); many go through `f.map(items)`, which enqueues one
message per task.
"""

from __future__ import annotations

import os

from huey import RedisHuey

from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK, PEERS_QUEUE, PEERS_REDIS_URL_ENV

huey = RedisHuey(PEERS_QUEUE, url=os.environ.get(PEERS_REDIS_URL_ENV))


@huey.task()
def null(payload: str) -> None:
    null_task(payload)


class Submitter:
    bulk_api = f"f.map(chunk), chunks of {PEERS_BULK_CHUNK}"

    def submit(self, payload: str) -> None:
        null(payload)

    def submit_many(self, payloads: list[str]) -> None:
        null.map(payloads)

    def waiting(self) -> int | None:
        return huey.pending_count()

    def purge(self) -> None:
        huey.flush()

    def close(self) -> None:
        pass
