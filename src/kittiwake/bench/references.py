"""The figures Kittiwake's benchmarks are held against: the seeds' numbers and the targets.

* TaskMaster §6, Table 1: single-task operations per second on one node backed
  by Bigtable, 500 client threads, 1 KB tasks.
* Fabriq (Figure 43): push latency of one message at 64 and 128 instances,
  p50 / p90 / p99.9.
* The targets of the benchmark issue, for this durable (fsync) single node.

A `ratio` in every report says how many times Kittiwake is ahead of the
reference: measured / reference for rates, reference / measured for
latencies, so above 1 is better either way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RateReference:
    """A throughput figure: the seed's tasks/s (None when the seed has none) and the target."""

    source: str | None
    tasks_per_sec: float | None
    target_tasks_per_sec: float


TASKMASTER_TABLE_1 = "TaskMaster §6 Table 1"

OPS: dict[str, RateReference] = {
    "enqueue": RateReference(TASKMASTER_TABLE_1, 1630.0, 15_000.0),
    "fifo_enqueue": RateReference(TASKMASTER_TABLE_1, 2386.0, 20_000.0),
    "lease_dequeue": RateReference(TASKMASTER_TABLE_1, 1485.0, 10_000.0),
    "batch_enqueue": RateReference(None, None, 150_000.0),
    "batch_lease_dequeue": RateReference(None, None, 60_000.0),
}

FABRIQ_PUSH_LATENCY_MS = {"p50": 0.42, "p90": 0.89, "p999": 11.98}
FABRIQ = "Fabriq push latency"

# Idle enqueue round trip: p50 within this much of the disk's own fsync p50.
TARGET_P50_OVER_FSYNC_MS = 0.3
TARGET_P999_MS = 5.0

# Scale targets.
TARGET_BIG_QUEUE_LEASE_P50_FACTOR = 2.0  # vs the same call on an empty broker
TARGET_RSS_MB = 500.0
TARGET_LIST_QUEUES_MS = 50.0
TARGET_STATS_MS = 1.0
TARGET_RECOVERY_S = 10.0
TASKMASTER_RECOVERY = 'TaskMaster §5.3 "a few seconds"'


def rate_ratio(measured: float | None, reference: float | None) -> float | None:
    if not measured or not reference:
        return None
    return round(measured / reference, 2)


def latency_ratio(reference_ms: float | None, measured_ms: float | None) -> float | None:
    if not measured_ms or not reference_ms:
        return None
    return round(reference_ms / measured_ms, 2)


# Task scheduling (`bench tasks`): Albatross §5.4.3 and CloudKon §3.3.4–3.3.5.
ALBATROSS = "Albatross §5.4.3, 64 nodes"
ALBATROSS_NULL_TASKS_PER_SEC = 10_666.0  # Figure 54
ALBATROSS_LATENCY_MS = {"p50": 5.0, "max": 60.0}  # Figure 53
ALBATROSS_SPARK_TASKS_PER_SEC = 2_000.0  # where Albatross expects Spark's scheduler to saturate
ALBATROSS_SPARK_LATENCY_P50_MS = 50.0
CLOUDKON = "CloudKon §3.3.5"
CLOUDKON_EFFICIENCY = {"16ms": 0.40, "128ms": 0.87}  # Figure 33, and "up to 87%" overall

TARGET_NULL_TASKS_PER_SEC = 20_000.0  # two worker processes, durable broker, this 2-core machine
TARGET_TASK_LATENCY_MS = {"p50": 1.0, "p99": 5.0, "max": 60.0}  # submit → start
TARGET_EFFICIENCY = {"16ms": 0.95, "128ms": 0.99}
TARGET_RATIO_VS_SPARK = 100.0

# Flows (`bench flows`): joins, step start, the pipeline against one plain PySpark script.
TARGET_JOIN_TOKENS_PER_SEC = 10_000.0  # a three-input join, four producers, durable
TARGET_STEP_START_MS = {"p50": 20.0, "p99": 100.0}  # last token committed -> Spark step entered
TARGET_FLOW_OVERHEAD_PERCENT = 5.0  # the demo pipeline vs the same work as one PySpark script
TARGET_RERUN_ONE_CHANGED_RATIO = 0.3  # a re-run after one of six shards changed ÷ the first run
TARGET_RERUN_UNCHANGED_RATIO = 0.1  # a re-run with nothing changed ÷ the first run

# Workers (`bench workers`): the App and `kittiwake worker` with its default flags, durable broker.
TARGET_WORKERS_MAP_TASKS_PER_SEC = 15_000.0  # app.map drain, two processes of one slot, ignore_result
TARGET_WORKERS_MAP_RESULTS_TASKS_PER_SEC = 12_000.0  # the same, every result collected with app.results
TARGET_WORKERS_EFFICIENCY = 0.99  # 1 s tasks on two processes of four slots
TARGET_WORKERS_IDLE_WHILE_WAITING_MS = 20.0  # no slot idle while a task waits, beyond about one lease round trip

# `bench mapreduce` (Albatross §5.4, Figs 59/61/63): Kittiwake's MB/s ÷ Spark's on the same input, per
# partition size in bytes, at least; and Kittiwake's MB/s from 1 MB to 100 MB partitions varying by at
# most this share of its highest ((max - min) / max).
TARGET_MAPREDUCE_RATIO = {100_000: 10.0, 1_000_000: 4.0, 100_000_000: 0.8}
TARGET_MAPREDUCE_SPREAD = 0.30
MAPREDUCE_SPREAD_RANGE = (1_000_000, 100_000_000)

# `bench producer`: one thread enqueueing through a batching producer (CMQ's producer), durable at flush
TARGET_PRODUCER_TASKS_PER_SEC = 50_000.0
TARGET_PRODUCER_RATIO_VS_HUEY = 15.0  # Huey's single enqueue on Redis, measured in the same run
TARGET_PRODUCER_ADDED_P50_MS = 0.2  # producer enqueue + sent() over a plain enqueue, idle broker
