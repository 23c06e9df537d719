"""The step-start probe of `bench flows`: how soon a Spark step runs once its last token is committed.

`probe` is a flow of one Spark step with two inputs, `left` and `right`:
starting a run enqueues one token at each (one atomic update); the commit
that brings the second completes the step's join and enqueues its job. The
step function notes `time.time()` as its first act and hands it to the
measuring thread (`ENTERED`, in this process: the probe's Spark worker runs
in the benchmark's process, on the benchmark's session). A sample is the
time from the moment the update's acknowledgement was back at the producer
to that entry: the broker's join, the worker's parked long-poll answered,
the job decoded and its run's record read, the slot thread entered.

The references, measured on the same broker and session in the same run:
`spark_noop_ms` — a Spark job that does nothing
(``spark.range(0, 1, 1, 1).count()``: one task, no Python worker), what the
step pays to start any Spark work; and `lease_round_trip_ms` — one lease of a waiting task, request
to reply (a durable write), the broker's share of starting any job.
"""

from __future__ import annotations

import queue
import time
from typing import Any

from kittiwake.flow import Flow

PROBE_FLOW = "benchprobe"
ROUND_TRIP_QUEUE = "bench.lease#probe"
ENTRY_TIMEOUT_SECS = 60.0
SAMPLE_PAUSE_SECS = 0.02  # between samples: the previous run's settle and finish are over

ENTERED: queue.SimpleQueue[tuple[Any, float]] = queue.SimpleQueue()

probe = Flow(PROBE_FLOW, lease_secs=30, max_attempts=1)


@probe.step(engine="spark", inputs={"left": probe.input("left"), "right": probe.input("right")})
def meet(spark: Any, left: Any, right: Any) -> float:
    entered = time.time()
    ENTERED.put((left, entered))
    return entered


def step_start_samples(client: Any, data_dir: str, samples: int, warmup: int, progress: Any = None) -> list[int]:
    """`samples` step-start latencies in ns (after `warmup` unmeasured ones), one run at a time."""
    stamp = time.strftime("%H%M%S")
    latencies: list[int] = []
    for number in range(warmup + samples):
        probe.run(client, {"left": number, "right": number}, data_dir=data_dir, run_id=f"probe-{stamp}-{number}")
        acknowledged = time.time()
        sample, entered = ENTERED.get(timeout=ENTRY_TIMEOUT_SECS)
        if sample != number:
            raise RuntimeError(f"the probe step ran sample {sample}, expected {number}")
        if number >= warmup:
            latencies.append(max(0, int((entered - acknowledged) * 1e9)))
        if progress is not None:
            progress(number + 1)
        time.sleep(SAMPLE_PAUSE_SECS)
    return latencies


def spark_noop_samples(spark: Any, samples: int, warmup: int = 3) -> list[int]:
    """Latencies in ns of a Spark job that does nothing (one task over one row, all in the JVM:
    ``spark.range(0, 1, 1, 1).count()``), on `spark`, one at a time."""
    latencies: list[int] = []
    for number in range(warmup + samples):
        began = time.perf_counter_ns()
        spark.range(0, 1, 1, 1).count()
        if number >= warmup:
            latencies.append(time.perf_counter_ns() - began)
    return latencies


def lease_round_trip_samples(url: str, samples: int, warmup: int = 10) -> list[int]:
    """Latencies in ns of one lease of a waiting task (request → reply; a lease is a durable
    write), the broker's share of starting any job; each task is dequeued after, unmeasured."""
    from kittiwake.client import Client

    latencies: list[int] = []
    with Client(url) as client:
        for number in range(warmup + samples):
            client.enqueue(ROUND_TRIP_QUEUE, b"job", pid=f"r{number:08d}")
            began = time.perf_counter_ns()
            leased = client.lease(ROUND_TRIP_QUEUE, max_tasks=1, lease_secs=30)
            took = time.perf_counter_ns() - began
            if not leased:
                raise RuntimeError("the lease round trip found no task")
            client.dequeue(leased)
            if number >= warmup:
                latencies.append(took)
    return latencies
