"""pgqueuer on PostgreSQL, for `kittiwake bench peers`.

`create` is the factory `pgq run kittiwake_benchmarks.peers.pgqueuer_peer:create`
loads: a `PgQueuer` on one asyncpg connection with the null task as the
entrypoint `null` (an `async def`, pgqueuer's usual form). Two such commands
are the two worker processes, each with pgqueuer's defaults (batches of 10,
no concurrency limit, LISTEN/NOTIFY wake-ups). The database is `$PGDSN` and
the objects live in the schema `$PGQUEUER_SCHEMA`, both read by pgqueuer
itself; `pgq install` made them. One at a time goes through
`queries.enqueue("null", payload)`; many through the list form of the same
call, one INSERT per call. pgqueuer keeps no results.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from kittiwake.bench.tally import null_task
from kittiwake_benchmarks.settings import PEERS_BULK_CHUNK

ENTRYPOINT = "null"


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT)
    async def null(job: Job) -> None:
        null_task(job.payload or b"")

    try:
        yield pgq
    finally:
        await connection.close()


class Submitter:
    bulk_api = f'queries.enqueue(["null"] * n, payloads, [0] * n), {PEERS_BULK_CHUNK} jobs per call'
    threaded_submit = "its client is one asyncpg connection on one event loop, not shared between threads"

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.connection = self.runner.run(asyncpg.connect(os.environ["PGDSN"]))
        self.queries = Queries(AsyncpgDriver(self.connection))

    def submit(self, payload: str) -> None:
        self.runner.run(self.queries.enqueue(ENTRYPOINT, payload.encode()))

    def submit_many(self, payloads: list[str]) -> None:
        count = len(payloads)
        self.runner.run(self.queries.enqueue([ENTRYPOINT] * count, [p.encode() for p in payloads], [0] * count))

    def waiting(self) -> int | None:
        rows = self.runner.run(self.queries.queue_size())
        return sum(row.count for row in rows)

    def purge(self) -> None:
        self.runner.run(self.queries.clear_queue())

    def close(self) -> None:
        self.runner.run(self.connection.close())
        self.runner.close()
