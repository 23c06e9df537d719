"""`kittiwake bench cluster`'s settings and targets (the command and what each figure is: `cluster`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kittiwake.bench.settings import DATA_BYTES, DURABILITIES, DURABILITY

TARGET_RATIO_2_VS_1_MIN = 1.6
USER_PATH_CEILING = 1.5  # not a target: two cores cap the user path near 1.5×
TARGET_CPU_PER_TASK_RATIO_MAX = 1.1
TARGET_HOPS_TOLERANCE = 0.05  # |measured / model − 1|
TARGET_EXTRA_REQUESTS_PER_TASK_MAX = 0.01
TARGET_LOAD_DEVIATION_MAX = 0.02
FABRIQ_LOAD_DEVIATION = 0.095  # Fabriq's worst server vs the mean (chapter 4)
TARGET_PUSH_P50_EXTRA_MS = 0.1


@dataclass(frozen=True)
class ClusterBenchSettings:
    drain_tasks: int = 100_000  # FIFO tasks of each broker-bound drain
    batch: int = 1000  # tasks per lease and per dequeue of the drains' consumers
    # consumer processes of each drain, consumer i near node i mod 2: with one request in flight each,
    # two leave one broker idle between their round trips (~45% of a core here); four keep it busy
    consumers: int = 4
    user_tasks: int = 20_000  # null tasks of each user-path drain (app.map)
    worker_processes: int = 2  # `kittiwake worker --processes` of the user path
    chunk: int = 1000  # app.map's chunk
    hop_nodes: tuple[int, ...] = (4, 8)
    hop_tasks_per_node: int = 250
    hop_durability: str | None = "os"  # None: the run's durability
    spread_nodes: int = 8
    producers: int = 8
    producer_tasks: int = 1000  # FIFO tasks each producer pushes, one per request
    push_samples: int = 1000  # single enqueues timed per system
    push_warmup: int = 50
    data_bytes: int = DATA_BYTES
    durability: str = DURABILITY


QUICK_CLUSTER: dict[str, Any] = {
    "drain_tasks": 4000, "user_tasks": 1000, "worker_processes": 1, "hop_nodes": (4,), "hop_tasks_per_node": 25, "hop_durability": None, "spread_nodes": 4,
    "consumers": 2, "producers": 2, "producer_tasks": 100, "push_samples": 50, "push_warmup": 5,
}
CLUSTER = ClusterBenchSettings()
