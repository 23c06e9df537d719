"""Producers for `bench flows`' join figure: tokens of a three-input join in random order, and the drain.

`tokens` deals every token of the run — `keys` keys × the ports — out of
one seeded shuffle: producer `p` of `n` sends the shuffled tokens `p, p+n,
p+2n, …` in that order, so the three tokens of a key come from different
producers at unrelated moments and arrive at the join in random order.
`Produce` is the job one producer process runs (`serve`, spawned by
`ProcessPool`): it connects (a real `AsyncClient`), waits for the common
start time, then sends its tokens in `enqueue_many` requests of `batch`
tokens with `in_flight` requests outstanding, and returns a `LoadResult`
(tokens sent, request latencies, first start and last end on the shared
monotonic clock). The same job with the plain queues is the reference: the
same tokens by the same producers, into queues no join watches.

`drain_jobs` empties the job queue afterwards (lease + dequeue in pages)
and checks each job: exactly one per key, no key twice, every port holding
the one token of its key.
"""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from dataclasses import dataclass
from typing import Any, Mapping

import msgspec

from kittiwake.bench.jobs import LoadResult
from kittiwake.bench.processes import cpu_secs, serve_jobs

JOIN_PORTS = ("a", "b", "c")
TOKEN_DATA_BYTES = 64
DRAIN_PAGE = 1000


@dataclass(frozen=True)
class Produce:
    """Producer `index` of `producers` sends its share of the tokens of `keys` keys to `queues`
    (port -> queue) from `start_ns` on."""

    url: str
    queues: tuple[tuple[str, str], ...]  # (port, queue)
    keys: int
    index: int
    producers: int
    batch: int
    in_flight: int
    seed: int
    start_ns: int


def key_of(number: int) -> str:
    return f"k{number:09d}"


def tokens(keys: int, ports: tuple[str, ...], seed: int, index: int, producers: int) -> list[tuple[str, str]]:
    """Producer `index`'s (port, key) tokens, in the order it sends them (see the module docstring)."""
    every = [(port, key_of(number)) for number in range(keys) for port in ports]
    random.Random(seed).shuffle(every)
    return every[index::producers]


def run_produce(job: Produce, counter: Any = None) -> LoadResult:
    """Send this producer's tokens; the measured result."""
    return asyncio.run(_produce(job, counter))


async def _produce(job: Produce, counter: Any) -> LoadResult:
    from kittiwake.client import AsyncClient

    queues = dict(job.queues)
    mine = tokens(job.keys, tuple(queues), job.seed, job.index, job.producers)
    payload = bytes(TOKEN_DATA_BYTES)
    batches = [[{"queue": queues[port], "pid": key, "data": payload} for port, key in mine[start:start + job.batch]]
               for start in range(0, len(mine), job.batch)]
    result = LoadResult(latencies_ns=array("q"))
    cpu_before = cpu_secs()
    wall_before = time.monotonic()
    async with AsyncClient(job.url) as client:
        await client.ping()
        pause = (job.start_ns - time.monotonic_ns()) / 1e9
        if pause > 0:
            await asyncio.sleep(pause)
        pending = iter(batches)
        result.first_start_ns = time.monotonic_ns()

        async def sender() -> None:
            for batch in pending:
                began = time.monotonic_ns()
                try:
                    await client.enqueue_many(batch)
                except Exception as error:  # noted, not raised: the other senders finish
                    result.errors += 1
                    result.first_error = result.first_error or f"{type(error).__name__}: {error}"
                    continue
                ended = time.monotonic_ns()
                result.latencies_ns.append(ended - began)
                result.tasks += len(batch)
                result.ops += 1
                result.last_end_ns = max(result.last_end_ns, ended)
                if counter is not None:
                    counter.value = result.tasks

        await asyncio.gather(*(sender() for _ in range(job.in_flight)))
    result.cpu_secs = cpu_secs() - cpu_before
    result.wall_secs = time.monotonic() - wall_before
    return result


def serve(pipe: Any, counter: Any) -> None:
    """A producer process's main loop (`ProcessPool`)."""
    serve_jobs(pipe, counter, lambda job: run_produce(job, counter))


# ------------------------------------------------------------------ checking


@dataclass
class DrainResult:
    jobs: int = 0
    distinct_keys: int = 0
    duplicates: int = 0  # jobs of a key already seen
    missing: int = 0  # keys without a job
    malformed: int = 0  # jobs whose ports do not hold exactly their key's one token
    seconds: float = 0.0

    @property
    def exactly_once(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.malformed == 0

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "distinct_keys": self.distinct_keys, "duplicates": self.duplicates,
                "missing": self.missing, "malformed": self.malformed, "exactly_once": self.exactly_once,
                "drain_s": round(self.seconds, 3)}


def drain_jobs(client: Any, job_queue: str, keys: int, join: str, ports: Mapping[str, str]) -> DrainResult:
    """Lease and dequeue every job of `job_queue`, checking each (see the module docstring)."""
    decoder = msgspec.msgpack.Decoder()
    seen: set[str] = set()
    result = DrainResult()
    began = time.monotonic()
    while True:
        leased = client.lease(job_queue, max_tasks=DRAIN_PAGE, lease_secs=300)
        if not leased:
            break
        for task in leased:
            result.jobs += 1
            if task.pid in seen:
                result.duplicates += 1
                continue
            seen.add(task.pid)
            body = decoder.decode(task.data)
            held = body.get("tokens") or {}
            if body.get("join") != join or body.get("key") != task.pid or set(held) != set(ports) or any(
                    len(items) != 1 or items[0]["pid"] != task.pid for items in held.values()):
                result.malformed += 1
        client.dequeue(leased)
    result.distinct_keys = len(seen)
    result.missing = keys - len(seen & {key_of(number) for number in range(keys)})
    result.seconds = time.monotonic() - began
    return result
