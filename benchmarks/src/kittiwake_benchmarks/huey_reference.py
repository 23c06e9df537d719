"""The Huey reference of `kittiwake bench producer`: Huey's single enqueue on Redis, from a process of its own.

`kittiwake bench producer` (in the wheel: `kittiwake.bench.producer`) measures one thread through
the batching producer against `Client.enqueue` and against this: `--huey-tasks` calls of Huey's
`f(x)`, made through the `bench peers` submitter (`peers.submitter`, the module `peers.huey_peer`)
on the claimed Redis database, emptied before and after. It reaches the wheel as the entry point
`huey_enqueue` of the group `kittiwake.bench.references` (`kittiwake.bench.distribution`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from kittiwake.bench import tally
from kittiwake.bench.processes import ProcessPool
from kittiwake.bench.producer import call_job
from kittiwake.bench.settings import ProducerBenchSettings
from kittiwake_benchmarks.peers import submitter
from kittiwake_benchmarks.peers.services import RedisDatabase
from kittiwake_benchmarks.settings import PEERS_REDIS_URL_ENV

HUEY_MODULE = "kittiwake_benchmarks.peers.huey_peer"


def huey_enqueue(settings: ProducerBenchSettings, payload: str, root: Path,
                 bar: Callable[[float, int], None]) -> dict[str, Any]:
    """Huey's single enqueue through the `bench peers` submitter: `{"tasks_per_s", "service"}`, or
    `{"skipped": why}` when the Redis database cannot be claimed."""
    redis = RedisDatabase(settings.redis_url)
    problem = redis.claim()
    if problem:
        return {"skipped": problem}
    durability, _ = redis.describe()
    pool = ProcessPool(1, submitter.serve)
    try:
        redis.empty()
        env = {PEERS_REDIS_URL_ENV: settings.redis_url, tally.TALLY_ENV: str(root / "huey-tally.bin")}
        call_job(pool, submitter.Open(HUEY_MODULE, {}, env), lambda *_: None, 1)
        call_job(pool, submitter.Submit(min(1000, settings.huey_tasks), payload), lambda *_: None, 1)  # warm
        call_job(pool, submitter.PURGE, lambda *_: None, 1)
        done: submitter.Submitted = call_job(pool, submitter.Submit(settings.huey_tasks, payload), bar,
                                             settings.huey_tasks)
        call_job(pool, submitter.PURGE, lambda *_: None, 1)
        call_job(pool, submitter.CLOSE, lambda *_: None, 1)
        return {"tasks_per_s": done.tasks_per_sec, "service": durability}
    finally:
        pool.close()
        try:
            redis.empty()
        finally:
            redis.release()
