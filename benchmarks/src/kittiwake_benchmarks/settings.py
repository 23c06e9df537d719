"""Every default of the benchmarks of other systems, declared once: their commands and runs read them here.

The settings of each benchmark (`TasksSettings`, `PeersSettings`, `CelerySettings`,
`WorkersSettings`, `FlowsSettings`, `MapReduceSettings`) are what `kittiwake bench ...` lets a user
change; their defaults are the CLI's defaults and the sizes the figures of docs/performance.md were measured at.
What they share with the broker's own benchmarks (durability, data sizes, leases, the Redis
database) is `kittiwake.bench.settings`; the figures they are held against are in
`kittiwake.bench.references`.

This module imports nothing of the benchmarks, so `kittiwake bench --help` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypedDict

from kittiwake.bench.settings import DURABILITY, PEERS_REDIS_URL

# ----------------------------------------------------------------- queues

TASKS_GROUP = "bench"  # `tasks`: bench#tasks.<figure>, and the submitter's bench#reply.<figure>
FLOWS_JOIN_GROUP = "bench.join"  # `flows`: the join's ports and job queue, bench.join#in.a …, bench.join#jobs
FLOWS_PLAIN_GROUP = "bench.plain"  # `flows`: the plain enqueue reference's queues, bench.plain#in.a …

# ------------------------------------------------------------------ peers

PEERS_QUEUE = "bench"  # `peers`: the queue (Kittiwake, Celery, RQ, Dramatiq) or Huey's name every system uses
PEERS_BULK_CHUNK = 1000  # tasks per call of each system's bulk API (Kittiwake: app.map's chunk)
PEERS_SUBMIT_THREADS = 8  # `peers`: threads submitting one task per call at once, in the threaded submit phase
PEERS_REDIS_URL_ENV = "KITTIWAKE_BENCH_REDIS_URL"  # how the Redis peers' modules find their database
PEERS_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"  # pgqueuer's objects go to a schema of their own
PEERS_SCHEMA_PREFIX = "kittiwake_bench_peers_"  # + this run's pid; dropped at the end
KITTIWAKE_SYSTEM = "kittiwake"  # the reference row, always run
PEER_SYSTEMS = ("kittiwake-results", "celery", "rq", "dramatiq", "huey", "pgqueuer")  # what --peers chooses from


@dataclass(frozen=True)
class TasksSettings:
    tasks: int = 100_000  # null tasks
    workers: int = 2
    bundle: int = 1000  # tasks per enqueue request
    max_batch: int = 500  # tasks per lease, at most
    results: str = "batch"  # one result message per batch, or per "task"
    latency_tasks: int = 5000
    latency_rate_per_sec: float = 1000.0
    busy_secs: float = 5.0  # work per worker in each homogeneous efficiency figure
    mixed_busy_secs: float = 15.0  # work per worker in the mixed figure
    mixed_seed: int = 34
    spark_tasks: int = 2000
    durability: str = DURABILITY


@dataclass(frozen=True)
class FlowsSettings:
    join_keys: int = 100_000  # keys of the three-input join: three tokens each
    producers: int = 4  # producer processes
    batch: int = 100  # tokens per enqueue request
    in_flight: int = 4  # requests outstanding per producer
    start_samples: int = 200  # step-start samples (one run each)
    start_warmup: int = 20
    noop_samples: int = 50  # Spark no-op jobs and lease wake-ups, the step start's references
    size: str = "300MB"  # the pipeline's dataset, as `kittiwake demo --size`
    shards: int | None = None  # default: as the demo
    warmup_size: str = "50MB"  # one unmeasured pass of both pipelines first (the JIT warms up); "0" skips
    repeats: int = 2  # passes of each pipeline, in ABBA order
    seed: int = 2025
    durability: str = DURABILITY
    only: tuple[str, ...] = ()  # figures to run (FLOWS_FIGURES); empty: all


FLOWS_FIGURES = ("joins", "step_start", "overhead")



class QuickFlows(TypedDict):
    """The sizes `bench flows --quick` replaces."""

    join_keys: int
    start_samples: int
    start_warmup: int
    noop_samples: int
    size: str
    warmup_size: str
    repeats: int


QuickFlowsName = Literal["join_keys", "start_samples", "start_warmup", "noop_samples", "size", "warmup_size", "repeats"]

# `bench flows --quick`: small sizes everywhere, for a smoke test.
QUICK_FLOWS: QuickFlows = {"join_keys": 2000, "start_samples": 10, "start_warmup": 2, "noop_samples": 5, "size": "1MB",
                           "warmup_size": "0", "repeats": 1}


class QuickTasks(TypedDict):
    """The sizes `bench tasks --quick` replaces."""

    tasks: int
    latency_tasks: int
    busy_secs: float
    mixed_busy_secs: float
    spark_tasks: int


QuickTasksName = Literal["tasks", "latency_tasks", "busy_secs", "mixed_busy_secs", "spark_tasks"]

# `bench tasks --quick`: small sizes everywhere, for a smoke test.
QUICK_TASKS: QuickTasks = {"tasks": 5000, "latency_tasks": 500, "busy_secs": 0.25, "mixed_busy_secs": 1.0,
                           "spark_tasks": 50}


def quick_settings(settings: TasksSettings) -> TasksSettings:
    """The --quick sizes, for smoke tests."""
    return replace(settings, **QUICK_TASKS)


@dataclass(frozen=True)
class PeersSettings:
    tasks: int = 20_000  # the drain's backlog: `submits` one by one, the rest in bulk
    submits: int = 2000  # submitted one by one, one thread
    threaded_submits: int = 2000  # after the latency phase: one by one from PEERS_SUBMIT_THREADS threads at once
    latency_samples: int = 200  # submit → start, one task at a time on an idle system
    latency_gap_secs: float = 0.05  # pause after each sample
    peers: tuple[str, ...] = PEER_SYSTEMS
    processes: int = 2  # worker processes of every system
    redis_url: str = PEERS_REDIS_URL
    pg_dsn: str = PEERS_PG_DSN
    stall_secs: float = 120.0  # a drain with no task done for this long fails
    max_drain_secs: float = 300.0  # a drain still running after this is reported as partial, at its rate
    kittiwake_store: str | None = None  # the Kittiwake broker's store URL (`bench_store`); None: a throwaway SQLite directory


CELERY_POOLS = ("solo", "prefork")  # `bench celery --pools`: Celery's worker pools it runs each system with


@dataclass(frozen=True)
class CelerySettings:
    tasks: int = 5000  # null tasks submitted one by one, then drained by one worker
    pools: tuple[str, ...] = CELERY_POOLS
    concurrency: int = 2  # processes of the prefork pool (solo runs one)
    redis_url: str = PEERS_REDIS_URL  # claimed and emptied as `bench peers` does
    max_drain_secs: float = 300.0  # a drain still running after this fails its figure
    ratio_min: float = 3.0  # drain rate on Kittiwake over the same on Redis


WORKERS_FIGURES = ("map_drain", "map_results", "efficiency", "mix")


@dataclass(frozen=True)
class WorkersSettings:
    """`kittiwake bench workers`: the App and `kittiwake worker` with its default flags."""

    tasks: int = 100_000  # null tasks in each map drain
    processes: int = 2  # `kittiwake worker --processes`
    concurrency: int = 4  # `--concurrency` of the efficiency and mix figures (the drains use the default, 1)
    rounds: int = 4  # the efficiency figure: rounds × slots tasks of sleep_secs
    sleep_secs: float = 1.0  # the long tasks of the efficiency and mix figures
    short_secs: float = 0.001  # the short tasks of the mix
    mix_short: int = 2000  # short tasks in the mix
    mix_long_per_slot: int = 2  # long tasks in the mix, per slot
    mix_seed: int = 34  # the mix's order
    chunk: int = PEERS_BULK_CHUNK  # app.map's chunk
    worker_args: tuple[str, ...] = ()  # more `kittiwake worker` options, for A/B runs (e.g. --prefetch=1000)
    only: tuple[str, ...] = ()  # figures to run (WORKERS_FIGURES); empty: all
    stall_secs: float = 60.0  # a figure with no task done for this long fails
    durability: str = DURABILITY


MAPREDUCE_APPS = ("grep", "wordcount", "sort")  # `bench mapreduce --app`, and the order of its rows
MAPREDUCE_PARTITION_SIZES = ("100KB", "1MB", "10MB", "100MB")  # Albatross Figs 59/61/63's x axis


@dataclass(frozen=True)
class MapReduceSettings:
    """`kittiwake bench mapreduce`: the MapReduce apps on Kittiwake's workers and on PySpark, same input."""

    apps: tuple[str, ...] = MAPREDUCE_APPS
    size_bytes: int = 1_000_000_000  # every dataset: one per kind and partition size
    partition_sizes: tuple[int, ...] = (100_000, 1_000_000, 10_000_000, 100_000_000)
    reducers: int = 4  # reduce tasks on both systems (Spark: spark.sql.shuffle.partitions)
    nodes: int = 2  # `kittiwake worker --node n<i>` commands, one process each
    concurrency: int = 2  # `--concurrency` of each worker command
    pattern: str | None = None  # grep's; None: the seed's fourth most frequent word
    seed: int = 0  # gen-data's seed
    data_dir: str | None = None  # where datasets are kept and reused; None: a temp dir removed at the end
    spark_master: str = "local[2]"
    spark_driver_memory: str = "4g"
    sample_bytes: int = 20_000_000  # the reference check's input, at most
    warmup_bytes: int = 2_000_000  # input of each warm-up job: the smallest partitions' first files, at least one
    durability: str = DURABILITY
