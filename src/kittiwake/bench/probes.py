"""Sequential probes run in a load process: enqueue → parked long-poll lease, and the disk's fsync.

* `run_wake_probe`: a worker connection parks a long-poll lease on an empty
  queue; after `park_secs` (so the lease is surely waiting at the broker) a
  producer connection sends an enqueue; the sample is the time from sending
  the enqueue to receiving the worker's lease reply. The worker dequeues the
  task before the next sample, so the queue is empty again.
* `run_fsync_probe`: write 4 KiB over a block of a file and `os.fsync` it —
  the least a durable commit costs on this disk — or append it (the file's
  size changes too, as while SQLite's WAL grows).

The wake probe's connections are `wire.RawConnection`s whose replies resolve
a future per request id: their cost per request does not matter, only the
broker's and the disk's time does.
"""

from __future__ import annotations

import asyncio
import os
import time
from multiprocessing.sharedctypes import Synchronized
from typing import Protocol

from kittiwake.bench.jobs import FsyncProbe, LoadResult, WakeProbe
from kittiwake.bench.processes import cpu_secs
from kittiwake.bench.settings import PROBE_LEASE_SECS, WAKE_WAIT_SECS
from kittiwake.bench.wire import checked, lease_refs, open_connection


class Progress(Protocol):
    """Where a probe counts what it has done: a load process's shared `Value`, or a progress bar's."""

    value: int


async def run_wake_probe(job: WakeProbe, counter: Synchronized) -> LoadResult:
    """Time from sending an enqueue to receiving the lease reply of a parked long-poll."""
    worker = await open_connection(job.host, job.port)
    producer = await open_connection(job.host, job.port)
    data = os.urandom(job.data_bytes)
    result = LoadResult()
    cpu_before = cpu_secs()
    wall_before = time.monotonic()
    lease_fields = {"queues": [job.queue], "max_tasks": 1, "lease_secs": PROBE_LEASE_SECS,
                    "wait_secs": WAKE_WAIT_SECS, "worker": "bench-wake"}
    enqueue_fields = {"tasks": [{"queue": job.queue, "data": data}]}
    for index in range(job.warmup + job.samples):
        leasing = worker.call("lease", lease_fields)
        await asyncio.sleep(job.park_secs)
        if leasing.done():  # answered before anything was enqueued: the queue was not empty
            checked(leasing.result(), "lease")
            raise RuntimeError(f"queue {job.queue} was not empty at the start of a wake probe")
        sent_ns = time.monotonic_ns()
        enqueueing = producer.call("enqueue", enqueue_fields)
        leased = checked(await leasing, "lease")
        woke_ns = time.monotonic_ns()
        checked(await enqueueing, "enqueue")
        if not leased:
            raise RuntimeError("long-poll lease returned no task after an enqueue")
        checked(await worker.call("dequeue", {"leases": lease_refs(leased)}), "dequeue")
        if index >= job.warmup:
            result.latencies_ns.append(woke_ns - sent_ns)
            result.tasks += 1
            result.ops += 1
            result.first_start_ns = result.first_start_ns or sent_ns
            result.last_end_ns = woke_ns
        counter.value = index + 1
    result.cpu_secs = cpu_secs() - cpu_before
    result.wall_secs = time.monotonic() - wall_before
    worker.close()
    producer.close()
    return result


def run_fsync_probe(job: FsyncProbe, counter: Progress) -> LoadResult:
    """The disk's own commit cost: write 4 KiB and fsync it.

    Overwriting a block of a file that is already written and synced is what a
    WAL commit costs once SQLite reuses its WAL file after a checkpoint (no
    file-size change to journal): the floor under a durable reply. Appending
    also changes the file's size, as a commit does while the WAL grows.
    """
    path = os.path.join(job.directory, f"fsync-probe-{os.getpid()}.bin")
    block = os.urandom(job.block_bytes)
    size = job.block_bytes
    result = LoadResult()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if not job.append:
            blocks = min(job.samples, 4096)  # reused round-robin: at most 16 MiB written up front
            for _ in range(blocks):
                os.write(descriptor, block)
            os.fsync(descriptor)
        started = time.monotonic()
        cpu_before = cpu_secs()
        for index in range(job.samples):
            before = time.monotonic_ns()
            if job.append:
                os.write(descriptor, block)
            else:
                os.pwrite(descriptor, block, (index % blocks) * size)
            os.fsync(descriptor)
            after = time.monotonic_ns()
            result.latencies_ns.append(after - before)
            result.ops += 1
            result.first_start_ns = result.first_start_ns or before
            result.last_end_ns = after
            counter.value = index + 1
            if time.monotonic() - started > job.max_secs:
                break
            if job.pause_secs:
                time.sleep(job.pause_secs)
    finally:
        os.close(descriptor)
        os.unlink(path)
    result.wall_secs = time.monotonic() - started
    result.cpu_secs = cpu_secs() - cpu_before
    return result
