"""Every default of the benchmarks, declared once: the CLI's options and the benchmarks read them here.

The settings of each of the broker's own benchmarks (`OpsSettings`, `LatencySettings`,
`ScaleSettings`, `ProducerBenchSettings`; `cluster`'s are in `cluster_settings`) are what
`kittiwake bench ...` lets a user change; their defaults are the CLI's defaults and the sizes the
figures of docs/performance.md were measured at. The constants are what every run keeps: task data sizes, the
queues each benchmark writes to, the leases it takes. The figures the benchmarks are held against
(seeds and targets) are in `references`. The benchmarks of other systems (the `kittiwake_benchmarks`
distribution) read these too, beside their own settings.

This module imports nothing of the benchmarks, so `kittiwake bench --help` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

# ------------------------------------------------------------------- runs

DURABILITIES = ("fsync", "os")  # the broker's --durability: on disk, or handed to the OS
DURABILITY = "fsync"  # an ok reply means the change is on disk
DATA_BYTES = 1024  # data per task: TaskMaster's 1 KB tasks
FSYNC_BLOCK_BYTES = 4096  # what the fsync probe writes and syncs, a page of the WAL
LOAD_PROCESSES = 2  # load processes the connections are spread over

# ----------------------------------------------------------------- leases

# A lease taken to be dequeued at once (the wake probe, the first lease after a
# restart): the broker's default lease.
PROBE_LEASE_SECS = 30.0
# A lease held while working: a worker's batch plus the prefetched one even of
# 1 s tasks, a load connection's lease between its lease and its dequeue.
WORK_LEASE_SECS = 300.0
# The wake probe's long-poll: far beyond its pause before the enqueue lands.
WAKE_WAIT_SECS = 30.0
# A restarted broker answers its first lease within this, or the benchmark fails.
FIRST_LEASE_TIMEOUT_SECS = 300.0

# ----------------------------------------------------------------- queues

OPS_SINGLE_PREFIX = "bench.ops."  # `ops` single-task figures: bench.ops.0 .. bench.ops.<queues - 1>
OPS_BULK_PREFIX = "bench.bulk."  # `ops` batched figures
LATENCY_ROUND_TRIP_QUEUE = "bench.latency.round-trip"
LATENCY_WAKE_QUEUE = "bench.latency.wake"
SCALE_BIG_QUEUE = "scale.big"
SCALE_SMALL_QUEUE = "scale.small"  # the empty broker's peer of the big queue
SCALE_SPREAD_PREFIX = "scale.spread."  # scale.spread.000000 .. one per --queues
COLD_QUEUE_PREFIX = "cold."  # the cold restart's data directory, written through the store

# ---------------------------------------------------------------- workers

# `workers` and `cluster`'s user path: the queue of every task of `user_app` (a fresh broker per figure)
WORKERS_QUEUE = "bench.workers"
# A Redis database of its own, emptied before and after each use: `producer`'s Huey reference and the
# Redis peers of the benchmarks distribution (`kittiwake_benchmarks`)
PEERS_REDIS_URL = "redis://127.0.0.1:6379/12"

# ---------------------------------------------------------------- filling

FILL_BATCH = 500  # tasks per request when queues are filled before a figure (unmeasured)
FILL_CONNECTIONS = 4  # connections that fill one queue, measured or not

# -------------------------------------------------------------- benchmarks

OPS_FIGURES = ("enqueue", "fifo_enqueue", "lease_dequeue", "batch_enqueue", "batch_lease_dequeue")


@dataclass(frozen=True)
class OpsSettings:
    seconds: float = 10.0
    warmup_secs: float = 2.0
    clients: int = 50
    batch: int = 100
    queues: int = 10
    processes: int = LOAD_PROCESSES
    durability: str = DURABILITY
    data_bytes: int = DATA_BYTES
    only: tuple[str, ...] = ()  # figure names to run; empty: all
    store_url: str | None = None  # the broker's store (sqlite://DIR, postgresql://…); None: a throwaway SQLite directory
    brokers: int = 1  # > 1: rows of 1 broker alone and 1 … brokers sharing a PostgreSQL store (`ops.broker_rows`)


@dataclass(frozen=True)
class LatencySettings:
    samples: int = 5000
    fsync_samples: int = 5000
    durability: str = DURABILITY
    data_bytes: int = DATA_BYTES


@dataclass(frozen=True)
class ProducerBenchSettings:
    tasks: int = 200_000  # through the producer, one thread
    client_tasks: int = 5_000  # plain Client.enqueue, the reference
    huey_tasks: int = 20_000  # Huey's single enqueue on Redis
    samples: int = 2_000  # latency samples of each kind, interleaved
    data_bytes: int = 100
    durability: str = DURABILITY
    redis_url: str = PEERS_REDIS_URL
    huey: bool = True


PRODUCER_QUEUE = "bench.producer"  # `producer`: every figure's tasks


class QuickProducer(TypedDict):
    """The sizes `bench producer --quick` replaces."""

    tasks: int
    client_tasks: int
    huey_tasks: int
    samples: int


QUICK_PRODUCER: QuickProducer = {"tasks": 2_000, "client_tasks": 200, "huey_tasks": 200, "samples": 50}


@dataclass(frozen=True)
class ScaleSettings:
    big: int = 1_000_000
    queues: int = 100_000
    spread: int = 200_000
    samples: int = 2000
    fill_batch: int = 1000
    durability: str = DURABILITY
    data_bytes: int = DATA_BYTES
    recovery_tasks: int = 10_000_000


